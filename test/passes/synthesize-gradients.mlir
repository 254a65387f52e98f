// RUN: recir-opt -p synthesize-gradients %s --split-input-file | filecheck %s
// Each function reachable from the entry gets a _fwd that saves what its
// backward needs into its own activation frame (children's frames included)
// and a _bwd that runs the reverse sweep, recursive where the function is;
// parameters' gradients are accumulated in place; @<entry>_grad seeds the loss.
// A value is saved in the frame of the region defining it: an scf.if branch
// that saves anything allocates its own frame when it runs, its pointer in
// one slot of the enclosing frame that both branches share.

// A small tree model: leaves embed a word, internal nodes combine their
// children, the loss is the sum of the root's state.
func.func @tree(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %root: i32,
                %emb: tensor<5x2xf32>, %w: tensor<2x4xf32>) -> f32 {
  %h = invoke.invoke @node(%root, %left, %right, %word, %emb, %w) : (i32, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>) -> tensor<2xf32>
  %loss = tmath.sum %h : tensor<2xf32> -> f32
  func.return %loss : f32
}
func.func private @node(%i: i32, %left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>,
                        %emb: tensor<5x2xf32>, %w: tensor<2x4xf32>) -> tensor<2xf32> {
  %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
  %zero = arith.constant 0 : i32
  %is_leaf = arith.cmpi slt, %l, %zero : i32
  %h = scf.if %is_leaf -> (tensor<2xf32>) {
    %wd = tmath.extract %word[%i] : tensor<?xi32>, i32 -> i32
    %x = tmath.gather %emb[%wd] : tensor<5x2xf32>, i32 -> tensor<2xf32>
    scf.yield %x : tensor<2xf32>
  } else {
    %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
    %hl = invoke.invoke @node(%l, %left, %right, %word, %emb, %w) : (i32, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>) -> tensor<2xf32>
    %hr = invoke.invoke @node(%r, %left, %right, %word, %emb, %w) : (i32, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>) -> tensor<2xf32>
    %c = tmath.concat %hl, %hr : tensor<2xf32>, tensor<2xf32> -> tensor<4xf32>
    %wc = tmath.matvec %w, %c : tensor<2x4xf32>, tensor<4xf32> -> tensor<2xf32>
    %t = tmath.tanh %wc : tensor<2xf32>
    scf.yield %t : tensor<2xf32>
  }
  func.return %h : tensor<2xf32>
}

