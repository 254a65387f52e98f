// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

func.func @f(%dy: tensor<4xf32>, %w: tensor<5x3xf32>) {
  %dx = adjoint.vecmat %dy, %w : tensor<4xf32>, tensor<5x3xf32> -> tensor<3xf32>
  func.return
}
// CHECK: 'adjoint.vecmat' op vector has shape 4, expected 5

// -----

func.func @f(%x: tensor<3xf32>) {
  %p = adjoint.pad %x[3] : tensor<3xf32> -> tensor<5xf32>
  func.return
}
// CHECK: 'adjoint.pad' op rows [3, 6) are out of bounds for shape 5

// -----

func.func @f(%x: tensor<3xf32>) {
  %acc = tmath.add %x, %x : tensor<3xf32>
  adjoint.accumulate %acc, %x : tensor<3xf32>, tensor<3xf32>
  func.return
}
// CHECK: 'adjoint.accumulate' op the accumulator must be an argument of the enclosing func.func

// -----

func.func @f(%dw: tensor<5x3xf32>, %a: tensor<5xf32>, %b: tensor<4xf32>) {
  adjoint.accumulate_outer %dw, %a, %b : tensor<5x3xf32>, tensor<5xf32>, tensor<4xf32>
  func.return
}
// CHECK: 'adjoint.accumulate_outer' op rhs has shape 4, expected 3
