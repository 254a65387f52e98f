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

// -----

func.func @f(%w: tensor<7x5xf32>) {
  %t = adjoint.transpose %w : tensor<7x5xf32> -> tensor<7x5xf32>
  func.return
}
// CHECK: 'adjoint.transpose' op result has shape 7x5, expected 5x7

// -----

func.func @f(%w: tensor<7x5xf32>) {
  %p = adjoint.pad %w[0] : tensor<7x5xf32> -> tensor<9x4xf32>
  func.return
}
// CHECK: 'adjoint.pad' op input shape 7x5 does not pad to 9x4

// -----

func.func @f(%k: i32, %s: f32) {
  %o = adjoint.onehot %k, %s : i32, f32 -> tensor<7x5xf32>
  func.return
}
// CHECK: 'adjoint.onehot' op result must have rank 1, got shape 7x5

// -----

func.func @f(%y: tensor<4xf32>, %dy: tensor<7xf32>) {
  %g = adjoint.relu_grad %y, %dy : tensor<4xf32>, tensor<7xf32>
  func.return
}
// CHECK: 'adjoint.relu_grad' op operand shapes differ: lhs 4, rhs 7; expected equal shapes

// -----

func.func @f(%v: tensor<3x4x6xf32>, %dr: tensor<4xf32>, %y: tensor<6xf32>) {
  %dx = adjoint.bilinear_lhs %v, %dr, %y : tensor<3x4x6xf32>, tensor<4xf32>, tensor<6xf32> -> tensor<4xf32>
  func.return
}
// CHECK: 'adjoint.bilinear_lhs' op scale has shape 4, expected 3

// -----

func.func @f(%v: tensor<3x4x6xf32>, %dr: tensor<3xf32>, %x: tensor<4xf32>) {
  %dy = adjoint.bilinear_rhs %v, %dr, %x : tensor<3x4x6xf32>, tensor<3xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}
// CHECK: 'adjoint.bilinear_rhs' op result has shape 4, expected 6

// -----

func.func @f(%demb: tensor<7x5xf32>, %k: i32, %dx: tensor<7xf32>) {
  adjoint.accumulate_row %demb[%k], %dx : tensor<7x5xf32>, i32, tensor<7xf32>
  func.return
}
// CHECK: 'adjoint.accumulate_row' op value has shape 7, expected 5

// -----

func.func @f(%dv: tensor<3x4x6xf32>, %dr: tensor<3xf32>, %x: tensor<4xf32>) {
  adjoint.accumulate_bilinear %dv, %dr, %x, %x : tensor<3x4x6xf32>, tensor<3xf32>, tensor<4xf32>, tensor<4xf32>
  func.return
}
// CHECK: 'adjoint.accumulate_bilinear' op rhs has shape 4, expected 6

// -----

func.func @f(%dw: tensor<5x3xf32>, %dy: tensor<?x5xf32>, %x: tensor<3xf32>) {
  adjoint.accumulate_outer %dw, %dy, %x : tensor<5x3xf32>, tensor<?x5xf32>, tensor<3xf32>
  func.return
}
// CHECK: 'adjoint.accumulate_outer' op lhs and rhs must be both rows or both vectors

// -----

func.func @f(%demb: tensor<10x3xf32>, %k: i32, %x: tensor<?x3xf32>) {
  adjoint.accumulate_row %demb[%k], %x : tensor<10x3xf32>, i32, tensor<?x3xf32>
  func.return
}
// CHECK: 'adjoint.accumulate_row' op index must be rows of integers (tensor<?xi32>), got i32

// -----

func.func @f(%ids: tensor<?xi32>, %s: f32) {
  %o = adjoint.onehot %ids, %s : tensor<?xi32>, f32 -> tensor<?x5xf32>
  func.return
}
// CHECK: 'adjoint.onehot' op scale has type f32, expected tensor<?xf32>

// -----

func.func @f(%db: tensor<?x5xf32>, %dy: tensor<5xf32>) {
  adjoint.accumulate %db, %dy : tensor<?x5xf32>, tensor<5xf32>
  func.return
}
// CHECK: 'adjoint.accumulate' op value has shape 5, expected ?x5

// -----

// A row locked twice: natively the second lock waited for the first (the
// same spin lock) forever.
func.func @f(%n: i32) -> i32 {
  %r = arith.constant -5 : i64
  adjoint.lock_row %r
  adjoint.lock_row %r
  func.return %n : i32
}
// CHECK: 'adjoint.lock_row' op 'adjoint.lock_row' runs before the row's unlock_row

// -----

// Another row's lock may be the same one too: locks are striped by row.
func.func @f(%r: i64, %s: i64) {
  adjoint.lock_row %r
  adjoint.lock_row %s
  adjoint.unlock_row %s
  adjoint.unlock_row %r
  func.return
}
// CHECK: 'adjoint.lock_row' op 'adjoint.lock_row' runs before the row's unlock_row

// -----

// A call while the lock is held: the callee may take a row lock.
func.func @g() {
  func.return
}
func.func @f(%r: i64) {
  adjoint.lock_row %r
  func.call @g() : () -> ()
  adjoint.unlock_row %r
  func.return
}
// CHECK: 'adjoint.lock_row' op 'func.call' runs before the row's unlock_row

// -----

// A lock inside a loop the lock is held around.
func.func @f(%r: i64, %n: index) {
  %z = arith.constant 0 : index
  %one = arith.constant 1 : index
  adjoint.lock_row %r
  scf.for %i = %z to %n step %one {
    adjoint.lock_row %r
    adjoint.unlock_row %r
  }
  adjoint.unlock_row %r
  func.return
}
// CHECK: 'adjoint.lock_row' op 'adjoint.lock_row' runs before the row's unlock_row

// -----

// A lock never released: the next lock of its row waits forever.
func.func @f(%r: i64) {
  adjoint.lock_row %r
  func.return
}
// CHECK: 'adjoint.lock_row' op the row is not unlocked before the block ends

// -----

// An i1 index: the interpreter read true as 1, native code as -1.
func.func @f(%l: i1, %s: f32) -> tensor<4xf32> {
  %o = adjoint.onehot %l, %s : i1, f32 -> tensor<4xf32>
  func.return %o : tensor<4xf32>
}
// CHECK: 'adjoint.onehot' op index is an i1: extend it to an integer type first

// -----

func.func @f(%demb: tensor<5x3xf32>, %l: i1, %dx: tensor<3xf32>) {
  adjoint.accumulate_row %demb[%l], %dx : tensor<5x3xf32>, i1, tensor<3xf32>
  func.return
}
// CHECK: 'adjoint.accumulate_row' op index is an i1: extend it to an integer type first
