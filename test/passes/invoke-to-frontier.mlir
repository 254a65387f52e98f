// RUN: recir-opt -p capture-outer-refs,invoke-to-frontier %s | filecheck %s
// RUN: not recir-opt -p capture-outer-refs,invoke-to-frontier %examples/ackermann.mlir 2>&1 | filecheck %s --check-prefix=ACK

// TreeRNN's shape: a leaf embeds its word; an inner node combines its two
// children's vectors. The structure arrays are per tree (ragged), the
// weights uniform; the second result counts leaves (a scalar per row).
func.func @tree_rnn(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %root: i32,
                    %emb: tensor<10x2xf32>, %w: tensor<2x4xf32>, %b: tensor<2xf32>) -> (tensor<2xf32>, f32) {
  invoke.subgraph @node(%i: i32) -> (tensor<2xf32>, f32) {
    %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
    %zero = arith.constant 0 : i32
    %leaf = arith.cmpi slt, %l, %zero : i32
    %h, %s = scf.if %leaf -> (tensor<2xf32>, f32) {
      %wd = tmath.extract %word[%i] : tensor<?xi32>, i32 -> i32
      %e = tmath.gather %emb[%wd] : tensor<10x2xf32>, i32 -> tensor<2xf32>
      %one = arith.constant 1.0 : f32
      scf.yield %e, %one : tensor<2xf32>, f32
    } else {
      %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
      %hl, %sl = invoke.invoke @node(%l) : (i32) -> (tensor<2xf32>, f32)
      %hr, %sr = invoke.invoke @node(%r) : (i32) -> (tensor<2xf32>, f32)
      %c = tmath.concat %hl, %hr : tensor<2xf32>, tensor<2xf32> -> tensor<4xf32>
      %m = tmath.matvec %w, %c : tensor<2x4xf32>, tensor<4xf32> -> tensor<2xf32>
      %a = tmath.add %m, %b : tensor<2xf32>
      %t = tmath.tanh %a : tensor<2xf32>
      %n = arith.addf %sl, %sr : f32
      scf.yield %t, %n : tensor<2xf32>, f32
    }
    invoke.return %h, %s : tensor<2xf32>, f32
  }
  %h, %s = invoke.invoke @node(%root) : (i32) -> (tensor<2xf32>, f32)
  func.return %h, %s : tensor<2xf32>, f32
}

// The expansion: each row's left child decides leaf or inner; inner rows
// reach both sites, whose children are the rows' left and right nodes. The
// predicate and %i are stored for the bottom-up part (after the tree ids).
// CHECK-LABEL: func.func private @node__expand(%tree: tensor<?xi32>, %i: tensor<?xi32>, %left: tensor<?xi32>, %left_offsets: tensor<?xi32>, %word: tensor<?xi32>, %word_offsets: tensor<?xi32>, %emb: tensor<10x2xf32>, %right: tensor<?xi32>, %right_offsets: tensor<?xi32>, %w: tensor<2x4xf32>, %b: tensor<2xf32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi1>, tensor<?xi32>) {
// CHECK-NEXT:    %[[L:.*]] = frontier.extract_ragged %left, %left_offsets[%tree, %i] : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %zero = arith.constant 0 : i32
// CHECK-NEXT:    %[[ZEROS:.*]] = frontier.broadcast %zero, %tree : i32, tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %[[LEAF:.*]] = frontier.cmpi slt, %[[L]], %[[ZEROS]] : tensor<?xi32>
// CHECK-NEXT:    %{{.*}}, %[[INNER:.*]] = frontier.partition %[[LEAF]] : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[TREE:.*]] = frontier.take %tree[%[[INNER]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[I:.*]] = frontier.take %i[%[[INNER]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[R:.*]] = frontier.extract_ragged %right, %right_offsets[%[[TREE]], %[[I]]] : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %[[LI:.*]] = frontier.take %[[L]][%[[INNER]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    func.return %[[INNER]], %[[TREE]], %[[LI]], %[[INNER]], %[[TREE]], %[[R]], %tree, %[[LEAF]], %i : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi1>, tensor<?xi32>

