// RUN: RECIR_ROUNDTRIP
// RUN: recir-opt %s --split-input-file | recir-opt --split-input-file | filecheck %s

// A subgraph that recurses, uses an outer value, and is invoked from outside.
func.func @closure(%n: i32, %step: i32) -> i32 {
  invoke.subgraph @down(%k: i32) -> i32 {
    %zero = arith.constant 0 : i32
    %done = arith.cmpi sle, %k, %zero : i32
    %r = scf.if %done -> (i32) {
      scf.yield %zero : i32
    } else {
      %k1 = arith.subi %k, %step : i32
      %a = invoke.invoke @down(%k1) : (i32) -> i32
      scf.yield %a : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @down(%n) : (i32) -> i32
  func.return %r : i32
}

// CHECK-LABEL: func.func @closure(%n: i32, %step: i32) -> i32 {
// CHECK-NEXT:    invoke.subgraph @down(%k: i32) -> i32 {
// CHECK-NEXT:      %{{.*}} = arith.constant 0 : i32
// CHECK-NEXT:      %{{.*}} = arith.cmpi sle, %k, %{{.*}} : i32
// CHECK-NEXT:      %{{.*}} = scf.if %{{.*}} -> (i32) {
// CHECK-NEXT:        scf.yield %{{.*}} : i32
// CHECK-NEXT:      } else {
// CHECK-NEXT:        %{{.*}} = arith.subi %k, %step : i32
// CHECK-NEXT:        %{{.*}} = invoke.invoke @down(%{{.*}}) : (i32) -> i32
// CHECK-NEXT:        scf.yield %{{.*}} : i32
// CHECK-NEXT:      }
// CHECK-NEXT:      invoke.return %{{.*}} : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    %{{.*}} = invoke.invoke @down(%n) : (i32) -> i32
// CHECK-NEXT:    func.return %{{.*}} : i32
// CHECK-NEXT:  }

// -----

// Mutual recursion; @odd is invoked before the op that defines it. The
// concurrent marker and multiple results round-trip.
func.func @parity(%n: i32) -> (i1, i1) {
  invoke.subgraph @even(%k: i32) -> i1 {
    %zero = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %is0 = arith.cmpi eq, %k, %zero : i32
    %r = scf.if %is0 -> (i1) {
      %t = arith.constant true
      scf.yield %t : i1
    } else {
      %k1 = arith.subi %k, %one : i32
      %o = invoke.invoke @odd(%k1) : (i32) -> i1
      scf.yield %o : i1
    }
    invoke.return %r : i1
  }
  invoke.subgraph @odd(%k: i32) -> i1 {
    %zero = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %is0 = arith.cmpi eq, %k, %zero : i32
    %r = scf.if %is0 -> (i1) {
      %f = arith.constant false
      scf.yield %f : i1
    } else {
      %k1 = arith.subi %k, %one : i32
      %e = invoke.invoke @even(%k1) : (i32) -> i1
      scf.yield %e : i1
    }
    invoke.return %r : i1
  }
  %a = invoke.invoke @even(%n) concurrent : (i32) -> i1
  %b = invoke.invoke @odd(%n) : (i32) -> i1
  %a2 = invoke.join %a : (i1) -> i1
  func.return %a2, %b : i1, i1
}

// CHECK-LABEL: func.func @parity(%n: i32) -> (i1, i1) {
// CHECK-NEXT:    invoke.subgraph @even(%k: i32) -> i1 {
// CHECK:           %{{.*}} = invoke.invoke @odd(%{{.*}}) : (i32) -> i1
// CHECK:           invoke.return %{{.*}} : i1
// CHECK-NEXT:    }
// CHECK-NEXT:    invoke.subgraph @odd(%k{{.*}}: i32) -> i1 {
// CHECK:           %{{.*}} = invoke.invoke @even(%{{.*}}) : (i32) -> i1
// CHECK:           invoke.return %{{.*}} : i1
// CHECK-NEXT:    }
// CHECK-NEXT:    %{{.*}} = invoke.invoke @even(%n) concurrent : (i32) -> i1
// CHECK-NEXT:    %{{.*}} = invoke.invoke @odd(%n) : (i32) -> i1
// CHECK-NEXT:    %{{.*}} = invoke.join %{{.*}} : (i1) -> i1
// CHECK-NEXT:    func.return %{{.*}}, %{{.*}} : i1, i1

// -----

// Invoking a func.func, with several results and none.
func.func @pair(%x: f32) -> (f32, f32) {
  func.return %x, %x : f32, f32
}
func.func @nothing() {
  func.return
}
func.func @caller(%x: f32) -> f32 {
  %a, %b = invoke.invoke @pair(%x) : (f32) -> (f32, f32)
  invoke.invoke @nothing() : () -> ()
  func.return %a : f32
}

// CHECK-LABEL: func.func @caller(%x: f32) -> f32 {
// CHECK-NEXT:    %{{.*}}, %{{.*}} = invoke.invoke @pair(%x) : (f32) -> (f32, f32)
// CHECK-NEXT:    invoke.invoke @nothing() : () -> ()
// CHECK-NEXT:    func.return %{{.*}} : f32

// -----

// The spawn budget a call starts with (invoke-clone-serial's).
func.func @start() -> i32 {
  %b = invoke.spawn_budget 4
  func.return %b : i32
}

// CHECK-LABEL: func.func @start() -> i32 {
// CHECK-NEXT:    %b = invoke.spawn_budget 4
// CHECK-NEXT:    func.return %b : i32

// -----

// The calling thread's native context (convert-invoke-to-gomp's).
func.func @here() -> !llvm.ptr {
  %ctx = invoke.context
  func.return %ctx : !llvm.ptr
}

// CHECK-LABEL: func.func @here() -> !llvm.ptr {
// CHECK-NEXT:    %ctx = invoke.context
// CHECK-NEXT:    func.return %ctx : !llvm.ptr
