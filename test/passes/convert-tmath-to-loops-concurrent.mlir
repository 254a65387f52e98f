// RUN: recir-opt -p convert-tmath-to-loops %s | filecheck %s
// In a module with concurrent invokes, accumulating calls may overlap: dense
// gradients go to this thread's copy of the buffer, found by the public
// function's argument it was passed down from (slot), and embedding rows
// are added under a row lock. Both calls of @sweep below may accumulate at once.

func.func private @sweep(%i: i32, %dw: tensor<4x3xf32>, %demb: tensor<10x3xf32>,
                         %dy: tensor<4xf32>, %x: tensor<3xf32>) {
  adjoint.accumulate_outer %dw, %dy, %x : tensor<4x3xf32>, tensor<4xf32>, tensor<3xf32>
  adjoint.accumulate_row %demb[%i], %x : tensor<10x3xf32>, i32, tensor<3xf32>
  func.return
}
func.func @grad(%i: i32, %dy: tensor<4xf32>, %x: tensor<3xf32>,
                %dw: tensor<4x3xf32>, %demb: tensor<10x3xf32>) {
  invoke.invoke @sweep(%i, %dw, %demb, %dy, %x) concurrent
      : (i32, tensor<4x3xf32>, tensor<10x3xf32>, tensor<4xf32>, tensor<3xf32>) -> ()
  invoke.invoke @sweep(%i, %dw, %demb, %dy, %x)
      : (i32, tensor<4x3xf32>, tensor<10x3xf32>, tensor<4xf32>, tensor<3xf32>) -> ()
  invoke.join : () -> ()
  func.return
}

// CHECK-LABEL: func.func private @sweep(
// CHECK-SAME:      %i: i32, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK:         %[[MINE:.*]] = adjoint.thread_copy %{{.*}} slot 3 elements 12
// CHECK:         scf.for
// CHECK:           llvm.getelementptr %[[MINE]]
// CHECK:         cf.assert
// CHECK:         adjoint.lock_row %[[ROW:.*]]
// CHECK:         scf.for
// CHECK:         adjoint.unlock_row %[[ROW]]
// CHECK-NOT:     adjoint.thread_copy
// CHECK-LABEL: func.func @grad(

// RUN: recir-opt -p convert-tmath-to-loops,convert-scf-to-cf,convert-invoke-to-gomp,convert-recir-to-llvm %s | filecheck %s --check-prefix=LLVM
// thread_copy loads the thread's table from the context (offset 56) and
// falls back to the buffer itself where the table is null.
// LLVM-LABEL: llvm.func internal @sweep(
// LLVM:         %[[C56:.*]] = llvm.mlir.constant(56) : i64
// LLVM-NEXT:    %[[FIELD:.*]] = llvm.getelementptr %0[%[[C56]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// LLVM-NEXT:    %[[TABLE:.*]] = llvm.load %[[FIELD]] : !llvm.ptr -> !llvm.ptr
// LLVM:         %[[C24:.*]] = llvm.mlir.constant(24) : i64
// LLVM-NEXT:    llvm.getelementptr %[[TABLE]][%[[C24]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// LLVM:         llvm.select
// LLVM:         adjoint.lock_row
// LLVM:         adjoint.unlock_row

// One internal function, after a barrier, calls another for each copied
// buffer (slot 3 at byte 24, 12 elements): it adds the other threads'
// copies into the caller's buffer, each thread its share, and zeroes them.
// The team entry of @grad calls the first, not loops of its own.
// LLVM-LABEL: llvm.func internal @grad__sum_copy(
// LLVM-SAME:    attributes {passthrough = ["noinline"]}
// LLVM:         llvm.sdiv
// LLVM:         llvm.fadd
// LLVM:         llvm.mlir.constant(0.000000e+00 : f32) : f32
// LLVM-LABEL: llvm.func internal @grad__sum_copies(
// LLVM-SAME:    attributes {passthrough = ["noinline"]}
// LLVM:         llvm.call @GOMP_barrier()
// LLVM:         llvm.call @omp_get_num_threads()
// LLVM:         %[[SLOT:.*]] = llvm.mlir.constant(24) : i64
// LLVM-NEXT:    %[[ELEMENTS:.*]] = llvm.mlir.constant(12) : i64
// LLVM-NEXT:    llvm.call @grad__sum_copy({{.*}}, %[[SLOT]], %[[ELEMENTS]])
// LLVM-NOT:     llvm.fadd
// LLVM:         llvm.return
// LLVM-LABEL: llvm.func @grad__team(
// LLVM:         llvm.call @GOMP_single_start()
// LLVM:         llvm.call @grad__item(
// LLVM-NOT:     llvm.fadd
// LLVM:         llvm.call @grad__sum_copies(
// LLVM-NEXT:    llvm.return
