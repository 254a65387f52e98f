// RUN: recir-opt -p capture-outer-refs,invoke-to-frontier %s | filecheck %s

// TD-TreeLSTM's shape: the tree grows top down while a computed score is
// positive and the depth is below the tree's own limit (a per-tree input
// of fixed shape), so the expansion runs the LSTM step depth by depth. The
// bottom-up part reads the state %h2 made inside the branch while
// expanding: it is stored, zero in the rows that did not grow.
func.func @td(%x: tensor<2xf32>, %max_depth: i32, %w_in: tensor<2x2xf32>, %u_score: tensor<2xf32>,
              %w_left: tensor<6x2xf32>, %w_right: tensor<6x2xf32>) -> (i32, f32) {
  invoke.subgraph @grow(%h: tensor<2xf32>, %c: tensor<2xf32>, %depth: i32) -> (i32, f32) {
    %p = tmath.mul %u_score, %h : tensor<2xf32>
    %score = tmath.sum %p : tensor<2xf32> -> f32
    %zero = arith.constant 0.0 : f32
    %up = arith.cmpf ogt, %score, %zero : f32
    %shallow = arith.cmpi slt, %depth, %max_depth : i32
    %wants = arith.andi %up, %shallow : i1
    %n, %t = scf.if %wants -> (i32, f32) {
      %one = arith.constant 1 : i32
      %d1 = arith.addi %depth, %one : i32
      %g = tmath.matvec %w_left, %h : tensor<6x2xf32>, tensor<2xf32> -> tensor<6xf32>
      %gf = tmath.slice %g[0] : tensor<6xf32> -> tensor<2xf32>
      %gu = tmath.slice %g[4] : tensor<6xf32> -> tensor<2xf32>
      %f = tmath.sigmoid %gf : tensor<2xf32>
      %u = tmath.tanh %gu : tensor<2xf32>
      %fc = tmath.mul %f, %c : tensor<2xf32>
      %c2 = tmath.add %fc, %u : tensor<2xf32>
      %h2 = tmath.tanh %c2 : tensor<2xf32>
      %nl, %tl = invoke.invoke @grow(%h2, %c2, %d1) : (tensor<2xf32>, tensor<2xf32>, i32) -> (i32, f32)
      %gr = tmath.matvec %w_right, %h : tensor<6x2xf32>, tensor<2xf32> -> tensor<6xf32>
      %hr = tmath.slice %gr[2] : tensor<6xf32> -> tensor<2xf32>
      %hr2 = tmath.tanh %hr : tensor<2xf32>
      %nr, %tr = invoke.invoke @grow(%hr2, %c, %d1) : (tensor<2xf32>, tensor<2xf32>, i32) -> (i32, f32)
      %nn = arith.addi %nl, %nr : i32
      %n1 = arith.addi %nn, %one : i32
      %tt = arith.addf %tl, %tr : f32
      %s2 = tmath.sum %h2 : tensor<2xf32> -> f32
      %t1 = arith.addf %tt, %s2 : f32
      scf.yield %n1, %t1 : i32, f32
    } else {
      %leaf = arith.constant 1 : i32
      %s = tmath.sum %h : tensor<2xf32> -> f32
      scf.yield %leaf, %s : i32, f32
    }
    invoke.return %n, %t : i32, f32
  }
  %m = tmath.matvec %w_in, %x : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
  %h0 = tmath.tanh %m : tensor<2xf32>
  %c0 = tmath.constant dense<0.0> : tensor<2xf32>
  %d0 = arith.constant 0 : i32
  %n, %t = invoke.invoke @grow(%h0, %c0, %d0) : (tensor<2xf32>, tensor<2xf32>, i32) -> (i32, f32)
  func.return %n, %t : i32, f32
}

