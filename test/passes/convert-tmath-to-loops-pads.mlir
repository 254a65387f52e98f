// RUN: recir-opt -p tmath-fuse-elementwise,convert-tmath-to-loops %s | filecheck %s

// A slice's gradients over rows (`adjoint.pad`s summed, as synthesize-gradients
// writes them for a product's sliced output) are written side by side into one
// rows buffer: each pad's rows moved to its offset (one llvm.memmove per row),
// the columns none covers zeroed; no zero-filled pad and no add.
func.func @slice_grads(%da: tensor<?x2xf32>, %db: tensor<?x3xf32>) -> tensor<?x6xf32> {
  %pa = adjoint.pad %da[4] : tensor<?x2xf32> -> tensor<?x6xf32>
  %pb = adjoint.pad %db[0] : tensor<?x3xf32> -> tensor<?x6xf32>
  %s = tmath.add %pa, %pb : tensor<?x6xf32>
  func.return %s : tensor<?x6xf32>
}

// The sum is the one temporary: its slot starts the scratch buffer (%[[OUT]]).
// CHECK-LABEL: func.func @slice_grads(
// CHECK-SAME:    %[[OUT:[0-9]+]]: !llvm.ptr, %{{[0-9]+}}: i64) {
// CHECK-NOT:     arith.addf
// CHECK:         cf.assert %{{.*}}, "{{.*}}: error: 'tmath.add' op operands have different row counts"
// CHECK-NOT:     arith.addf
// CHECK:         cf.assert %{{.*}}, "error: the frontier's scratch buffer is too small"
// CHECK-NEXT:    arith.constant
// CHECK-NEXT:    arith.constant
// CHECK-NEXT:    scf.for
// CHECK:           %[[ROW:.*]] = llvm.getelementptr %[[OUT]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT:      %[[FOUR:.*]] = arith.constant 4 : i64
// CHECK-NEXT:      %[[AT4:.*]] = llvm.getelementptr %[[ROW]][%[[FOUR]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK:           %[[BYTES2:.*]] = arith.constant 8 : i64
// CHECK:           llvm.call_intrinsic "llvm.memmove.p0.p0.i64"(%[[AT4]], %{{.*}}, %[[BYTES2]], %{{.*}})
// CHECK:         scf.for
// CHECK:           %[[BYTES3:.*]] = arith.constant 12 : i64
// CHECK:           llvm.call_intrinsic "llvm.memmove.p0.p0.i64"(%{{.*}}, %{{.*}}, %[[BYTES3]], %{{.*}})
// CHECK:         scf.for
// CHECK:           %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:           scf.for
// CHECK-NEXT:        %[[AT:.*]] = llvm.getelementptr
// CHECK-NEXT:        llvm.store %[[ZERO]], %[[AT]] : f32, !llvm.ptr
// CHECK-NOT:     arith.addf
// CHECK:         func.return
