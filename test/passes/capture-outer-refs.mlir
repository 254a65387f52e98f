// RUN: recir-opt -p capture-outer-refs --split-input-file %s | filecheck %s

// One capture: the outer %step becomes a trailing argument, passed at the
// recursive and the outer invoke.
func.func @one(%n: i32, %step: i32) -> i32 {
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

// CHECK-LABEL: func.func private @down(%k: i32, %step: i32) -> i32 {
// CHECK:           %{{.*}} = arith.subi %k, %step : i32
// CHECK-NEXT:      %{{.*}} = invoke.invoke @down(%{{.*}}, %step) : (i32, i32) -> i32
// CHECK:         func.return %{{.*}} : i32
// CHECK-LABEL: func.func @one(%n: i32, %step: i32) -> i32 {
// CHECK-NEXT:    %{{.*}} = invoke.invoke @down(%n, %step) : (i32, i32) -> i32
// CHECK-NEXT:    func.return

// -----

// A capture used only inside a nested region (an scf.if branch), and an
// outer constant that is cloned instead of passed.
func.func @nested(%x: tensor<4xf32>, %flag: i1) -> tensor<4xf32> {
  %c = tmath.constant dense<1.0> : tensor<4xf32>
  invoke.subgraph @pick(%b: i1) -> tensor<4xf32> {
    %r = scf.if %b -> (tensor<4xf32>) {
      %y = tmath.add %x, %c : tensor<4xf32>
      scf.yield %y : tensor<4xf32>
    } else {
      scf.yield %c : tensor<4xf32>
    }
    invoke.return %r : tensor<4xf32>
  }
  %r = invoke.invoke @pick(%flag) : (i1) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// CHECK-LABEL: func.func private @pick(%b: i1, %x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    %[[C:.*]] = tmath.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = scf.if %b -> (tensor<4xf32>) {
// CHECK-NEXT:      %{{.*}} = tmath.add %x, %[[C]] : tensor<4xf32>
// CHECK:         } else {
// CHECK-NEXT:      scf.yield %[[C]] : tensor<4xf32>
// CHECK-LABEL: func.func @nested(%x: tensor<4xf32>, %flag: i1) -> tensor<4xf32> {
// CHECK:         %{{.*}} = invoke.invoke @pick(%flag, %x) : (i1, tensor<4xf32>) -> tensor<4xf32>

// -----

// Mutual recursion: @ping captures %a, @pong captures %b; each passes the
// other's captures at its invoke, so both end up with both.
func.func @mutual(%n: i32, %a: i32, %b: i32) -> i32 {
  invoke.subgraph @ping(%k: i32) -> i32 {
    %zero = arith.constant 0 : i32
    %done = arith.cmpi sle, %k, %zero : i32
    %r = scf.if %done -> (i32) {
      scf.yield %zero : i32
    } else {
      %k1 = arith.subi %k, %a : i32
      %p = invoke.invoke @pong(%k1) : (i32) -> i32
      scf.yield %p : i32
    }
    invoke.return %r : i32
  }
  invoke.subgraph @pong(%k: i32) -> i32 {
    %k1 = arith.subi %k, %b : i32
    %p = invoke.invoke @ping(%k1) : (i32) -> i32
    invoke.return %p : i32
  }
  %r = invoke.invoke @ping(%n) : (i32) -> i32
  func.return %r : i32
}

// CHECK-LABEL: func.func private @pong(%k: i32, %b: i32, %a: i32) -> i32 {
// CHECK-NEXT:    %{{.*}} = arith.subi %k, %b : i32
// CHECK-NEXT:    %{{.*}} = invoke.invoke @ping(%{{.*}}, %a, %b) : (i32, i32, i32) -> i32
// CHECK-LABEL: func.func private @ping(%k: i32, %a: i32, %b: i32) -> i32 {
// CHECK:           %{{.*}} = invoke.invoke @pong(%{{.*}}, %b, %a) : (i32, i32, i32) -> i32
// CHECK-LABEL: func.func @mutual(%n: i32, %a: i32, %b: i32) -> i32 {
// CHECK-NEXT:    %{{.*}} = invoke.invoke @ping(%n, %a, %b) : (i32, i32, i32) -> i32

// -----

// Several call sites pass the same capture.
func.func @sites(%x: f32, %y: f32, %s: f32) -> (f32, f32) {
  invoke.subgraph @scale(%v: f32) -> f32 {
    %r = arith.mulf %v, %s : f32
    invoke.return %r : f32
  }
  %a = invoke.invoke @scale(%x) : (f32) -> f32
  %b = invoke.invoke @scale(%y) : (f32) -> f32
  func.return %a, %b : f32, f32
}

// CHECK-LABEL: func.func private @scale(%v: f32, %s: f32) -> f32 {
// CHECK-NEXT:    %{{.*}} = arith.mulf %v, %s : f32
// CHECK-NEXT:    func.return %{{.*}} : f32
// CHECK-LABEL: func.func @sites(%x: f32, %y: f32, %s: f32) -> (f32, f32) {
// CHECK-NEXT:    %{{.*}} = invoke.invoke @scale(%x, %s) : (f32, f32) -> f32
// CHECK-NEXT:    %{{.*}} = invoke.invoke @scale(%y, %s) : (f32, f32) -> f32

// -----

// Nothing to capture: the signature stays as declared.
func.func @closed(%x: i32) -> i32 {
  invoke.subgraph @id(%v: i32) -> i32 {
    invoke.return %v : i32
  }
  %r = invoke.invoke @id(%x) : (i32) -> i32
  func.return %r : i32
}

// CHECK-LABEL: func.func private @id(%v: i32) -> i32 {
// CHECK-NEXT:    func.return %v : i32
// CHECK-LABEL: func.func @closed(%x: i32) -> i32 {
// CHECK-NEXT:    %{{.*}} = invoke.invoke @id(%x) : (i32) -> i32

// -----

// A subgraph nested in a subgraph: the inner one captures a value of the
// outer function (which the outer subgraph then passes on) and a value of
// the outer subgraph.
func.func @nest(%x: f32, %w: f32) -> f32 {
  invoke.subgraph @outer(%v: f32) -> f32 {
    %t = arith.addf %v, %v : f32
    invoke.subgraph @inner(%u: f32) -> f32 {
      %p = arith.mulf %u, %w : f32
      %q = arith.addf %p, %t : f32
      invoke.return %q : f32
    }
    %r = invoke.invoke @inner(%v) : (f32) -> f32
    invoke.return %r : f32
  }
  %r = invoke.invoke @outer(%x) : (f32) -> f32
  func.return %r : f32
}

// CHECK-LABEL: func.func private @inner(%u: f32, %w: f32, %t: f32) -> f32 {
// CHECK-NEXT:    %{{.*}} = arith.mulf %u, %w : f32
// CHECK-NEXT:    %{{.*}} = arith.addf %{{.*}}, %t : f32
// CHECK-LABEL: func.func private @outer(%v: f32, %w: f32) -> f32 {
// CHECK-NEXT:    %t = arith.addf %v, %v : f32
// CHECK-NEXT:    %{{.*}} = invoke.invoke @inner(%v, %w, %t) : (f32, f32, f32) -> f32
// CHECK-LABEL: func.func @nest(%x: f32, %w: f32) -> f32 {
// CHECK-NEXT:    %{{.*}} = invoke.invoke @outer(%x, %w) : (f32, f32) -> f32