// CHECK-LABEL: func.func private @tree_fwd(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %root: i32, %emb: tensor<5x2xf32>, %w: tensor<2x4xf32>) -> (f32, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 8 : !tape.frame
// CHECK-NEXT:    %h, %{{[0-9]+}} = invoke.invoke @node_fwd(%root, %left, %right, %word, %emb, %w) : (i32, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>) -> (tensor<2xf32>, !tape.frame)
// CHECK-NEXT:    tape.save %{{[0-9]+}}, %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    %loss = tmath.sum %h : tensor<2xf32> -> f32
// CHECK-NEXT:    func.return %loss, %{{[0-9]+}} : f32, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @tree_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: f32, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: i32, %{{[0-9]+}}: tensor<5x2xf32>, %{{[0-9]+}}: tensor<2x4xf32>, %{{[0-9]+}}: tensor<5x2xf32>, %{{[0-9]+}}: tensor<2x4xf32>) {
// CHECK-NEXT:    %{{[0-9]+}} = tmath.fill %{{[0-9]+}} : f32 -> tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    invoke.invoke @node_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, tensor<2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>, tensor<5x2xf32>, tensor<2x4xf32>) -> ()
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @node_fwd(%i: i32, %left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %emb: tensor<5x2xf32>, %w: tensor<2x4xf32>) -> (tensor<2xf32>, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 16 : !tape.frame
// CHECK-NEXT:    %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
// CHECK-NEXT:    %zero = arith.constant 0 : i32
// CHECK-NEXT:    %is_leaf = arith.cmpi slt, %l, %zero : i32
// CHECK-NEXT:    tape.save %is_leaf, %{{[0-9]+}}[0] : i1
// CHECK-NEXT:    %h = scf.if %is_leaf -> (tensor<2xf32>) {
// CHECK-NEXT:      %{{[0-9]+}} = tape.new 8 : !tape.frame
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %wd = tmath.extract %word[%i] : tensor<?xi32>, i32 -> i32
// CHECK-NEXT:      tape.save %wd, %{{[0-9]+}}[0] : i32
// CHECK-NEXT:      %x = tmath.gather %emb[%wd] : tensor<5x2xf32>, i32 -> tensor<2xf32>
// CHECK-NEXT:      scf.yield %x : tensor<2xf32>
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %{{[0-9]+}} = tape.new 48 : !tape.frame
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
// CHECK-NEXT:      %hl, %{{[0-9]+}} = invoke.invoke @node_fwd(%l, %left, %right, %word, %emb, %w) : (i32, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>) -> (tensor<2xf32>, !tape.frame)
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[40] : !tape.frame
// CHECK-NEXT:      %hr, %{{[0-9]+}} = invoke.invoke @node_fwd(%r, %left, %right, %word, %emb, %w) : (i32, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>) -> (tensor<2xf32>, !tape.frame)
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[32] : !tape.frame
// CHECK-NEXT:      %c = tmath.concat %hl, %hr : tensor<2xf32>, tensor<2xf32> -> tensor<4xf32>
// CHECK-NEXT:      tape.save %c, %{{[0-9]+}}[16] : tensor<4xf32>
// CHECK-NEXT:      %wc = tmath.matvec %w, %c : tensor<2x4xf32>, tensor<4xf32> -> tensor<2xf32>
// CHECK-NEXT:      %t = tmath.tanh %wc : tensor<2xf32>
// CHECK-NEXT:      tape.save %t, %{{[0-9]+}}[0] : tensor<2xf32>
// CHECK-NEXT:      scf.yield %t : tensor<2xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %h, %{{[0-9]+}} : tensor<2xf32>, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @node_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<5x2xf32>, %{{[0-9]+}}: tensor<2x4xf32>, %{{[0-9]+}}: tensor<5x2xf32>, %{{[0-9]+}}: tensor<2x4xf32>) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : i1
// CHECK-NEXT:    scf.if %{{[0-9]+}} {
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : i32
// CHECK-NEXT:      adjoint.accumulate_row %{{[0-9]+}}[%{{[0-9]+}}], %{{[0-9]+}} : tensor<5x2xf32>, i32, tensor<2xf32>
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tmath.sub %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[16] : tensor<4xf32>
// CHECK-NEXT:      %{{[0-9]+}} = adjoint.vecmat %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>, tensor<2x4xf32> -> tensor<4xf32>
// CHECK-NEXT:      adjoint.accumulate_outer %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<2x4xf32>, tensor<2xf32>, tensor<4xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tmath.slice %{{[0-9]+}}[0] : tensor<4xf32> -> tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tmath.slice %{{[0-9]+}}[2] : tensor<4xf32> -> tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[32] : !tape.frame
// CHECK-NEXT:      invoke.invoke @node_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, tensor<2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>, tensor<5x2xf32>, tensor<2x4xf32>) -> ()
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[40] : !tape.frame
// CHECK-NEXT:      invoke.invoke @node_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, tensor<2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<5x2xf32>, tensor<2x4xf32>, tensor<5x2xf32>, tensor<2x4xf32>) -> ()
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @tree_grad(%{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: i32, %{{[0-9]+}}: tensor<5x2xf32>, %{{[0-9]+}}: tensor<2x4xf32>, %{{[0-9]+}}: tensor<5x2xf32>, %{{[0-9]+}}: tensor<2x4xf32>) -> f32 {
// CHECK-NEXT:    %{{[0-9]+}}, %{{[0-9]+}} = invoke.invoke @tree_fwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, i32, tensor<5x2xf32>, tensor<2x4xf32>) -> (f32, !tape.frame)
// CHECK-NEXT:    %{{[0-9]+}} = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    invoke.invoke @tree_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, f32, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, i32, tensor<5x2xf32>, tensor<2x4xf32>, tensor<5x2xf32>, tensor<2x4xf32>) -> ()
// CHECK-NEXT:    func.return %{{[0-9]+}} : f32
// CHECK-NEXT:  }

// -----

// Self recursion with a scalar result: x^n by repeated multiplication.
func.func @power(%x: tensor<1xf32>, %n: i32) -> f32 {
  %r = invoke.invoke @pow_rec(%x, %n) : (tensor<1xf32>, i32) -> f32
  func.return %r : f32
}
func.func private @pow_rec(%x: tensor<1xf32>, %n: i32) -> f32 {
  %zero = arith.constant 0 : i32
  %done = arith.cmpi sle, %n, %zero : i32
  %r = scf.if %done -> (f32) {
    %one = arith.constant 1.0 : f32
    scf.yield %one : f32
  } else {
    %one_i = arith.constant 1 : i32
    %m = arith.subi %n, %one_i : i32
    %below = invoke.invoke @pow_rec(%x, %m) : (tensor<1xf32>, i32) -> f32
    %xs = tmath.sum %x : tensor<1xf32> -> f32
    %p = arith.mulf %below, %xs : f32
    scf.yield %p : f32
  }
  func.return %r : f32
}

// CHECK-LABEL: func.func private @power_fwd(%x: tensor<1xf32>, %n: i32) -> (f32, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 8 : !tape.frame
// CHECK-NEXT:    %r, %{{[0-9]+}} = invoke.invoke @pow_rec_fwd(%x, %n) : (tensor<1xf32>, i32) -> (f32, !tape.frame)
// CHECK-NEXT:    tape.save %{{[0-9]+}}, %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    func.return %r, %{{[0-9]+}} : f32, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @power_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: f32, %{{[0-9]+}}: tensor<1xf32>, %{{[0-9]+}}: i32, %{{[0-9]+}}: tensor<1xf32>) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    invoke.invoke @pow_rec_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, f32, tensor<1xf32>, tensor<1xf32>) -> ()
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @pow_rec_fwd(%x: tensor<1xf32>, %n: i32) -> (f32, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 16 : !tape.frame
// CHECK-NEXT:    %zero = arith.constant 0 : i32
// CHECK-NEXT:    %done = arith.cmpi sle, %n, %zero : i32
// CHECK-NEXT:    tape.save %done, %{{[0-9]+}}[0] : i1
// CHECK-NEXT:    %r = scf.if %done -> (f32) {
// CHECK-NEXT:      %one = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:      scf.yield %one : f32
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %{{[0-9]+}} = tape.new 24 : !tape.frame
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %one_i = arith.constant 1 : i32
// CHECK-NEXT:      %m = arith.subi %n, %one_i : i32
// CHECK-NEXT:      %below, %{{[0-9]+}} = invoke.invoke @pow_rec_fwd(%x, %m) : (tensor<1xf32>, i32) -> (f32, !tape.frame)
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[16] : !tape.frame
// CHECK-NEXT:      tape.save %below, %{{[0-9]+}}[8] : f32
// CHECK-NEXT:      %xs = tmath.sum %x : tensor<1xf32> -> f32
// CHECK-NEXT:      tape.save %xs, %{{[0-9]+}}[0] : f32
// CHECK-NEXT:      %p = arith.mulf %below, %xs : f32
// CHECK-NEXT:      scf.yield %p : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %{{[0-9]+}} : f32, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @pow_rec_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: f32, %{{[0-9]+}}: tensor<1xf32>, %{{[0-9]+}}: tensor<1xf32>) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : i1
// CHECK-NEXT:    scf.if %{{[0-9]+}} {
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : f32
// CHECK-NEXT:      %{{[0-9]+}} = arith.mulf %{{[0-9]+}}, %{{[0-9]+}} : f32
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[8] : f32
// CHECK-NEXT:      %{{[0-9]+}} = arith.mulf %{{[0-9]+}}, %{{[0-9]+}} : f32
// CHECK-NEXT:      %{{[0-9]+}} = tmath.fill %{{[0-9]+}} : f32 -> tensor<1xf32>
// CHECK-NEXT:      adjoint.accumulate %{{[0-9]+}}, %{{[0-9]+}} : tensor<1xf32>, tensor<1xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[16] : !tape.frame
// CHECK-NEXT:      invoke.invoke @pow_rec_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, f32, tensor<1xf32>, tensor<1xf32>) -> ()
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @power_grad(%{{[0-9]+}}: tensor<1xf32>, %{{[0-9]+}}: i32, %{{[0-9]+}}: tensor<1xf32>) -> f32 {
// CHECK-NEXT:    %{{[0-9]+}}, %{{[0-9]+}} = invoke.invoke @power_fwd(%{{[0-9]+}}, %{{[0-9]+}}) : (tensor<1xf32>, i32) -> (f32, !tape.frame)
// CHECK-NEXT:    %{{[0-9]+}} = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    invoke.invoke @power_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, f32, tensor<1xf32>, i32, tensor<1xf32>) -> ()
// CHECK-NEXT:    func.return %{{[0-9]+}} : f32
// CHECK-NEXT:  }

// -----

// Mutual recursion: @even and @odd call each other; each gets a _bwd that
// invokes the other's.
func.func @chain(%n: i32, %h: tensor<2xf32>, %w: tensor<2x2xf32>) -> f32 {
  %r = invoke.invoke @even(%n, %h, %w) : (i32, tensor<2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
  %s = tmath.sum %r : tensor<2xf32> -> f32
  func.return %s : f32
}
func.func private @even(%n: i32, %h: tensor<2xf32>, %w: tensor<2x2xf32>) -> tensor<2xf32> {
  %zero = arith.constant 0 : i32
  %done = arith.cmpi sle, %n, %zero : i32
  %r = scf.if %done -> (tensor<2xf32>) {
    scf.yield %h : tensor<2xf32>
  } else {
    %wh = tmath.matvec %w, %h : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
    %one = arith.constant 1 : i32
    %m = arith.subi %n, %one : i32
    %o = invoke.invoke @odd(%m, %wh, %w) : (i32, tensor<2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
    scf.yield %o : tensor<2xf32>
  }
  func.return %r : tensor<2xf32>
}
func.func private @odd(%n: i32, %h: tensor<2xf32>, %w: tensor<2x2xf32>) -> tensor<2xf32> {
  %t = tmath.tanh %h : tensor<2xf32>
  %r = invoke.invoke @even(%n, %t, %w) : (i32, tensor<2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
  func.return %r : tensor<2xf32>
}

// CHECK-LABEL: func.func private @chain_fwd(%n: i32, %h: tensor<2xf32>, %w: tensor<2x2xf32>) -> (f32, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 8 : !tape.frame
// CHECK-NEXT:    %r, %{{[0-9]+}} = invoke.invoke @even_fwd(%n, %h, %w) : (i32, tensor<2xf32>, tensor<2x2xf32>) -> (tensor<2xf32>, !tape.frame)
// CHECK-NEXT:    tape.save %{{[0-9]+}}, %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    %s = tmath.sum %r : tensor<2xf32> -> f32
// CHECK-NEXT:    func.return %s, %{{[0-9]+}} : f32, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @chain_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: f32, %{{[0-9]+}}: i32, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>) {
// CHECK-NEXT:    %{{[0-9]+}} = tmath.fill %{{[0-9]+}} : f32 -> tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    %{{[0-9]+}} = invoke.invoke @even_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, tensor<2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    adjoint.accumulate %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @even_fwd(%n: i32, %h: tensor<2xf32>, %w: tensor<2x2xf32>) -> (tensor<2xf32>, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 24 : !tape.frame
// CHECK-NEXT:    tape.save %h, %{{[0-9]+}}[16] : tensor<2xf32>
// CHECK-NEXT:    %zero = arith.constant 0 : i32
// CHECK-NEXT:    %done = arith.cmpi sle, %n, %zero : i32
// CHECK-NEXT:    tape.save %done, %{{[0-9]+}}[0] : i1
// CHECK-NEXT:    %r = scf.if %done -> (tensor<2xf32>) {
// CHECK-NEXT:      scf.yield %h : tensor<2xf32>
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %{{[0-9]+}} = tape.new 8 : !tape.frame
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %wh = tmath.matvec %w, %h : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT:      %one = arith.constant 1 : i32
// CHECK-NEXT:      %m = arith.subi %n, %one : i32
// CHECK-NEXT:      %o, %{{[0-9]+}} = invoke.invoke @odd_fwd(%m, %wh, %w) : (i32, tensor<2xf32>, tensor<2x2xf32>) -> (tensor<2xf32>, !tape.frame)
// CHECK-NEXT:      tape.save %{{[0-9]+}}, %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:      scf.yield %o : tensor<2xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %{{[0-9]+}} : tensor<2xf32>, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @even_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>, %{{[0-9]+}}: tensor<2x2xf32>) -> tensor<2xf32> {
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : i1
// CHECK-NEXT:    %{{[0-9]+}} = scf.if %{{[0-9]+}} -> (tensor<2xf32>) {
// CHECK-NEXT:      scf.yield %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[8] : !tape.frame
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:      %{{[0-9]+}} = invoke.invoke @odd_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, tensor<2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = tape.load %{{[0-9]+}}[16] : tensor<2xf32>
// CHECK-NEXT:      %{{[0-9]+}} = adjoint.vecmat %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>, tensor<2x2xf32> -> tensor<2xf32>
// CHECK-NEXT:      adjoint.accumulate_outer %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:      scf.yield %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @odd_fwd(%n: i32, %h: tensor<2xf32>, %w: tensor<2x2xf32>) -> (tensor<2xf32>, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 24 : !tape.frame
// CHECK-NEXT:    %t = tmath.tanh %h : tensor<2xf32>
// CHECK-NEXT:    tape.save %t, %{{[0-9]+}}[16] : tensor<2xf32>
// CHECK-NEXT:    %r, %{{[0-9]+}} = invoke.invoke @even_fwd(%n, %t, %w) : (i32, tensor<2xf32>, tensor<2x2xf32>) -> (tensor<2xf32>, !tape.frame)
// CHECK-NEXT:    tape.save %{{[0-9]+}}, %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    func.return %r, %{{[0-9]+}} : tensor<2xf32>, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @odd_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>, %{{[0-9]+}}: tensor<2x2xf32>) -> tensor<2xf32> {
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    %{{[0-9]+}} = invoke.invoke @even_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, tensor<2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[16] : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.sub %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    func.return %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @chain_grad(%{{[0-9]+}}: i32, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>) -> f32 {
// CHECK-NEXT:    %{{[0-9]+}}, %{{[0-9]+}} = invoke.invoke @chain_fwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (i32, tensor<2xf32>, tensor<2x2xf32>) -> (f32, !tape.frame)
// CHECK-NEXT:    %{{[0-9]+}} = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    invoke.invoke @chain_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, f32, i32, tensor<2xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2x2xf32>) -> ()
// CHECK-NEXT:    func.return %{{[0-9]+}} : f32
// CHECK-NEXT:  }

// -----

// What is cheap to recompute is not saved: @cell's backward reads the gates
// %s and %t (their own gradients and %c's), so it saves them and recomputes
// %c = %s * %t and %h = tanh(%c), elementwise, for the product's gradient.
// The matvec %wa is never recomputed; %a is given (passed through).
func.func @cells(%x: tensor<2xf32>, %w: tensor<2x2xf32>) -> f32 {
  %y = invoke.invoke @cell(%x, %w) : (tensor<2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
  %l = tmath.sum %y : tensor<2xf32> -> f32
  func.return %l : f32
}
func.func private @cell(%a: tensor<2xf32>, %w: tensor<2x2xf32>) -> tensor<2xf32> {
  %wa = tmath.matvec %w, %a : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
  %s = tmath.sigmoid %wa : tensor<2xf32>
  %t = tmath.tanh %wa : tensor<2xf32>
  %c = tmath.mul %s, %t : tensor<2xf32>
  %h = tmath.tanh %c : tensor<2xf32>
  %y = tmath.matvec %w, %h : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}

// CHECK-LABEL: func.func private @cells_fwd(%x: tensor<2xf32>, %w: tensor<2x2xf32>) -> (f32, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 8 : !tape.frame
// CHECK-NEXT:    %y, %{{[0-9]+}} = invoke.invoke @cell_fwd(%x, %w) : (tensor<2xf32>, tensor<2x2xf32>) -> (tensor<2xf32>, !tape.frame)
// CHECK-NEXT:    tape.save %{{[0-9]+}}, %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    %l = tmath.sum %y : tensor<2xf32> -> f32
// CHECK-NEXT:    func.return %l, %{{[0-9]+}} : f32, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @cells_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: f32, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>) {
// CHECK-NEXT:    %{{[0-9]+}} = tmath.fill %{{[0-9]+}} : f32 -> tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : !tape.frame
// CHECK-NEXT:    invoke.invoke @cell_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, tensor<2xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2x2xf32>) -> ()
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @cell_fwd(%a: tensor<2xf32>, %w: tensor<2x2xf32>) -> (tensor<2xf32>, !tape.frame) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.new 24 : !tape.frame
// CHECK-NEXT:    %wa = tmath.matvec %w, %a : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT:    %s = tmath.sigmoid %wa : tensor<2xf32>
// CHECK-NEXT:    tape.save %s, %{{[0-9]+}}[0] : tensor<2xf32>
// CHECK-NEXT:    %t = tmath.tanh %wa : tensor<2xf32>
// CHECK-NEXT:    tape.save %t, %{{[0-9]+}}[16] : tensor<2xf32>
// CHECK-NEXT:    %c = tmath.mul %s, %t : tensor<2xf32>
// CHECK-NEXT:    %h = tmath.tanh %c : tensor<2xf32>
// CHECK-NEXT:    %y = tmath.matvec %w, %h : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT:    func.return %y, %{{[0-9]+}} : tensor<2xf32>, !tape.frame
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @cell_bwd(%{{[0-9]+}}: !tape.frame, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>) {
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[0] : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tape.load %{{[0-9]+}}[16] : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.tanh %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = adjoint.vecmat %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>, tensor<2x2xf32> -> tensor<2xf32>
// CHECK-NEXT:    adjoint.accumulate_outer %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.sub %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.sub %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.sub %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = tmath.add %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>
// CHECK-NEXT:    %{{[0-9]+}} = adjoint.vecmat %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>, tensor<2x2xf32> -> tensor<2xf32>
// CHECK-NEXT:    adjoint.accumulate_outer %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:    adjoint.accumulate %{{[0-9]+}}, %{{[0-9]+}} : tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @cells_grad(%{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>, %{{[0-9]+}}: tensor<2xf32>, %{{[0-9]+}}: tensor<2x2xf32>) -> f32 {
// CHECK-NEXT:    %{{[0-9]+}}, %{{[0-9]+}} = invoke.invoke @cells_fwd(%{{[0-9]+}}, %{{[0-9]+}}) : (tensor<2xf32>, tensor<2x2xf32>) -> (f32, !tape.frame)
// CHECK-NEXT:    %{{[0-9]+}} = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    invoke.invoke @cells_bwd(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (!tape.frame, f32, tensor<2xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2x2xf32>) -> ()
// CHECK-NEXT:    func.return %{{[0-9]+}} : f32
// CHECK-NEXT:  }
