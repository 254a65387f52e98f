// RUN: recir-opt -p 'synthesize-gradients{entry=node__post wrapper=false}' %s | filecheck %s
// RUN: recir-opt -p 'synthesize-gradients{entry=tree__frontier}' %s | filecheck %s --check-prefix=ENTRY
// RUN: recir-opt -p 'synthesize-gradients{entry=gated__post wrapper=false}' %s | filecheck %s --check-prefix=GATED
// RUN: recir-opt -p 'synthesize-gradients{entry=pick__post wrapper=false}' %s | filecheck %s --check-prefix=EXTREMA

// The bottom-up function of a frontier-batched tree model (what
// invoke-to-frontier writes), differentiated by the same rules as the
// recursive path: a merge's gradient takes each side's rows back, a take
// of the children's results scatter-adds into their gradient table, the
// weight's gradient is one accumulation over all rows. Rows cannot go in the
// frame: the costly ones are returned by the forward and passed to the
// backward, the rest rebuilt there; no @node__post_grad is made.
func.func @node__post(%tree: tensor<?xi32>, %leaf: tensor<?xi1>, %word: tensor<?xi32>,
                      %child0: tensor<?xi32>, %child1: tensor<?xi32>, %result0: tensor<?x2xf32>,
                      %emb: tensor<5x2xf32>, %w: tensor<2x4xf32>) -> tensor<?x2xf32> {
  %leaves, %inner = frontier.partition %leaf : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %wd = frontier.take %word[%leaves] : tensor<?xi32>, tensor<?xi32>
  %e = tmath.gather %emb[%wd] : tensor<5x2xf32>, tensor<?xi32> -> tensor<?x2xf32>
  %c0 = frontier.take %child0[%inner] : tensor<?xi32>, tensor<?xi32>
  %hl = frontier.take %result0[%c0] : tensor<?x2xf32>, tensor<?xi32>
  %c1 = frontier.take %child1[%inner] : tensor<?xi32>, tensor<?xi32>
  %hr = frontier.take %result0[%c1] : tensor<?x2xf32>, tensor<?xi32>
  %c = tmath.concat %hl, %hr : tensor<?x2xf32>, tensor<?x2xf32> -> tensor<?x4xf32>
  %m = tmath.matvec %w, %c : tensor<2x4xf32>, tensor<?x4xf32> -> tensor<?x2xf32>
  %t = tmath.tanh %m : tensor<?x2xf32>
  %h = frontier.merge %e[%leaves], %t[%inner] : tensor<?x2xf32>
  func.return %h : tensor<?x2xf32>
}

// A countdown expansion (node i has two children i - 1 while i > 0) and
// the batched entry, whose loss is one row per tree: its gradient is a
// frontier.schedule_grad, seeded with a row of ones.
func.func private @node__expand(%tree: tensor<?xi32>, %i: tensor<?xi32>, %emb: tensor<5x2xf32>,
                                %w: tensor<2x4xf32>)
    -> (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<?xi32>, tensor<?xi32>, tensor<?xi1>, tensor<?xi32>) {
  %zero = arith.constant 0 : i32
  %zeros = frontier.broadcast %zero, %tree : i32, tensor<?xi32> -> tensor<?xi32>
  %leaf = frontier.cmpi sle, %i, %zeros : tensor<?xi32>
  %stop, %go = frontier.partition %leaf : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %t = frontier.take %tree[%go] : tensor<?xi32>, tensor<?xi32>
  %ig = frontier.take %i[%go] : tensor<?xi32>, tensor<?xi32>
  %one = arith.constant 1 : i32
  %ones = frontier.broadcast %one, %go : i32, tensor<?xi32> -> tensor<?xi32>
  %i1 = arith.subi %ig, %ones : tensor<?xi32>
  func.return %go, %t, %i1, %go, %t, %i1, %tree, %leaf, %i
      : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<?xi32>, tensor<?xi32>, tensor<?xi1>, tensor<?xi32>
}
func.func @tree__frontier(%root: tensor<?xi32>, %emb: tensor<5x2xf32>, %w: tensor<2x4xf32>)
    -> tensor<?xf32> {
  %h = frontier.schedule @node__expand, @node__post(%root) shared(%emb, %w) {sites = 2 : i64}
      : (tensor<?xi32>), (tensor<5x2xf32>, tensor<2x4xf32>) -> (tensor<?x2xf32>)
  %loss = tmath.sum %h : tensor<?x2xf32> -> tensor<?xf32>
  func.return %loss : tensor<?xf32>
}

