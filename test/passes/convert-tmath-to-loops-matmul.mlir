// RUN: recir-opt -p convert-tmath-to-loops %s | filecheck %s
// tmath.matmul calls the module's matrix kernel (`gemm_kernels.py`), added
// once however many products the module has: vector tiles over a packed
// block of the right operand, the last vector of a row masked.

func.func @two(%a: tensor<3x5xf32>, %b: tensor<5x7xf32>, %c: tensor<7x2xf32>) -> tensor<3x2xf32> {
  %ab = tmath.matmul %a, %b : tensor<3x5xf32>, tensor<5x7xf32> -> tensor<3x7xf32>
  %abc = tmath.matmul %ab, %c : tensor<3x7xf32>, tensor<7x2xf32> -> tensor<3x2xf32>
  func.return %abc : tensor<3x2xf32>
}

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

// One kernel: tile functions per count of rows (over the packed block of B,
// and over B in place for a single tile of rows), then the driver.
// CHECK:       llvm.func internal @recir_gemm_nn.tile1(%{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: i64)
// CHECK:         llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<[[LANES:[0-9]+]]xf32>
// CHECK:         llvm.shufflevector
// CHECK:         llvm.intr.fma(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<[[LANES]]xf32>, vector<[[LANES]]xf32>, vector<[[LANES]]xf32>) -> vector<[[LANES]]xf32>
// CHECK:         llvm.call_intrinsic "llvm.masked.load.v[[LANES]]f32.p0"
// CHECK:         llvm.call_intrinsic "llvm.masked.store.v[[LANES]]f32.p0"
// CHECK:       llvm.func internal @recir_gemm_nn.direct1(
// CHECK:         llvm.call_intrinsic "llvm.masked.load.v[[LANES]]f32.p0"
// CHECK:       llvm.func internal @recir_gemm_nn(
// CHECK:         llvm.alloca %{{.*}} x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK:         llvm.call @recir_gemm_nn.tile
// CHECK-NOT:   llvm.func internal @recir_gemm_nn(
