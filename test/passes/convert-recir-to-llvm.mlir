// RUN: recir-opt -p convert-recir-to-llvm %s | filecheck %s
// Functions take a context first; the prologue checks the stack (a recorded
// error, Ctrl-C or a timeout moves the limit to the top; the load is atomic,
// so loops made of tail calls read it again); failed checks branch to one block
// that records the first error (the site its argument, and an index check's
// index and length, 0 and -1 for other checks) and raises the limit, then to one
// failure return; calls stay in tail position; two results go
// through out-pointers; division is guarded.

func.func private @half(%n: i32, %d: i32) -> (i32, i32) {
  %q = arith.divsi %n, %d : i32
  %ok = arith.cmpi sge, %q, %d : i32
  cf.assert %ok, "quotient too small"
  func.return %q, %d : i32, i32
}
func.func private @at(%i: i64) -> i64 {
  %four = arith.constant 4 : i64
  %inside = arith.cmpi ult, %i, %four : i64
  cf.assert %inside, "index out of range"
  func.return %i : i64
}
func.func @main(%n: i32) -> i32 {
  %two = arith.constant 2 : i32
  %q, %r = invoke.invoke @half(%n, %two) : (i32, i32) -> (i32, i32)
  func.return %q : i32
}

// CHECK:       builtin.module attributes {recir.error_sites = ["{{.*}}:{{[0-9]+}}:3: error: 'arith.divsi' op division by zero", "{{.*}}:{{[0-9]+}}:3: error: 'arith.divsi' op overflows", "quotient too small", "{{.*}}:10:1: error: recursion in @half is too deep for the native stack", "index out of range", "{{.*}}:16:1: error: recursion in @at is too deep for the native stack", "{{.*}}:22:1: error: recursion in @main is too deep for the native stack"]} {
// CHECK-LABEL: llvm.func internal @half(%0: !llvm.ptr, %n: i32, %d: i32, %1: !llvm.ptr, %2: !llvm.ptr) {
// CHECK-NEXT:    %[[ZERO0:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    %[[FRAME:.*]] = llvm.call_intrinsic "llvm.frameaddress.p0"(%[[ZERO0]]) : (i32) -> !llvm.ptr
// CHECK-NEXT:    %[[SP:.*]] = llvm.ptrtoint %[[FRAME]] : !llvm.ptr to i64
// CHECK-NEXT:    %[[LIMIT:.*]] = llvm.load %0 atomic monotonic : !llvm.ptr -> i64
// CHECK-NEXT:    %[[ROOM:.*]] = llvm.icmp "uge" %[[SP]], %[[LIMIT]] : i64
// CHECK-NEXT:    llvm.cond_br %[[ROOM]], ^[[BODY:.*]], ^[[STOP:.*]]
// CHECK-NEXT:  ^[[BODY]]:
// CHECK-NEXT:    %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    %[[NONZERO:.*]] = llvm.icmp "ne" %d, %[[ZERO]] : i32
// CHECK-NEXT:    %[[SITE0:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    %[[ZEROI:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:    %[[NONE:.*]] = llvm.mlir.constant(-1) : i64
// CHECK-NEXT:    llvm.cond_br %[[NONZERO]], ^{{.*}}, ^[[CHECK:.*]](%[[SITE0]], %[[ZEROI]], %[[NONE]] : i32, i64, i64)
// CHECK:         %[[SITE1:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:    %[[ZERO1I:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:    %[[NONE1:.*]] = llvm.mlir.constant(-1) : i64
// CHECK-NEXT:    llvm.cond_br %{{.*}}, ^{{.*}}, ^[[CHECK]](%[[SITE1]], %[[ZERO1I]], %[[NONE1]] : i32, i64, i64)
// CHECK:         %q = llvm.sdiv %n, %d : i32
// CHECK-NEXT:    %ok = llvm.icmp "sge" %q, %d : i32
// CHECK-NEXT:    %[[SITE2:.*]] = llvm.mlir.constant(2 : i32) : i32
// CHECK-NEXT:    %[[ZERO2I:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:    %[[NONE2:.*]] = llvm.mlir.constant(-1) : i64
// CHECK-NEXT:    llvm.cond_br %ok, ^[[RET:.*]], ^[[CHECK]](%[[SITE2]], %[[ZERO2I]], %[[NONE2]] : i32, i64, i64)
// CHECK-NEXT:  ^[[RET]]:
// CHECK-NEXT:    llvm.store %q, %1 : i32, !llvm.ptr
// CHECK-NEXT:    llvm.store %d, %2 : i32, !llvm.ptr
// CHECK-NEXT:    llvm.return
// CHECK-NEXT:  ^[[CHECK]](%[[SITE:.*]]: i32, %[[INDEX:.*]]: i64, %[[LENGTH:.*]]: i64):
// CHECK-NEXT:    %[[E8:.*]] = llvm.mlir.constant(8) : i64
// CHECK-NEXT:    %[[E:.*]] = llvm.getelementptr %0[%[[E8]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[S12:.*]] = llvm.mlir.constant(12) : i64
// CHECK-NEXT:    %[[S:.*]] = llvm.getelementptr %0[%[[S12]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[I112:.*]] = llvm.mlir.constant(112) : i64
// CHECK-NEXT:    %[[I:.*]] = llvm.getelementptr %0[%[[I112]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[L120:.*]] = llvm.mlir.constant(120) : i64
// CHECK-NEXT:    %[[L:.*]] = llvm.getelementptr %0[%[[L120]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[OLDE:.*]] = llvm.load %[[E]] : !llvm.ptr -> i32
// CHECK-NEXT:    %[[OLDS:.*]] = llvm.load %[[S]] : !llvm.ptr -> i32
// CHECK-NEXT:    %[[OLDI:.*]] = llvm.load %[[I]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[OLDL:.*]] = llvm.load %[[L]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[Z2:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    %[[FIRST:.*]] = llvm.icmp "eq" %[[OLDE]], %[[Z2]] : i32
// CHECK-NEXT:    %[[TWO:.*]] = llvm.mlir.constant(2 : i32) : i32
// CHECK-NEXT:    %[[NEWE:.*]] = llvm.select %[[FIRST]], %[[TWO]], %[[OLDE]] : i1, i32
// CHECK-NEXT:    llvm.store %[[NEWE]], %[[E]] : i32, !llvm.ptr
// CHECK-NEXT:    %[[NEWS:.*]] = llvm.select %[[FIRST]], %[[SITE]], %[[OLDS]] : i1, i32
// CHECK-NEXT:    llvm.store %[[NEWS]], %[[S]] : i32, !llvm.ptr
// CHECK-NEXT:    %[[NEWI:.*]] = llvm.select %[[FIRST]], %[[INDEX]], %[[OLDI]] : i1, i64
// CHECK-NEXT:    llvm.store %[[NEWI]], %[[I]] : i64, !llvm.ptr
// CHECK-NEXT:    %[[NEWL:.*]] = llvm.select %[[FIRST]], %[[LENGTH]], %[[OLDL]] : i1, i64
// CHECK-NEXT:    llvm.store %[[NEWL]], %[[L]] : i64, !llvm.ptr
// CHECK-NEXT:    %[[TOP:.*]] = llvm.mlir.constant(-1) : i64
// CHECK-NEXT:    llvm.store %[[TOP]], %0 : i64, !llvm.ptr
// CHECK-NEXT:    llvm.br ^[[FAIL:.*]]
// CHECK-NEXT:  ^[[STOP]]:
// CHECK-NEXT:    %[[STACK:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK:         llvm.select %{{.*}}, %[[STACK]], %{{.*}} : i1, i32
// CHECK:         llvm.br ^[[FAIL]]
// CHECK-NEXT:  ^[[FAIL]]:
// CHECK-NEXT:    llvm.return
// CHECK-NEXT:  }

