// RUN: recir-opt -p capture-outer-refs,invoke-to-frontier,convert-tmath-to-loops %s | filecheck %s
// RUN: recir-opt -p capture-outer-refs,invoke-to-frontier,convert-tmath-to-loops,convert-scf-to-cf,convert-recir-to-llvm %s | filecheck %s --check-prefix=LLVM

// TreeRNN's shape (as in invoke-to-frontier.mlir), its batched functions
// lowered over rows: a rows value is a pointer to {i64 rows, ptr data}, and
// every temporary lies in a slot of the trailing scratch buffer, handed out
// again after its last use.
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

// Each batched function's scratch bytes a row: the most its live slots take
// at once (a slot is a multiple of 64 bytes a row), for the runtime to size
// the buffer by; the kernels' object its engine loads; its products by a
// weight, each an entry of a height loop's table of packed weights.
// CHECK:       builtin.module attributes {recir.scratch_per_row = {node__expand = 384 : i64, node__post = 512 : i64}, recir.links = ["gemm"], recir.packed_sites = 1 : i64}

// The recursive function keeps its own lowering; the batched entry is left
// to the runtime (it runs frontier.schedule from the IR before lowering).
// CHECK-LABEL: func.func private @node(%i: i32
// CHECK-NOT:   frontier.schedule

// The expansion: the inputs' descriptors are read first (rows, then data);
// its results are 9 descriptors to fill, then the scratch buffer and its size.
// CHECK-LABEL: func.func private @node__expand(
// CHECK-SAME:    %[[TREE:[0-9]+]]: !llvm.ptr, %[[I:[0-9]+]]: !llvm.ptr,
// CHECK-SAME:    %[[SCRATCH:[0-9]+]]: !llvm.ptr, %[[BYTES:[0-9]+]]: i64) {
// CHECK-NEXT:    %[[ROWS:.*]] = llvm.load %[[TREE]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[EIGHT:.*]] = arith.constant 8 : i64
// CHECK-NEXT:    %[[AT:.*]] = llvm.getelementptr %[[TREE]][%[[EIGHT]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %{{.*}} = llvm.load %[[AT]] : !llvm.ptr -> !llvm.ptr
// The rows each slot holds: the buffer's bytes over the bytes a row.
// CHECK:         %[[PER_ROW:.*]] = arith.constant 384 : i64
// CHECK-NEXT:    %[[HOLDS:.*]] = arith.divui %[[BYTES]], %[[PER_ROW]] : i64
// extract_ragged: the row counts agree, the result fits its slot (the
// first, at the buffer's start), then per row the tree id, the index in its
// tree and the flat index are checked.
// CHECK-NEXT:    %{{.*}} = arith.cmpi eq, %[[ROWS]], %{{.*}} : i64
// CHECK-NEXT:    cf.assert %{{.*}}, "{{.*}}: error: 'frontier.extract_ragged' op operands have different row counts"
// CHECK-NEXT:    %{{.*}} = arith.cmpi ule, %[[ROWS]], %[[HOLDS]] : i64
// CHECK-NEXT:    cf.assert %{{.*}}, "error: the frontier's scratch buffer is too small"
// CHECK-NOT:     llvm.getelementptr %[[SCRATCH]]
// CHECK:         scf.for %{{.*}} = %{{.*}} to %[[ROWS]] step %{{.*}} : i64 {
// CHECK-COUNT-3:   cf.assert %{{.*}}, "{{.*}}: error: 'frontier.extract_ragged' op index out of range"
// partition: one pass over the rows with the two counts carried, branch-free.
// CHECK:         %{{.*}}, %{{.*}} = scf.for %{{.*}} = %{{.*}} to %[[ROWS]] step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (i64, i64) : i64 {
// CHECK:           llvm.load %{{.*}} : !llvm.ptr -> i8
// CHECK:         cf.assert %{{.*}}, "{{.*}}: error: 'frontier.take' op index out of range"
// Each result is returned as its row count and data address.
// CHECK:         llvm.store %{{.*}}, %{{.*}} : i64, !llvm.ptr
// CHECK-NEXT:    %{{.*}} = arith.constant 8 : i64
// CHECK-NEXT:    %{{.*}} = llvm.getelementptr
// CHECK-NEXT:    llvm.store %{{.*}}, %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         func.return
// CHECK-NEXT:  }

