// RUN: recir-opt -p "capture-outer-refs,invoke-to-frontier,convert-tmath-to-loops{row-threads=2 row-team-work=64}" %s | filecheck %s

// With row-threads, each elementwise loop over rows is outlined into a
// `.rows(data, lo, hi)`; one whose body is that of a `.rows` the module has
// already (here the second tanh, over rows of the same width and stride as
// the first's) calls that one instead, so that LLVM compiles the loop once.
// Each loop calls the module's one `recir_rows.run` with a record holding the
// address of its `.rows`; every team runs the module's one `recir_rows.part`.
func.func @two_tanh(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %root: i32,
                    %emb: tensor<10x2xf32>, %w: tensor<2x4xf32>, %v: tensor<2x4xf32>) -> tensor<2xf32> {
  invoke.subgraph @node(%i: i32) -> tensor<2xf32> {
    %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
    %zero = arith.constant 0 : i32
    %leaf = arith.cmpi slt, %l, %zero : i32
    %h = scf.if %leaf -> (tensor<2xf32>) {
      %wd = tmath.extract %word[%i] : tensor<?xi32>, i32 -> i32
      %e = tmath.gather %emb[%wd] : tensor<10x2xf32>, i32 -> tensor<2xf32>
      scf.yield %e : tensor<2xf32>
    } else {
      %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
      %hl = invoke.invoke @node(%l) : (i32) -> tensor<2xf32>
      %hr = invoke.invoke @node(%r) : (i32) -> tensor<2xf32>
      %c = tmath.concat %hl, %hr : tensor<2xf32>, tensor<2xf32> -> tensor<4xf32>
      %m = tmath.matvec %w, %c : tensor<2x4xf32>, tensor<4xf32> -> tensor<2xf32>
      %t = tmath.tanh %m : tensor<2xf32>
      %n = tmath.matvec %v, %c : tensor<2x4xf32>, tensor<4xf32> -> tensor<2xf32>
      %u = tmath.tanh %n : tensor<2xf32>
      %s = tmath.add %t, %u : tensor<2xf32>
      scf.yield %s : tensor<2xf32>
    }
    invoke.return %h : tensor<2xf32>
  }
  %h = invoke.invoke @node(%root) : (i32) -> tensor<2xf32>
  func.return %h : tensor<2xf32>
}

// CHECK-LABEL: func.func private @node__post(
// CHECK:         llvm.mlir.addressof @node__post.rows0.rows
// CHECK:         llvm.call @recir_rows.run(
// CHECK:         llvm.call @recir_gemm_nt.team(
// CHECK:         llvm.mlir.addressof @node__post.rows1.rows
// CHECK-NEXT:    arith.constant 1 : i64
// CHECK-NEXT:    llvm.getelementptr %[[FIRST:.*]][%{{.*}}]
// CHECK:         llvm.call @recir_rows.run(%[[FIRST]],
// CHECK:         llvm.call @recir_gemm_nt.team(
// CHECK:         llvm.mlir.addressof @node__post.rows1.rows
// CHECK-NEXT:    arith.constant 1 : i64
// CHECK-NEXT:    llvm.getelementptr %[[SECOND:.*]][%{{.*}}]
// CHECK:         llvm.call @recir_rows.run(%[[SECOND]],
// CHECK:         llvm.mlir.addressof @node__post.rows2.rows
// CHECK-COUNT-1: llvm.func internal @recir_rows.part(
// CHECK-NOT:     llvm.func internal @recir_rows.part(
// CHECK:         llvm.func internal @recir_rows.run(
// CHECK:         llvm.func internal @node__post.rows0.rows(
// CHECK:         llvm.func internal @node__post.rows1.rows(
// CHECK:         llvm.call @recir_rows.apart0(
// CHECK:         llvm.func internal @node__post.rows2.rows(
// CHECK-NOT:     llvm.func internal @node__post.rows3.rows
