// RUN: recir-opt -p "convert-recir-to-llvm{max_depth=100}" %s | filecheck %s
// With max_depth, the prologue also reads the context's depth (offset 88):
// at the limit the call fails with code 5; the body stores one more, and
// every return, the error return included, puts back what it read. Code 5
// records the function's second site. Both sites name a gradient's @f_fwd
// and @f_bwd (a pair) by the model's @f.

func.func @down(%k: i32) -> i32 {
  %one = arith.constant 1 : i32
  %km = arith.subi %k, %one : i32
  %r = invoke.invoke @down(%km) : (i32) -> i32
  func.return %r : i32
}
func.func private @walk_fwd(%k: i32) -> i32 {
  func.return %k : i32
}
func.func private @walk_bwd(%k: i32) -> i32 {
  func.return %k : i32
}
func.func private @lone_fwd(%k: i32) -> i32 {
  func.return %k : i32
}

// CHECK:       builtin.module attributes {recir.error_sites = [
// CHECK-SAME:    "{{.*}}:8:1: error: recursion in @down is too deep for the native stack", "{{.*}}:8:1: error: recursion in @down is deeper than max_depth",
// CHECK-SAME:    "{{.*}}:14:1: error: recursion in @walk is too deep for the native stack", "{{.*}}:14:1: error: recursion in @walk is deeper than max_depth",
// CHECK-SAME:    "{{.*}}:17:1: error: recursion in @walk is too deep for the native stack", "{{.*}}:17:1: error: recursion in @walk is deeper than max_depth",
// CHECK-SAME:    "{{.*}}:20:1: error: recursion in @lone_fwd is too deep for the native stack", "{{.*}}:20:1: error: recursion in @lone_fwd is deeper than max_depth"]}
// CHECK-LABEL: llvm.func @down(%0: !llvm.ptr, %k: i32) -> i32 {
// CHECK:         %[[ROOM:.*]] = llvm.icmp "uge" %{{.*}}, %{{.*}} : i64
// CHECK-NEXT:    %[[AT:.*]] = llvm.mlir.constant(88) : i64
// CHECK-NEXT:    %[[FIELD:.*]] = llvm.getelementptr %0[%[[AT]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[DEPTH:.*]] = llvm.load %[[FIELD]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[MAX:.*]] = llvm.mlir.constant(100) : i64
// CHECK-NEXT:    %[[UNDER:.*]] = llvm.icmp "ult" %[[DEPTH]], %[[MAX]] : i64
// CHECK:         %[[GO:.*]] = llvm.and %{{.*}}, %[[UNDER]] : i1
// CHECK-NEXT:    llvm.cond_br %[[GO]], ^[[BODY:.*]], ^[[STOP:.*]]
// CHECK-NEXT:  ^[[BODY]]:
// CHECK-NEXT:    %[[ONE:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:    %[[DEEPER:.*]] = llvm.add %[[DEPTH]], %[[ONE]] : i64
// CHECK-NEXT:    llvm.store %[[DEEPER]], %[[FIELD]] : i64, !llvm.ptr
// CHECK:         %[[R:.*]] = llvm.call @down(%0, %{{.*}}) : (!llvm.ptr, i32) -> i32
// CHECK-NEXT:    llvm.store %[[DEPTH]], %[[FIELD]] : i64, !llvm.ptr
// CHECK-NEXT:    llvm.return %[[R]] : i32
// CHECK-NEXT:  ^[[STOP]]:
// CHECK-NEXT:    %[[CODE:.*]] = llvm.mlir.constant(5 : i32) : i32
// CHECK-NEXT:    %[[STACK:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:    %[[FIRST:.*]] = llvm.select %[[ROOM]], %[[CODE]], %[[STACK]] : i1, i32
// CHECK-NEXT:    %[[FIVE:.*]] = llvm.mlir.constant(5 : i32) : i32
// CHECK-NEXT:    %[[DEEPER:.*]] = llvm.icmp "eq" %[[FIRST]], %[[FIVE]] : i32
// CHECK-NEXT:    %[[DEPTH_SITE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:    %[[STACK_SITE:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    %[[SITE:.*]] = llvm.select %[[DEEPER]], %[[DEPTH_SITE]], %[[STACK_SITE]] : i1, i32
// CHECK:         llvm.select %{{.*}}, %[[SITE]], %{{.*}} : i1, i32
// CHECK:         llvm.br ^[[FAIL:.*]]
// CHECK-NEXT:  ^[[FAIL]]:
// CHECK-NEXT:    %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    llvm.store %[[DEPTH]], %[[FIELD]] : i64, !llvm.ptr
// CHECK-NEXT:    llvm.return %[[ZERO]] : i32
// CHECK-NEXT:  }