// The bottom-up part: an embedding row per leaf (checked word index), the
// product of W with each inner row's concatenated children (X W^T: one call
// of the host's nt kernel, declared in the module once) in rows that start
// from the bias (the kernel's tiles start from it: no pass of its own for
// `+ b`), each row's tanh (a call: below), then the merge.
// CHECK-LABEL: func.func private @node__post(
// CHECK:         cf.assert %{{.*}}, "{{.*}}: error: 'tmath.gather' op index out of range"
// CHECK:         cf.assert %{{.*}}, "{{.*}}: error: 'frontier.take' op index out of range"
// W is an argument no op of the function writes: the product first looks
// for a table of packed weights in the context (its field `packed`, at byte
// 104: a height loop's, `gemm_cached`), and where the table has its entry
// (field 0: how many, the module's `recir.packed_sites`) calls
// `recir_gemm_nt.cached` with it (entry 0, from field 1), else the kernel.
// CHECK:         %[[CTX:.*]] = invoke.context
// CHECK-NEXT:    %[[AT:.*]] = arith.constant 104 : i64
// CHECK-NEXT:    %[[FIELD:.*]] = llvm.getelementptr %[[CTX]][%[[AT]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[TABLE:.*]] = llvm.load %[[FIELD]] : !llvm.ptr -> !llvm.ptr
// CHECK:         scf.if %{{.*}} {
// CHECK-NEXT:      %[[COUNT:.*]] = llvm.load %[[TABLE]] : !llvm.ptr -> i64
// CHECK-NEXT:      %[[SITE:.*]] = arith.constant 0 : i64
// CHECK-NEXT:      %{{.*}} = arith.cmpi slt, %[[SITE]], %[[COUNT]] : i64
// CHECK:         scf.if %{{.*}} {
// CHECK-NEXT:      %[[ONE:.*]] = arith.constant 1 : i64
// CHECK-NEXT:      %[[ENTRY:.*]] = llvm.getelementptr %[[TABLE]][%[[ONE]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT:      llvm.call @recir_gemm_nt.cached(%{{.*}}, %[[ENTRY]]) : (i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64, !llvm.ptr, !llvm.ptr) -> ()
// CHECK-NEXT:    } else {
// CHECK-NEXT:      llvm.call @recir_gemm_nt_bias(%{{.*}}) : (i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr) -> ()
// CHECK-NEXT:    }
// CHECK-NOT:     arith.addf
// CHECK:         llvm.call @recir_rows.apart0(%{{.*}}, %{{.*}}) : (!llvm.ptr, !llvm.ptr) -> ()
// CHECK:         cf.assert %{{.*}}, "{{.*}}: error: 'frontier.merge' op index out of range"
// CHECK:         func.return
// CHECK-NEXT:  }
// CHECK:       llvm.func @recir_gemm_nt_bias(i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr)
// CHECK-NEXT:  llvm.func @recir_gemm_nt.cached(i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64, !llvm.ptr, !llvm.ptr)
// CHECK-NOT:   llvm.func {{.*}}@recir_gemm_nt_bias(
// A row's elementwise loop, a function of its own whose pointers LLVM takes
// as noalias (a row's result lies apart from its input): no overlap checks.
// CHECK:       llvm.func internal @recir_rows.apart0(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) attributes {recir.noalias = [0 : i64, 1 : i64]} {

// Through convert-recir-to-llvm: each takes the context first and returns
// nothing (its results are in the descriptors).
// LLVM: llvm.func internal @node__expand(%{{.*}}: !llvm.ptr, {{.*}}, %{{.*}}: !llvm.ptr, %{{.*}}: i64) {
// LLVM: llvm.func internal @node__post(%{{.*}}: !llvm.ptr, {{.*}}, %{{.*}}: !llvm.ptr, %{{.*}}: i64) {