// The bottom-up part: leaf rows gather their embedding, inner rows take
// their children's result rows; the merge puts each side back in place.
// CHECK-LABEL: func.func private @node__post(%tree: tensor<?xi32>, %leaf: tensor<?xi1>, %i: tensor<?xi32>, %child0: tensor<?xi32>, %child1: tensor<?xi32>, %result0: tensor<?x2xf32>, %result1: tensor<?xf32>, %left: tensor<?xi32>, %left_offsets: tensor<?xi32>, %word: tensor<?xi32>, %word_offsets: tensor<?xi32>, %emb: tensor<10x2xf32>, %right: tensor<?xi32>, %right_offsets: tensor<?xi32>, %w: tensor<2x4xf32>, %b: tensor<2xf32>) -> (tensor<?x2xf32>, tensor<?xf32>) {
// CHECK-NEXT:    %[[LEAVES:.*]], %[[INNER:.*]] = frontier.partition %leaf : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[TREE:.*]] = frontier.take %tree[%[[LEAVES]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[I:.*]] = frontier.take %i[%[[LEAVES]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[WORD:.*]] = frontier.extract_ragged %word, %word_offsets[%[[TREE]], %[[I]]] : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %[[E:.*]] = tmath.gather %emb[%[[WORD]]] : tensor<10x2xf32>, tensor<?xi32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[C0:.*]] = frontier.take %child0[%[[INNER]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[HL:.*]] = frontier.take %result0[%[[C0]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[SL:.*]] = frontier.take %result1[%[[C0]]] : tensor<?xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[C1:.*]] = frontier.take %child1[%[[INNER]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[HR:.*]] = frontier.take %result0[%[[C1]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[SR:.*]] = frontier.take %result1[%[[C1]]] : tensor<?xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[CAT:.*]] = tmath.concat %[[HL]], %[[HR]] : tensor<?x2xf32>, tensor<?x2xf32> -> tensor<?x4xf32>
// CHECK-NEXT:    %[[MV:.*]] = tmath.matvec %w, %[[CAT]] : tensor<2x4xf32>, tensor<?x4xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[A:.*]] = tmath.add %[[MV]], %b : tensor<?x2xf32>, tensor<2xf32>
// CHECK-NEXT:    %[[T:.*]] = tmath.tanh %[[A]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[N:.*]] = arith.addf %[[SL]], %[[SR]] : tensor<?xf32>
// CHECK-NEXT:    %[[H:.*]] = frontier.merge %[[E]][%[[LEAVES]]], %[[T]][%[[INNER]]] : tensor<?x2xf32>
// CHECK-NEXT:    %one = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    %[[ONES:.*]] = frontier.broadcast %one, %[[LEAVES]] : f32, tensor<?xi32> -> tensor<?xf32>
// CHECK-NEXT:    %[[S:.*]] = frontier.merge %[[ONES]][%[[LEAVES]]], %[[N]][%[[INNER]]] : tensor<?xf32>
// CHECK-NEXT:    func.return %[[H]], %[[S]] : tensor<?x2xf32>, tensor<?xf32>

// The entry over a batch: the per-tree arrays come as the trees' arrays one
// after another and their offsets; one root per row.
// CHECK-LABEL: func.func @tree_rnn__frontier(%left: tensor<?xi32>, %left_offsets: tensor<?xi32>, %right: tensor<?xi32>, %right_offsets: tensor<?xi32>, %word: tensor<?xi32>, %word_offsets: tensor<?xi32>, %root: tensor<?xi32>, %emb: tensor<10x2xf32>, %w: tensor<2x4xf32>, %b: tensor<2xf32>) -> (tensor<?x2xf32>, tensor<?xf32>) {
// CHECK-NEXT:    %[[H:.*]], %[[S:.*]] = frontier.schedule @node__expand, @node__post(%root) shared(%left, %left_offsets, %word, %word_offsets, %emb, %right, %right_offsets, %w, %b) {sites = 2 : i64} : (tensor<?xi32>), (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<10x2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<2x4xf32>, tensor<2xf32>) -> (tensor<?x2xf32>, tensor<?xf32>)
// CHECK-NEXT:    func.return %[[H]], %[[S]] : tensor<?x2xf32>, tensor<?xf32>

// ACK: ackermann.mlir:19:9: error: 'invoke.invoke' op cannot be batched by frontiers: an invoke argument or branch predicate depends on this op's recursive result