// ENTRY-LABEL: func.func private @tree__frontier_bwd(
// ENTRY:         %[[DH:.*]] = tmath.fill %{{.*}} : tensor<?xf32> -> tensor<?x2xf32>
// ENTRY-NEXT:    %[[DEMB:.*]], %[[DW:.*]] = frontier.schedule_grad @node__expand, @node__post(%[[DH]]) moving(%{{.*}}) shared(%{{.*}}, %{{.*}}) {sites = 2 : i64} : (tensor<?x2xf32>), (tensor<?xi32>), (tensor<5x2xf32>, tensor<2x4xf32>) -> (tensor<5x2xf32>, tensor<2x4xf32>)
// ENTRY-NEXT:    adjoint.accumulate %{{.*}}, %[[DEMB]] : tensor<5x2xf32>, tensor<5x2xf32>
// ENTRY-NEXT:    adjoint.accumulate %{{.*}}, %[[DW]] : tensor<2x4xf32>, tensor<2x4xf32>
// ENTRY-LABEL: func.func @tree__frontier_grad(
// ENTRY-NEXT:    %[[LOSS:.*]], %[[FRAME:.*]] = invoke.invoke @tree__frontier_fwd(
// ENTRY-NEXT:    %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// ENTRY-NEXT:    %[[SEED:.*]] = frontier.broadcast %[[ONE]], %[[LOSS]] : f32, tensor<?xf32> -> tensor<?xf32>
// ENTRY-NEXT:    invoke.invoke @tree__frontier_bwd(%[[FRAME]], %[[SEED]],

// The forward returns the rows costly to rebuild after its result (rows have
// no static size for the frame): the tanh, whose derivative reads it (the
// product it is made from is then read by nothing). The backward takes them
// first and rebuilds only the cheap rows (the takes, the concat): its one
// product is the backward's own (vecmat), and the weight's outer product.
// CHECK-LABEL: func.func private @node__post_fwd(
// CHECK-SAME:      -> (tensor<?x2xf32>, tensor<?x2xf32>, !tape.frame) {
// CHECK-NEXT:    %[[FRAME:.*]] = tape.new 8 : !tape.frame
// CHECK:         %[[FT:.*]] = tmath.tanh
// CHECK:         %[[FH:.*]] = frontier.merge
// CHECK-NEXT:    func.return %[[FH]], %[[FT]], %[[FRAME]] : tensor<?x2xf32>, tensor<?x2xf32>, !tape.frame

// CHECK-LABEL: func.func private @node__post_bwd(
// CHECK-SAME:      %[[T:[^:]*]]: tensor<?x2xf32>, %{{[^:]*}}: !tape.frame, %[[DH:[^:]*]]: tensor<?x2xf32>, %{{[^:]*}}: tensor<?xi32>, %[[LEAF:[^:]*]]: tensor<?xi1>, %[[WORD:[^:]*]]: tensor<?xi32>, %{{[^:]*}}: tensor<?xi32>, %{{[^:]*}}: tensor<?xi32>, %{{[^:]*}}: tensor<?x2xf32>, %{{[^:]*}}: tensor<5x2xf32>, %[[W:[^:]*]]: tensor<2x4xf32>, %[[DRESULT:[^:]*]]: tensor<?x2xf32>, %[[DEMB:[^:]*]]: tensor<5x2xf32>, %[[DW:[^:]*]]: tensor<2x4xf32>) {
// CHECK-NOT:     tmath.matvec
// CHECK-NOT:     tmath.tanh
// CHECK:         %[[LEAVES:.*]], %[[INNER:.*]] = frontier.partition %[[LEAF]] : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[DE:.*]] = frontier.take %[[DH]][%[[LEAVES]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[DT:.*]] = frontier.take %[[DH]][%[[INNER]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %{{.*}} = tmath.mul %[[T]], %[[T]] : tensor<?x2xf32>
// CHECK-NOT:     tmath.matvec
// CHECK-NOT:     tmath.tanh
// CHECK:         %[[DM:.*]] = tmath.sub %[[DT]], %{{.*}} : tensor<?x2xf32>
// CHECK-NOT:     tmath.matvec
// CHECK-NOT:     tmath.tanh
// CHECK:         %[[C:.*]] = tmath.concat %{{.*}}, %{{.*}} : tensor<?x2xf32>, tensor<?x2xf32> -> tensor<?x4xf32>
// CHECK-NEXT:    %[[DC:.*]] = adjoint.vecmat %[[DM]], %[[W]] : tensor<?x2xf32>, tensor<2x4xf32> -> tensor<?x4xf32>
// CHECK-NEXT:    adjoint.accumulate_outer %[[DW]], %[[DM]], %[[C]] : tensor<2x4xf32>, tensor<?x2xf32>, tensor<?x4xf32>
// CHECK-NEXT:    %[[DL:.*]] = tmath.slice %[[DC]][0] : tensor<?x4xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[DR:.*]] = tmath.slice %[[DC]][2] : tensor<?x4xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    adjoint.accumulate_row %[[DRESULT]][%{{.*}}], %[[DR]] : tensor<?x2xf32>, tensor<?xi32>, tensor<?x2xf32>
// CHECK-NEXT:    adjoint.accumulate_row %[[DRESULT]][%{{.*}}], %[[DL]] : tensor<?x2xf32>, tensor<?xi32>, tensor<?x2xf32>
// CHECK-NEXT:    %[[WD:.*]] = frontier.take %[[WORD]][%[[LEAVES]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    adjoint.accumulate_row %[[DEMB]][%[[WD]]], %[[DE]] : tensor<5x2xf32>, tensor<?xi32>, tensor<?x2xf32>
// CHECK-NOT:     tmath.matvec
// CHECK-NEXT:    func.return

