// RUN: recir-opt -p "capture-outer-refs,invoke-to-frontier,convert-tmath-to-loops{row-threads=7 row-team-work=4096}" %s | filecheck %s
// RUN: recir-opt -p capture-outer-refs,invoke-to-frontier,convert-tmath-to-loops %s | filecheck %s --check-prefix=SERIAL

// With row-threads, a product over rows calls the GEMM kernel's team form
// with the thread count and the policy's least work for a team (declared:
// the host's team object, `gemm_teams.team_module`, starts a libgomp team
// whose threads each call the kernel on their own block of C, or calls the
// kernel itself). An elementwise loop over rows
// (the concat, the bias rows, tanh, the leaf counts' addf: rows0 to rows3;
// tanh's is checked) is outlined into `.rows(data, lo,
// hi)` (noinline: compiled once, not in each caller); with the rows x width
// x ops at least the least work and two rows, on a thread not already one of
// a team's (a height loop's), the module's one `recir_rows.run` (called with
// a record of the row count, the `.rows`' address and the operands) starts a
// team of all row-threads (libgomp would end and recreate the threads a
// smaller team leaves out) whose threads run the module's one
// `recir_rows.part`: the `.rows` at the record's field 1 on the thread's
// block of rows; else it calls that `.rows` on all of them.
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

// The product plus the bias: on a thread of a height loop's team (with the
// loop's packed copy) C's tiles start from the bias itself; on the calling
// thread the bias rows are copied on the team (`rows1`, whose record holds
// the same bias) and the team form adds the product into them.
// CHECK-LABEL: func.func private @node__post(
// CHECK:         llvm.call @recir_gemm_nt.cached(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[BIAS:[0-9]+]], %{{.*}})
// CHECK:         llvm.mlir.addressof @node__post.rows1.rows
// CHECK:         llvm.store %[[BIAS]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         llvm.call @recir_rows.run(
// CHECK:         %[[THREADS:.*]] = arith.constant 7 : i64
// CHECK-NEXT:    %[[WORK:.*]] = arith.constant 4096 : i64
// CHECK-NEXT:    llvm.call @recir_gemm_nt.team(%{{.*}}, %[[THREADS]], %[[WORK]]) : (i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64, i64, i64) -> ()
// CHECK:         llvm.store %{{.*}}, %[[RECORD:.*]] : i64, !llvm.ptr
// CHECK-NEXT:    %[[ADDRESS:.*]] = llvm.mlir.addressof @node__post.rows2.rows : !llvm.ptr
// CHECK-NEXT:    %[[FIELD_ONE:.*]] = arith.constant 1 : i64
// CHECK-NEXT:    %[[AT_ONE:.*]] = llvm.getelementptr %[[RECORD]][%[[FIELD_ONE]]]
// CHECK-NEXT:    llvm.store %[[ADDRESS]], %[[AT_ONE]] : !llvm.ptr, !llvm.ptr
// CHECK:         %[[SEVEN:.*]] = arith.constant 7 : i64
// CHECK-NEXT:    %[[LEAST:.*]] = arith.constant 4096 : i64
// CHECK-NEXT:    llvm.call @recir_rows.run(%[[RECORD]], %{{.*}}, %[[SEVEN]], %[[LEAST]])
// CHECK:       llvm.func @GOMP_parallel(!llvm.ptr, !llvm.ptr, i32, i32)
// CHECK:       llvm.func internal @recir_rows.part(%[[DATA:.*]]: !llvm.ptr) {
// CHECK:         %[[FIELD:.*]] = llvm.getelementptr %[[DATA]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:    %[[ROWS:.*]] = llvm.load %[[FIELD]] : !llvm.ptr -> !llvm.ptr
// CHECK:         llvm.call @omp_get_thread_num()
// CHECK:         llvm.call @omp_get_num_threads()
// CHECK:         llvm.call %[[ROWS]](%[[DATA]], %{{.*}}, %{{.*}})
// CHECK:       llvm.func internal @recir_rows.run(%[[DATA:.*]]: !llvm.ptr, %[[PER_ROW:.*]]: i64, %[[THREADS:.*]]: i64, %[[LEAST:.*]]: i64) attributes {passthrough = ["noinline"]} {
// CHECK-NEXT:    %[[COUNT:.*]] = llvm.load %[[DATA]] : !llvm.ptr -> i64
// CHECK:         %[[ROWS:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    %[[TEAM:.*]] = arith.minsi %[[THREADS]], %[[COUNT]] : i64
// CHECK-NEXT:    %[[ROWS_WORK:.*]] = arith.muli %[[COUNT]], %[[PER_ROW]] : i64
// CHECK-NEXT:    %[[TWO:.*]] = arith.constant 2 : i64
// CHECK-NEXT:    %[[MANY:.*]] = arith.cmpi sge, %[[TEAM]], %[[TWO]] : i64
// CHECK-NEXT:    %[[ENOUGH:.*]] = arith.cmpi sge, %[[ROWS_WORK]], %[[LEAST]] : i64
// CHECK-NEXT:    %[[WORTH:.*]] = arith.andi %[[MANY]], %[[ENOUGH]] : i1
// CHECK-NEXT:    %[[IN_TEAM:.*]] = llvm.call @omp_get_num_threads() : () -> i32
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[ALONE:.*]] = arith.cmpi eq, %[[IN_TEAM]], %[[ONE]] : i32
// CHECK-NEXT:    %[[PAYS:.*]] = arith.andi %[[WORTH]], %[[ALONE]] : i1
// CHECK-NEXT:    cf.cond_br %[[PAYS]], ^[[ON_TEAM:.*]], ^[[ALONE_BLOCK:.*]]
// CHECK-NEXT:  ^[[ON_TEAM]]:
// CHECK-NEXT:    %[[ROWS_PART:.*]] = llvm.mlir.addressof @recir_rows.part : !llvm.ptr
// CHECK-NEXT:    %[[SIZE:.*]] = arith.trunci %[[THREADS]] : i64 to i32
// CHECK-NEXT:    %{{.*}} = arith.constant 0 : i32
// CHECK-NEXT:    llvm.call @GOMP_parallel(%[[ROWS_PART]], %[[DATA]], %[[SIZE]], %{{.*}})
// CHECK:       ^[[ALONE_BLOCK]]:
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK-NEXT:    llvm.call %[[ROWS]](%[[DATA]], %[[ZERO]], %[[COUNT]])
// CHECK-NOT:   .part
// CHECK:       llvm.func @recir_gemm_nt(i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64)
// CHECK:       llvm.func @recir_gemm_nt.team(i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64, i64, i64)
// CHECK:       llvm.func internal @node__post.rows2.rows(%{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64) attributes {passthrough = ["noinline"]} {
// CHECK:         llvm.call @recir_rows.apart0(

// SERIAL-LABEL: func.func private @node__post(
// SERIAL:         llvm.call @recir_gemm_nt_bias(
// SERIAL-NOT:     @recir_gemm_nt.team
// SERIAL-NOT:     @GOMP_parallel
// SERIAL-NOT:     recir_rows.part
