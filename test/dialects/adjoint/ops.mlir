// RUN: RECIR_ROUNDTRIP
// RUN: recir-opt %s | recir-opt | filecheck %s

func.func @values(%dy: tensor<5xf32>, %w: tensor<5x3xf32>, %k: i32, %s: f32,
                  %v: tensor<2x3x4xf32>, %dr: tensor<2xf32>, %x: tensor<3xf32>, %y: tensor<4xf32>) {
  %dx = adjoint.vecmat %dy, %w : tensor<5xf32>, tensor<5x3xf32> -> tensor<3xf32>
  %t = adjoint.transpose %w : tensor<5x3xf32> -> tensor<3x5xf32>
  %p = adjoint.pad %x[2] : tensor<3xf32> -> tensor<5xf32>
  %o = adjoint.onehot %k, %s : i32, f32 -> tensor<5xf32>
  %g = adjoint.relu_grad %dy, %o : tensor<5xf32>
  %l = adjoint.bilinear_lhs %v, %dr, %y : tensor<2x3x4xf32>, tensor<2xf32>, tensor<4xf32> -> tensor<3xf32>
  %r = adjoint.bilinear_rhs %v, %dr, %x : tensor<2x3x4xf32>, tensor<2xf32>, tensor<3xf32> -> tensor<4xf32>
  func.return
}

// CHECK-LABEL: func.func @values
// CHECK-NEXT:    %dx = adjoint.vecmat %dy, %w : tensor<5xf32>, tensor<5x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %t = adjoint.transpose %w : tensor<5x3xf32> -> tensor<3x5xf32>
// CHECK-NEXT:    %p = adjoint.pad %x[2] : tensor<3xf32> -> tensor<5xf32>
// CHECK-NEXT:    %o = adjoint.onehot %k, %s : i32, f32 -> tensor<5xf32>
// CHECK-NEXT:    %g = adjoint.relu_grad %dy, %o : tensor<5xf32>
// CHECK-NEXT:    %l = adjoint.bilinear_lhs %v, %dr, %y : tensor<2x3x4xf32>, tensor<2xf32>, tensor<4xf32> -> tensor<3xf32>
// CHECK-NEXT:    %r = adjoint.bilinear_rhs %v, %dr, %x : tensor<2x3x4xf32>, tensor<2xf32>, tensor<3xf32> -> tensor<4xf32>
// CHECK-NEXT:    func.return

func.func @accumulate(%db: tensor<5xf32>, %dw: tensor<5x3xf32>, %dv: tensor<2x3x4xf32>,
                      %dy: tensor<5xf32>, %x: tensor<3xf32>, %k: i32, %dr: tensor<2xf32>,
                      %y: tensor<4xf32>) {
  adjoint.accumulate %db, %dy : tensor<5xf32>, tensor<5xf32>
  adjoint.accumulate_outer %dw, %dy, %x : tensor<5x3xf32>, tensor<5xf32>, tensor<3xf32>
  adjoint.accumulate_row %dw[%k], %x : tensor<5x3xf32>, i32, tensor<3xf32>
  adjoint.accumulate_bilinear %dv, %dr, %x, %y : tensor<2x3x4xf32>, tensor<2xf32>, tensor<3xf32>, tensor<4xf32>
  func.return
}

// CHECK-LABEL: func.func @accumulate
// CHECK-NEXT:    adjoint.accumulate %db, %dy : tensor<5xf32>, tensor<5xf32>
// CHECK-NEXT:    adjoint.accumulate_outer %dw, %dy, %x : tensor<5x3xf32>, tensor<5xf32>, tensor<3xf32>
// CHECK-NEXT:    adjoint.accumulate_row %dw[%k], %x : tensor<5x3xf32>, i32, tensor<3xf32>
// CHECK-NEXT:    adjoint.accumulate_bilinear %dv, %dr, %x, %y : tensor<2x3x4xf32>, tensor<2xf32>, tensor<3xf32>, tensor<4xf32>
// CHECK-NEXT:    func.return

// After convert-tmath-to-loops, in code with concurrent invokes.
func.func @threads(%acc: !llvm.ptr, %row: i64) {
  %mine = adjoint.thread_copy %acc slot 3 elements 12
  adjoint.lock_row %row
  adjoint.unlock_row %row
  func.return
}

// CHECK-LABEL: func.func @threads
// CHECK-NEXT:    %mine = adjoint.thread_copy %acc slot 3 elements 12
// CHECK-NEXT:    adjoint.lock_row %row
// CHECK-NEXT:    adjoint.unlock_row %row
// CHECK-NEXT:    func.return

// Row forms (a frontier's rows, `row_types.py`): an accumulate of rows adds
// every row (the matrix's gradient is one product over the rows), a row
// accumulate with rows of indices is a scatter-add.
func.func @rows(%dw: tensor<5x3xf32>, %db: tensor<5xf32>, %demb: tensor<10x3xf32>,
                %dtable: tensor<?x3xf32>, %w: tensor<5x3xf32>, %dy: tensor<?x5xf32>,
                %x: tensor<?x3xf32>, %ids: tensor<?xi32>, %s: tensor<?xf32>) -> (tensor<?x3xf32>, tensor<?x5xf32>, tensor<?x8xf32>) {
  %dx = adjoint.vecmat %dy, %w : tensor<?x5xf32>, tensor<5x3xf32> -> tensor<?x3xf32>
  %o = adjoint.onehot %ids, %s : tensor<?xi32>, tensor<?xf32> -> tensor<?x5xf32>
  %p = adjoint.pad %x[2] : tensor<?x3xf32> -> tensor<?x8xf32>
  adjoint.accumulate %db, %dy : tensor<5xf32>, tensor<?x5xf32>
  adjoint.accumulate_outer %dw, %dy, %x : tensor<5x3xf32>, tensor<?x5xf32>, tensor<?x3xf32>
  adjoint.accumulate_row %demb[%ids], %x : tensor<10x3xf32>, tensor<?xi32>, tensor<?x3xf32>
  adjoint.accumulate_row %dtable[%ids], %x : tensor<?x3xf32>, tensor<?xi32>, tensor<?x3xf32>
  func.return %dx, %o, %p : tensor<?x3xf32>, tensor<?x5xf32>, tensor<?x8xf32>
}

// CHECK-LABEL: func.func @rows
// CHECK-NEXT:    %dx = adjoint.vecmat %dy, %w : tensor<?x5xf32>, tensor<5x3xf32> -> tensor<?x3xf32>
// CHECK-NEXT:    %o = adjoint.onehot %ids, %s : tensor<?xi32>, tensor<?xf32> -> tensor<?x5xf32>
// CHECK-NEXT:    %p = adjoint.pad %x[2] : tensor<?x3xf32> -> tensor<?x8xf32>
// CHECK-NEXT:    adjoint.accumulate %db, %dy : tensor<5xf32>, tensor<?x5xf32>
// CHECK-NEXT:    adjoint.accumulate_outer %dw, %dy, %x : tensor<5x3xf32>, tensor<?x5xf32>, tensor<?x3xf32>
// CHECK-NEXT:    adjoint.accumulate_row %demb[%ids], %x : tensor<10x3xf32>, tensor<?xi32>, tensor<?x3xf32>
// CHECK-NEXT:    adjoint.accumulate_row %dtable[%ids], %x : tensor<?x3xf32>, tensor<?xi32>, tensor<?x3xf32>
