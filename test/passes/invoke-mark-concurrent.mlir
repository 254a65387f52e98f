// RUN: recir-opt -p invoke-mark-concurrent %s --split-input-file | filecheck %s

// Independent siblings: the children of a tree node. The first may run as a
// task while the second runs; the second has no later sibling to overlap.
func.func private @node(%i: i32, %left: tensor<?xi32>, %right: tensor<?xi32>) -> i32 {
  %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
  %zero = arith.constant 0 : i32
  %leaf = arith.cmpi slt, %l, %zero : i32
  %n = scf.if %leaf -> (i32) {
    %one = arith.constant 1 : i32
    scf.yield %one : i32
  } else {
    %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
    %a = invoke.invoke @node(%l, %left, %right) : (i32, tensor<?xi32>, tensor<?xi32>) -> i32
    %b = invoke.invoke @node(%r, %left, %right) : (i32, tensor<?xi32>, tensor<?xi32>) -> i32
    %s = arith.addi %a, %b : i32
    scf.yield %s : i32
  }
  func.return %n : i32
}

// CHECK-LABEL: func.func private @node
// CHECK:         %a = invoke.invoke @node(%l, %left, %right) concurrent : (i32, tensor<?xi32>, tensor<?xi32>) -> i32
// CHECK:         %b = invoke.invoke @node(%r, %left, %right) : (i32, tensor<?xi32>, tensor<?xi32>) -> i32
// CHECK:         %a_1 = invoke.join %a : (i32) -> i32
// CHECK:         %s = arith.addi %a_1, %b : i32

// -----



// Dependent: Ackermann's inner call feeds the outer one, directly and
// through an op between them; nothing is marked.
func.func private @ack(%m: i32, %n: i32) -> i32 {
  %one = arith.constant 1 : i32
  %m1 = arith.subi %m, %one : i32
  %n1 = arith.subi %n, %one : i32
  %inner = invoke.invoke @ack(%m, %n1) : (i32, i32) -> i32
  %arg = arith.addi %inner, %one : i32
  %outer = invoke.invoke @ack(%m1, %arg) : (i32, i32) -> i32
  func.return %outer : i32
}

// CHECK-LABEL: func.func private @ack
// CHECK:         %inner = invoke.invoke @ack(%m, %n1) : (i32, i32) -> i32
// CHECK-NOT:     concurrent
// CHECK:         %arg = arith.addi %inner, %one : i32
// CHECK:         %outer = invoke.invoke @ack(%m1, %arg) : (i32, i32) -> i32

// -----



// Pairs: %a runs while %b runs, and %b is where it is awaited, so %b is not
// marked; %c has no partner. Inside the scf.if branch, %e pairs with %f.
// Each pair ends with an invoke.join that passes the spawned results on.
func.func private @three(%x: i32) -> i32 {
  %a = invoke.invoke @three(%x) : (i32) -> i32
  %b = invoke.invoke @three(%x) : (i32) -> i32
  %c = invoke.invoke @three(%a) : (i32) -> i32
  %zero = arith.constant 0 : i32
  %p = arith.cmpi sgt, %b, %zero : i32
  %d = scf.if %p -> (i32) {
    %e = invoke.invoke @three(%c) : (i32) -> i32
    %f = invoke.invoke @three(%x) : (i32) -> i32
    %g = arith.addi %e, %f : i32
    scf.yield %g : i32
  } else {
    scf.yield %a : i32
  }
  func.return %d : i32
}

// CHECK-LABEL: func.func private @three
// CHECK:         %a = invoke.invoke @three(%x) concurrent : (i32) -> i32
// CHECK:         %b = invoke.invoke @three(%x) : (i32) -> i32
// CHECK:         %a_1 = invoke.join %a : (i32) -> i32
// CHECK:         %c = invoke.invoke @three(%a_1) : (i32) -> i32
// CHECK:         %e = invoke.invoke @three(%c) concurrent : (i32) -> i32
// CHECK:         %f = invoke.invoke @three(%x) : (i32) -> i32
// CHECK:         %e_1 = invoke.join %e : (i32) -> i32
// CHECK:         %g = arith.addi %e_1, %f : i32