// An index check passes what it compared: the index and the length.
// CHECK-LABEL: llvm.func internal @at(
// CHECK:         %[[N:.*]] = llvm.mlir.constant(4) : i64
// CHECK-NEXT:    %[[OK:.*]] = llvm.icmp "ult" %i, %[[N]] : i64
// CHECK-NEXT:    %[[SITE4:.*]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT:    llvm.cond_br %[[OK]], ^{{.*}}, ^{{.*}}(%[[SITE4]], %i, %[[N]] : i32, i64, i64)

// CHECK-LABEL: llvm.func @main(%{{.*}}: !llvm.ptr, %n_1: i32) -> i32 {
// CHECK-NEXT:    %{{.*}} = llvm.mlir.constant(1) : i64
// CHECK-NEXT:    %[[Q:.*]] = llvm.alloca %{{.*}} x i32
// CHECK:         %[[R:.*]] = llvm.alloca %{{.*}} x i32
// CHECK:         llvm.cond_br %{{.*}}, ^[[MAINBODY:.*]], ^[[MAINSTOP:.*]]
// CHECK-NEXT:  ^[[MAINBODY]]:
// CHECK-NEXT:    %two = llvm.mlir.constant(2 : i32) : i32
// CHECK-NEXT:    llvm.call @half(%[[CTX:.*]], %n_1, %two, %[[Q]], %[[R]]) : (!llvm.ptr, i32, i32, !llvm.ptr, !llvm.ptr) -> ()
// CHECK-NEXT:    %q_1 = llvm.load %[[Q]] : !llvm.ptr -> i32
// CHECK-NEXT:    %r = llvm.load %[[R]] : !llvm.ptr -> i32
// CHECK-NEXT:    llvm.return %q_1 : i32
// CHECK-NEXT:  ^[[MAINSTOP]]:
// CHECK:         llvm.br ^[[MAINFAIL:.*]]
// CHECK-NEXT:  ^[[MAINFAIL]]:
// CHECK-NEXT:    %[[ZR:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    llvm.return %[[ZR]] : i32

// With arith-cf=false the arith ops and cf branches stay (the translation to
// LLVM IR takes them):
// RUN: recir-opt -p "convert-recir-to-llvm{arith-cf=false}" %s | filecheck %s --check-prefix=ARITH
// ARITH-LABEL: llvm.func internal @half(
// ARITH:         %q = arith.divsi %n, %d : i32
// ARITH-NEXT:    %ok = arith.cmpi sge, %q, %d : i32
// ARITH-NEXT:    %[[SITE2:.*]] = arith.constant 2 : i32
// ARITH-NEXT:    %[[ZERO2I:.*]] = arith.constant 0 : i64
// ARITH-NEXT:    %[[NONE2:.*]] = arith.constant -1 : i64
// ARITH-NEXT:    llvm.cond_br %ok, ^{{.*}}, ^{{.*}}(%[[SITE2]], %[[ZERO2I]], %[[NONE2]] : i32, i64, i64)
// ARITH-LABEL: llvm.func @main(
// ARITH-NOT:     llvm.mlir.constant(2 : i32)
// ARITH:         arith.constant 2 : i32