// The expansion runs the score and the LSTM step on the rows that grow; the
// tree's depth limit is read by each row's tree. %h2 is merged with zeros
// over all rows to be stored.
// CHECK-LABEL: func.func private @grow__expand(%tree: tensor<?xi32>, %h: tensor<?x2xf32>, %c: tensor<?x2xf32>, %depth: tensor<?xi32>, %u_score: tensor<2xf32>, %max_depth: tensor<?xi32>, %w_left: tensor<6x2xf32>, %w_right: tensor<6x2xf32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi1>, tensor<?x2xf32>, tensor<?x2xf32>) {
// CHECK-NEXT:    %[[P:.*]] = tmath.mul %u_score, %h : tensor<2xf32>, tensor<?x2xf32>
// CHECK-NEXT:    %[[SCORE:.*]] = tmath.sum %[[P]] : tensor<?x2xf32> -> tensor<?xf32>
// CHECK-NEXT:    %zero = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[ZEROS:.*]] = frontier.broadcast %zero, %tree : f32, tensor<?xi32> -> tensor<?xf32>
// CHECK-NEXT:    %[[UP:.*]] = frontier.cmpf ogt, %[[SCORE]], %[[ZEROS]] : tensor<?xf32>
// CHECK-NEXT:    %[[LIMIT:.*]] = frontier.take %max_depth[%tree] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[SHALLOW:.*]] = frontier.cmpi slt, %depth, %[[LIMIT]] : tensor<?xi32>
// CHECK-NEXT:    %[[WANTS:.*]] = arith.andi %[[UP]], %[[SHALLOW]] : tensor<?xi1>
// CHECK-NEXT:    %[[GROW:.*]], %[[STOP:.*]] = frontier.partition %[[WANTS]] : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[DEPTH:.*]] = frontier.take %depth[%[[GROW]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %one = arith.constant 1 : i32
// CHECK-NEXT:    %[[ONES:.*]] = frontier.broadcast %one, %[[GROW]] : i32, tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %[[D1:.*]] = arith.addi %[[DEPTH]], %[[ONES]] : tensor<?xi32>
// CHECK-NEXT:    %[[H:.*]] = frontier.take %h[%[[GROW]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[G:.*]] = tmath.matvec %w_left, %[[H]] : tensor<6x2xf32>, tensor<?x2xf32> -> tensor<?x6xf32>
// CHECK-NEXT:    %[[GF:.*]] = tmath.slice %[[G]][0] : tensor<?x6xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[GU:.*]] = tmath.slice %[[G]][4] : tensor<?x6xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[F:.*]] = tmath.sigmoid %[[GF]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[U:.*]] = tmath.tanh %[[GU]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[C:.*]] = frontier.take %c[%[[GROW]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %[[FC:.*]] = tmath.mul %[[F]], %[[C]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[C2:.*]] = tmath.add %[[FC]], %[[U]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[H2:.*]] = tmath.tanh %[[C2]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[TREE:.*]] = frontier.take %tree[%[[GROW]]] : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %[[GR:.*]] = tmath.matvec %w_right, %[[H]] : tensor<6x2xf32>, tensor<?x2xf32> -> tensor<?x6xf32>
// CHECK-NEXT:    %[[HR:.*]] = tmath.slice %[[GR]][2] : tensor<?x6xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[HR2:.*]] = tmath.tanh %[[HR]] : tensor<?x2xf32>
// CHECK-NEXT:    %[[Z:.*]] = tmath.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK-NEXT:    %[[ZS:.*]] = frontier.broadcast %[[Z]], %[[STOP]] : tensor<2xf32>, tensor<?xi32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[STORED:.*]] = frontier.merge %[[H2]][%[[GROW]]], %[[ZS]][%[[STOP]]] : tensor<?x2xf32>
// CHECK-NEXT:    func.return %[[GROW]], %[[TREE]], %[[H2]], %[[C2]], %[[D1]], %[[GROW]], %[[TREE]], %[[HR2]], %[[C]], %[[D1]], %tree, %[[WANTS]], %[[STORED]], %h : tensor<?xi32>, tensor<?xi32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi1>, tensor<?x2xf32>, tensor<?x2xf32>

// CHECK-LABEL: func.func private @grow__post(%tree: tensor<?xi32>, %wants: tensor<?xi1>, %h2: tensor<?x2xf32>, %h: tensor<?x2xf32>, %child0: tensor<?xi32>, %child1: tensor<?xi32>, %result0: tensor<?xi32>, %result1: tensor<?xf32>, %u_score: tensor<2xf32>, %max_depth: tensor<?xi32>, %w_left: tensor<6x2xf32>, %w_right: tensor<6x2xf32>) -> (tensor<?xi32>, tensor<?xf32>) {
// CHECK-NEXT:    %[[GROW:.*]], %[[STOP:.*]] = frontier.partition %wants : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// CHECK:         %[[H2:.*]] = frontier.take %h2[%[[GROW]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %{{.*}} = tmath.sum %[[H2]] : tensor<?x2xf32> -> tensor<?xf32>
// CHECK:         %[[H:.*]] = frontier.take %h[%[[STOP]]] : tensor<?x2xf32>, tensor<?xi32>
// CHECK-NEXT:    %{{.*}} = tmath.sum %[[H]] : tensor<?x2xf32> -> tensor<?xf32>
// CHECK:         %[[N:.*]] = frontier.merge %{{.*}}[%[[GROW]]], %{{.*}}[%[[STOP]]] : tensor<?xi32>
// CHECK-NEXT:    %[[T:.*]] = frontier.merge %{{.*}}[%[[GROW]]], %{{.*}}[%[[STOP]]] : tensor<?xf32>
// CHECK-NEXT:    func.return %[[N]], %[[T]] : tensor<?xi32>, tensor<?xf32>

// The entry runs its own ops on one row per batch element; uniform root
// arguments are broadcast.
// CHECK-LABEL: func.func @td__frontier(%x: tensor<?x2xf32>, %max_depth: tensor<?xi32>, %w_in: tensor<2x2xf32>, %u_score: tensor<2xf32>, %w_left: tensor<6x2xf32>, %w_right: tensor<6x2xf32>) -> (tensor<?xi32>, tensor<?xf32>) {
// CHECK-NEXT:    %[[M:.*]] = tmath.matvec %w_in, %x : tensor<2x2xf32>, tensor<?x2xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[H0:.*]] = tmath.tanh %[[M]] : tensor<?x2xf32>
// CHECK-NEXT:    %c0 = tmath.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK-NEXT:    %[[C0:.*]] = frontier.broadcast %c0, %x : tensor<2xf32>, tensor<?x2xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %d0 = arith.constant 0 : i32
// CHECK-NEXT:    %[[D0:.*]] = frontier.broadcast %d0, %x : i32, tensor<?x2xf32> -> tensor<?xi32>
// CHECK-NEXT:    %[[N:.*]], %[[T:.*]] = frontier.schedule @grow__expand, @grow__post(%[[H0]], %[[C0]], %[[D0]]) shared(%u_score, %max_depth, %w_left, %w_right) {sites = 2 : i64} : (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?xi32>), (tensor<2xf32>, tensor<?xi32>, tensor<6x2xf32>, tensor<6x2xf32>) -> (tensor<?xi32>, tensor<?xf32>)
// CHECK-NEXT:    func.return %[[N]], %[[T]] : tensor<?xi32>, tensor<?xf32>
