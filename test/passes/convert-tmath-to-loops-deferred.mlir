// RUN: recir-opt -p 'convert-tmath-to-loops{defer-outer-bytes=40}' %s | filecheck %s
// RUN: recir-opt -p 'convert-tmath-to-loops{defer-outer-bytes=40},convert-scf-to-cf,convert-recir-to-llvm' %s | filecheck %s --check-prefix=LLVM
// RUN: recir-opt -p 'convert-tmath-to-loops{defer-outer-bytes=100}' %s | filecheck %s --check-prefix=SMALL

// With defer-outer-bytes, a module whose largest outer-product target has
// at least that many bytes (@dw: 48) turns every outer product into a
// buffer passed down unchanged from a public function's argument (slot)
// into a record in the running thread's log for that slot: room from
// adjoint.log_reserve, then dy and x copied in. Below the size (100), the
// products stay in-place loops.

func.func private @sweep(%dw: tensor<4x3xf32>, %db: tensor<4x1xf32>, %dy: tensor<4xf32>,
                         %x: tensor<3xf32>, %one: tensor<1xf32>) {
  adjoint.accumulate_outer %dw, %dy, %x : tensor<4x3xf32>, tensor<4xf32>, tensor<3xf32>
  adjoint.accumulate_outer %db, %dy, %one : tensor<4x1xf32>, tensor<4xf32>, tensor<1xf32>
  func.return
}
func.func @grad(%dy: tensor<4xf32>, %x: tensor<3xf32>, %one: tensor<1xf32>,
                %dw: tensor<4x3xf32>, %db: tensor<4x1xf32>) {
  invoke.invoke @sweep(%dw, %db, %dy, %x, %one) : (tensor<4x3xf32>, tensor<4x1xf32>, tensor<4xf32>, tensor<3xf32>, tensor<1xf32>) -> ()
  func.return
}

// CHECK-LABEL: func.func private @sweep(
// CHECK:         %[[ROOM:.*]] = adjoint.log_reserve slot 3 bytes 28
// CHECK:         scf.for
// CHECK:           llvm.store {{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK:         scf.for
// CHECK:         %{{.*}} = adjoint.log_reserve slot 4 bytes 20
// CHECK:         func.return

// LLVM:      builtin.module attributes {recir.outer_logs = [3 : i64, 4 : i64]
// LLVM:      llvm.func internal @sweep(
// LLVM:        llvm.call @recir_log_reserve(%{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i64, i64) -> !llvm.ptr
// LLVM:      llvm.func internal @recir_log_reserve(
// LLVM:        llvm.call @realloc(

// SMALL-NOT: adjoint.log_reserve
// SMALL:     arith.mulf