// Calls that accumulate gradients are marked too: in code with concurrent
// invokes each thread adds into its own copy of the buffer.
func.func private @acc(%dw: tensor<3xf32>, %g: tensor<3xf32>) {
  adjoint.accumulate %dw, %g : tensor<3xf32>, tensor<3xf32>
  func.return
}
func.func @both(%dw: tensor<3xf32>, %g: tensor<3xf32>) {
  invoke.invoke @acc(%dw, %g) : (tensor<3xf32>, tensor<3xf32>) -> ()
  invoke.invoke @acc(%dw, %g) : (tensor<3xf32>, tensor<3xf32>) -> ()
  func.return
}

// CHECK-LABEL: func.func @both
// CHECK-NEXT:    invoke.invoke @acc(%dw, %g) concurrent : (tensor<3xf32>, tensor<3xf32>) -> ()
// CHECK-NEXT:    invoke.invoke @acc(%dw, %g) : (tensor<3xf32>, tensor<3xf32>) -> ()
// CHECK-NEXT:    invoke.join : () -> ()

// -----

// A gradient function's forward saves the first child's results in its own
// frame before calling the second child: the saves (and pure ops on those
// results) move after the second call, so the first still runs as a task.
// A save into a frame the second call is given stays, and so does the pair.
func.func private @fwd(%i: i32) -> (i32, !tape.frame) {
  %f = tape.new 24 : !tape.frame
  %a, %fa = invoke.invoke @fwd(%i) : (i32) -> (i32, !tape.frame)
  tape.save %fa, %f[0] : !tape.frame
  %a2 = arith.addi %a, %a : i32
  tape.save %a2, %f[8] : i32
  %b, %fb = invoke.invoke @fwd(%i) : (i32) -> (i32, !tape.frame)
  tape.save %fb, %f[16] : !tape.frame
  func.return %b, %f : i32, !tape.frame
}
func.func private @seen(%f: !tape.frame, %i: i32) -> i32 {
  %a = invoke.invoke @seen(%f, %i) : (!tape.frame, i32) -> i32
  tape.save %a, %f[0] : i32
  %b = invoke.invoke @seen(%f, %i) : (!tape.frame, i32) -> i32
  func.return %b : i32
}

// CHECK-LABEL: func.func private @fwd
// CHECK:         %a, %fa = invoke.invoke @fwd(%i) concurrent : (i32) -> (i32, !tape.frame)
// CHECK-NEXT:    %b, %fb = invoke.invoke @fwd(%i) : (i32) -> (i32, !tape.frame)
// CHECK-NEXT:    %a_1, %fa_1 = invoke.join %a, %fa : (i32, !tape.frame) -> (i32, !tape.frame)
// CHECK-NEXT:    tape.save %fa_1, %f[0] : !tape.frame
// CHECK-NEXT:    %a2 = arith.addi %a_1, %a_1 : i32
// CHECK-NEXT:    tape.save %a2, %f[8] : i32
// CHECK-NEXT:    tape.save %fb, %f[16] : !tape.frame
// CHECK-LABEL: func.func private @seen
// CHECK:         %a = invoke.invoke @seen(%f, %i) : (!tape.frame, i32) -> i32
// CHECK-NEXT:    tape.save %a, %f[0] : i32
// CHECK-NEXT:    %b = invoke.invoke @seen(%f, %i) : (!tape.frame, i32) -> i32

// -----

// Marked already (IR this pass wrote, or a hand-written pair): left as it
// is, not joined a second time.
func.func private @fib(%n: i32) -> i32 {
  %one = arith.constant 1 : i32
  %n1 = arith.subi %n, %one : i32
  %a = invoke.invoke @fib(%n1) concurrent : (i32) -> i32
  %b = invoke.invoke @fib(%n1) : (i32) -> i32
  %a2 = invoke.join %a : (i32) -> i32
  %s = arith.addi %a2, %b : i32
  func.return %s : i32
}

// CHECK-LABEL: func.func private @fib
// CHECK:         %a = invoke.invoke @fib(%n1) concurrent : (i32) -> i32
// CHECK-NEXT:    %b = invoke.invoke @fib(%n1) : (i32) -> i32
// CHECK-NEXT:    %a2 = invoke.join %a : (i32) -> i32
// CHECK-NEXT:    %s = arith.addi %a2, %b : i32
