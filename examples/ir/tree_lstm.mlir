// Binary TreeLSTM forward pass (Tai et al. 2015, N-ary with N = 2: one forget
// gate per child) over a tree given as structure arrays: left[i], right[i]
// (child node index, -1 at a leaf) and word[i] (word id at a leaf).
// Hidden size 4, embedding size 3, vocabulary 10. The subgraph @node uses the
// entry's parameters as outer values (its closure).
//   leaf:     x = emb[word];  [i; o; u] = W x + b_leaf;  c = i*u
//   internal: [i; f_l; f_r; o; u] = U [h_l; h_r] + b;    c = i*u + f_l*c_l + f_r*c_r
//   both:     gates through sigmoid (i, f, o) and tanh (u);  h = o * tanh(c)
func.func @tree_lstm(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>,
                     %root: i32, %emb: tensor<10x3xf32>, %w_leaf: tensor<12x3xf32>,
                     %b_leaf: tensor<12xf32>, %u: tensor<20x8xf32>, %b: tensor<20xf32>)
                     -> (tensor<4xf32>, tensor<4xf32>) {
  invoke.subgraph @node(%i: i32) -> (tensor<4xf32>, tensor<4xf32>) {
    %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
    %zero = arith.constant 0 : i32
    %is_leaf = arith.cmpi slt, %l, %zero : i32
    %h, %c = scf.if %is_leaf -> (tensor<4xf32>, tensor<4xf32>) {
      %w = tmath.extract %word[%i] : tensor<?xi32>, i32 -> i32
      %x = tmath.gather %emb[%w] : tensor<10x3xf32>, i32 -> tensor<3xf32>
      %wx = tmath.matvec %w_leaf, %x : tensor<12x3xf32>, tensor<3xf32> -> tensor<12xf32>
      %pre = tmath.add %wx, %b_leaf : tensor<12xf32>
      %pi = tmath.slice %pre[0] : tensor<12xf32> -> tensor<4xf32>
      %po = tmath.slice %pre[4] : tensor<12xf32> -> tensor<4xf32>
      %pu = tmath.slice %pre[8] : tensor<12xf32> -> tensor<4xf32>
      %ig = tmath.sigmoid %pi : tensor<4xf32>
      %og = tmath.sigmoid %po : tensor<4xf32>
      %ug = tmath.tanh %pu : tensor<4xf32>
      %cl = tmath.mul %ig, %ug : tensor<4xf32>
      %tc = tmath.tanh %cl : tensor<4xf32>
      %hl = tmath.mul %og, %tc : tensor<4xf32>
      scf.yield %hl, %cl : tensor<4xf32>, tensor<4xf32>
    } else {
      %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
      %hl, %cl = invoke.invoke @node(%l) : (i32) -> (tensor<4xf32>, tensor<4xf32>)
      %hr, %cr = invoke.invoke @node(%r) : (i32) -> (tensor<4xf32>, tensor<4xf32>)
      %hh = tmath.concat %hl, %hr : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
      %uh = tmath.matvec %u, %hh : tensor<20x8xf32>, tensor<8xf32> -> tensor<20xf32>
      %pre = tmath.add %uh, %b : tensor<20xf32>
      %pi = tmath.slice %pre[0] : tensor<20xf32> -> tensor<4xf32>
      %pfl = tmath.slice %pre[4] : tensor<20xf32> -> tensor<4xf32>
      %pfr = tmath.slice %pre[8] : tensor<20xf32> -> tensor<4xf32>
      %po = tmath.slice %pre[12] : tensor<20xf32> -> tensor<4xf32>
      %pu = tmath.slice %pre[16] : tensor<20xf32> -> tensor<4xf32>
      %ig = tmath.sigmoid %pi : tensor<4xf32>
      %flg = tmath.sigmoid %pfl : tensor<4xf32>
      %frg = tmath.sigmoid %pfr : tensor<4xf32>
      %og = tmath.sigmoid %po : tensor<4xf32>
      %ug = tmath.tanh %pu : tensor<4xf32>
      %iu = tmath.mul %ig, %ug : tensor<4xf32>
      %fcl = tmath.mul %flg, %cl : tensor<4xf32>
      %fcr = tmath.mul %frg, %cr : tensor<4xf32>
      %c1 = tmath.add %iu, %fcl : tensor<4xf32>
      %cn = tmath.add %c1, %fcr : tensor<4xf32>
      %tc = tmath.tanh %cn : tensor<4xf32>
      %hn = tmath.mul %og, %tc : tensor<4xf32>
      scf.yield %hn, %cn : tensor<4xf32>, tensor<4xf32>
    }
    invoke.return %h, %c : tensor<4xf32>, tensor<4xf32>
  }
  %h, %c = invoke.invoke @node(%root) : (i32) -> (tensor<4xf32>, tensor<4xf32>)
  func.return %h, %c : tensor<4xf32>, tensor<4xf32>
}
