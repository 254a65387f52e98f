// RUN: recir-opt -p convert-tmath-to-loops %s | filecheck %s
// tmath.matmul calls the host's matrix kernel (`gemm_kernels.py`): the module
// declares it once however many products it has, and records in `recir.links`
// that its engine needs the kernel object, compiled once per host
// (`backend/kernels/compiled_gemm.py`).

func.func @two(%a: tensor<3x5xf32>, %b: tensor<5x7xf32>, %c: tensor<7x2xf32>) -> tensor<3x2xf32> {
  %ab = tmath.matmul %a, %b : tensor<3x5xf32>, tensor<5x7xf32> -> tensor<3x7xf32>
  %abc = tmath.matmul %ab, %c : tensor<3x7xf32>, tensor<7x2xf32> -> tensor<3x2xf32>
  func.return %abc : tensor<3x2xf32>
}

// CHECK:       builtin.module attributes {recir.links = ["gemm"]} {
// CHECK-LABEL: func.func @two(%0: !llvm.ptr, %1: !llvm.ptr, %2: !llvm.ptr, %3: !llvm.ptr) {
// CHECK:         %[[AB:.*]] = llvm.alloca %{{.*}} x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK-NEXT:    %[[M:.*]] = arith.constant 3 : i64
// CHECK-NEXT:    %[[N:.*]] = arith.constant 7 : i64
// CHECK-NEXT:    %[[K:.*]] = arith.constant 5 : i64
// CHECK-NEXT:    %[[LDA:.*]] = arith.constant 5 : i64
// CHECK-NEXT:    %[[LDB:.*]] = arith.constant 7 : i64
// CHECK-NEXT:    %[[LDC:.*]] = arith.constant 7 : i64
// CHECK-NEXT:    %[[NO:.*]] = arith.constant 0 : i64
// CHECK-NEXT:    llvm.call @recir_gemm_nn(%[[M]], %[[N]], %[[K]], %0, %[[LDA]], %1, %[[LDB]], %[[AB]], %[[LDC]], %[[NO]]) : (i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64) -> ()
// CHECK:         llvm.call @recir_gemm_nn(%{{.*}}, %{{.*}}, %{{.*}}, %[[AB]], %{{.*}}, %2, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK:         func.return
// CHECK-NEXT:  }

// CHECK:       llvm.func @recir_gemm_nn(i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64)
// CHECK-NOT:   llvm.func {{.*}}@recir_gemm_nn
