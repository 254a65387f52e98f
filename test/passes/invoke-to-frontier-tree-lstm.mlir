// RUN: recir-opt -p capture-outer-refs,invoke-to-frontier %s | filecheck %s

// TreeLSTM's shape: @node returns two vectors (h and the cell c); an inner
// node reads both of each child's, the entry returns h only.
func.func @tree_lstm(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %root: i32,
                     %emb: tensor<10x2xf32>, %w_leaf: tensor<4x2xf32>, %u: tensor<6x4xf32>) -> tensor<2xf32> {
  invoke.subgraph @node(%i: i32) -> (tensor<2xf32>, tensor<2xf32>) {
    %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
    %zero = arith.constant 0 : i32
    %leaf = arith.cmpi slt, %l, %zero : i32
    %h, %c = scf.if %leaf -> (tensor<2xf32>, tensor<2xf32>) {
      %wd = tmath.extract %word[%i] : tensor<?xi32>, i32 -> i32
      %e = tmath.gather %emb[%wd] : tensor<10x2xf32>, i32 -> tensor<2xf32>
      %g = tmath.matvec %w_leaf, %e : tensor<4x2xf32>, tensor<2xf32> -> tensor<4xf32>
      %gc = tmath.slice %g[0] : tensor<4xf32> -> tensor<2xf32>
      %go = tmath.slice %g[2] : tensor<4xf32> -> tensor<2xf32>
      %o = tmath.sigmoid %go : tensor<2xf32>
      %tc = tmath.tanh %gc : tensor<2xf32>
      %hl = tmath.mul %o, %tc : tensor<2xf32>
      scf.yield %hl, %gc : tensor<2xf32>, tensor<2xf32>
    } else {
      %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
      %hl, %cl = invoke.invoke @node(%l) : (i32) -> (tensor<2xf32>, tensor<2xf32>)
      %hr, %cr = invoke.invoke @node(%r) : (i32) -> (tensor<2xf32>, tensor<2xf32>)
      %hc = tmath.concat %hl, %hr : tensor<2xf32>, tensor<2xf32> -> tensor<4xf32>
      %g = tmath.matvec %u, %hc : tensor<6x4xf32>, tensor<4xf32> -> tensor<6xf32>
      %gf = tmath.slice %g[0] : tensor<6xf32> -> tensor<2xf32>
      %go = tmath.slice %g[2] : tensor<6xf32> -> tensor<2xf32>
      %gu = tmath.slice %g[4] : tensor<6xf32> -> tensor<2xf32>
      %f = tmath.sigmoid %gf : tensor<2xf32>
      %o = tmath.sigmoid %go : tensor<2xf32>
      %uu = tmath.tanh %gu : tensor<2xf32>
      %cs = tmath.add %cl, %cr : tensor<2xf32>
      %fc = tmath.mul %f, %cs : tensor<2xf32>
      %c2 = tmath.add %fc, %uu : tensor<2xf32>
      %tc = tmath.tanh %c2 : tensor<2xf32>
      %h2 = tmath.mul %o, %tc : tensor<2xf32>
      scf.yield %h2, %c2 : tensor<2xf32>, tensor<2xf32>
    }
    invoke.return %h, %c : tensor<2xf32>, tensor<2xf32>
  }
  %h, %c = invoke.invoke @node(%root) : (i32) -> (tensor<2xf32>, tensor<2xf32>)
  func.return %h : tensor<2xf32>
}

// CHECK-LABEL: func.func private @node__expand(
// CHECK:         func.return

// Each invoke takes both result tables at the child's rows; the merge puts
// back each result of both sides.
// CHECK-LABEL: func.func private @node__post(%tree: tensor<?xi32>, %leaf: tensor<?xi1>, %i: tensor<?xi32>, %child0: tensor<?xi32>, %child1: tensor<?xi32>, %result0: tensor<?x2xf32>, %result1: tensor<?x2xf32>, %left: tensor<?xi32>, %left_offsets: tensor<?xi32>, %word: tensor<?xi32>, %word_offsets: tensor<?xi32>, %emb: tensor<10x2xf32>, %w_leaf: tensor<4x2xf32>, %right: tensor<?xi32>, %right_offsets: tensor<?xi32>, %u: tensor<6x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>) {
// CHECK-NEXT:    %[[LEAVES:.*]], %[[INNER:.*]] = frontier.partition %leaf : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// CHECK:         %[[G:.*]] = tmath.matvec %w_leaf, %{{.*}} : tensor<4x2xf32>, tensor<?x2xf32> -> tensor<?x4xf32>
// CHECK-NEXT:    %[[GC:.*]] = tmath.slice %[[G]][0] : tensor<?x4xf32> -> tensor<?x2xf32>
// CHECK:         %[[HLEAF:.*]] = tmath.mul %{{.*}}, %{{.*}} : tensor<?x2xf32>
// CHECK-NEXT:    %[[C0:.*]] = frontier.take %child0[%[[INNER]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[HL:.*]] = frontier.take %result0[%[[C0]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[CL:.*]] = frontier.take %result1[%[[C0]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[C1:.*]] = frontier.take %child1[%[[INNER]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[HR:.*]] = frontier.take %result0[%[[C1]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[CR:.*]] = frontier.take %result1[%[[C1]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %{{.*}} = tmath.concat %[[HL]], %[[HR]] : tensor<?x2xf32>, tensor<?x2xf32> -> tensor<?x4xf32>
// CHECK:         %{{.*}} = tmath.add %[[CL]], %[[CR]] : tensor<?x2xf32>
// CHECK:         %[[C2:.*]] = tmath.add %{{.*}}, %{{.*}} : tensor<?x2xf32>
// CHECK-NEXT:    %{{.*}} = tmath.tanh %[[C2]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[H2:.*]] = tmath.mul %{{.*}}, %{{.*}} : tensor<?x2xf32>
// CHECK-NEXT:    %[[H:.*]] = frontier.merge %[[HLEAF]][%[[LEAVES]]], %[[H2]][%[[INNER]]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[C:.*]] = frontier.merge %[[GC]][%[[LEAVES]]], %[[C2]][%[[INNER]]] : tensor<?x2xf32>
// CHECK-NEXT:    func.return %[[H]], %[[C]] : tensor<?x2xf32>, tensor<?x2xf32>

// CHECK-LABEL: func.func @tree_lstm__frontier(
// CHECK-NEXT:    %[[H:.*]], %{{.*}} = frontier.schedule @node__expand, @node__post(%root) {{.*}} -> (tensor<?x2xf32>, tensor<?x2xf32>)
// CHECK-NEXT:    func.return %[[H]] : tensor<?x2xf32>