// CHECK-NOT: @node__post_grad

// A cond on the children's results, batched: each branch takes its rows of
// a value made before it by one side of a partition. Such a take's
// cotangent is rows of that value: the branch's at its side's rows, zeros
// at the other side's; where both sides take it, one merge of the two.
func.func @gated__post(%tree: tensor<?xi32>, %child0: tensor<?xi32>, %child1: tensor<?xi32>,
                       %result0: tensor<?x2xf32>, %w: tensor<2x2xf32>) -> tensor<?x2xf32> {
  %hl = frontier.take %result0[%child0] : tensor<?x2xf32>, tensor<?xi32>
  %hr = frontier.take %result0[%child1] : tensor<?x2xf32>, tensor<?xi32>
  %z = tmath.add %hl, %hr : tensor<?x2xf32>
  %pick = frontier.cmpi slt, %child0, %child1 : tensor<?xi32>
  %yes, %no = frontier.partition %pick : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %zy = frontier.take %z[%yes] : tensor<?x2xf32>, tensor<?xi32>
  %zn = frontier.take %z[%no] : tensor<?x2xf32>, tensor<?xi32>
  %sq = tmath.mul %zn, %zn : tensor<?x2xf32>
  %g = frontier.merge %zy[%yes], %sq[%no] : tensor<?x2xf32>
  %m = tmath.matvec %w, %g : tensor<2x2xf32>, tensor<?x2xf32> -> tensor<?x2xf32>
  func.return %m : tensor<?x2xf32>
}
// GATED-LABEL: func.func private @gated__post_bwd
// GATED:         %[[G:.*]] = adjoint.vecmat
// GATED:         %[[DY:.*]] = frontier.take %[[G]][%yes]
// GATED:         %[[DN:.*]] = frontier.take %[[G]][%no]
// GATED:         %[[DSQ:.*]] = tmath.add
// GATED-NEXT:    %[[DZ:.*]] = frontier.merge %[[DY]][%yes], %[[DSQ]][%no]
// GATED-NEXT:    adjoint.accumulate_row %{{.*}}[%{{.*}}], %[[DZ]]
// GATED-NEXT:    adjoint.accumulate_row %{{.*}}[%{{.*}}], %[[DZ]]
// GATED-NOT:     frontier.broadcast

// A float max over rows: its cotangent goes to the operand each row takes
// (maxnumf's lhs where lhs >= rhs or the rhs is NaN), the rows partitioned
// by that test and each side's cotangent merged with zeros at the other's.
func.func @pick__post(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
  %m = arith.maxnumf %a, %b : tensor<?xf32>
  func.return %m : tensor<?xf32>
}
// EXTREMA-LABEL: func.func private @pick__post_bwd(
// EXTREMA-SAME:      %{{[^:]*}}: !tape.frame, %[[DM:[^:]*]]: tensor<?xf32>, %[[A:[^:]*]]: tensor<?xf32>, %[[B:[^:]*]]: tensor<?xf32>, %[[DA:[^:]*]]: tensor<?xf32>, %[[DB:[^:]*]]: tensor<?xf32>) {
// EXTREMA-NEXT:    %[[GE:.*]] = frontier.cmpf oge, %[[A]], %[[B]] : tensor<?xf32>
// EXTREMA-NEXT:    %[[NAN:.*]] = frontier.cmpf uno, %[[B]], %[[B]] : tensor<?xf32>
// EXTREMA-NEXT:    %[[LHS:.*]] = arith.ori %[[GE]], %[[NAN]] : tensor<?xi1>
// EXTREMA-NEXT:    %[[YES:.*]], %[[NO:.*]] = frontier.partition %[[LHS]] : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// EXTREMA-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// EXTREMA-NEXT:    %[[DMY:.*]] = frontier.take %[[DM]][%[[YES]]] : tensor<?xf32>, tensor<?xi32>
// EXTREMA-NEXT:    %[[ZN:.*]] = frontier.broadcast %[[ZERO]], %[[NO]] : f32, tensor<?xi32> -> tensor<?xf32>
// EXTREMA-NEXT:    %[[GA:.*]] = frontier.merge %[[DMY]][%[[YES]]], %[[ZN]][%[[NO]]] : tensor<?xf32>
// EXTREMA-NEXT:    %[[ZY:.*]] = frontier.broadcast %[[ZERO]], %[[YES]] : f32, tensor<?xi32> -> tensor<?xf32>
// EXTREMA-NEXT:    %[[DMN:.*]] = frontier.take %[[DM]][%[[NO]]] : tensor<?xf32>, tensor<?xi32>
// EXTREMA-NEXT:    %[[GB:.*]] = frontier.merge %[[ZY]][%[[YES]]], %[[DMN]][%[[NO]]] : tensor<?xf32>
// EXTREMA-NEXT:    adjoint.accumulate %[[DA]], %[[GA]] : tensor<?xf32>, tensor<?xf32>
// EXTREMA-NEXT:    adjoint.accumulate %[[DB]], %[[GB]] : tensor<?xf32>, tensor<?xf32>
// EXTREMA-NEXT:    func.return
