// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

func.func @f(%a: tensor<3xf32>, %b: tensor<4xf32>) {
  %c = "tmath.add"(%a, %b) : (tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>
  func.return
}
// CHECK: 'tmath.add' op operand shapes differ: lhs 3, rhs 4; expected equal shapes

// -----

func.func @f(%a: tensor<3xf32>, %b: tensor<4xf32>) {
  %c = tmath.mul %a, %b : tensor<3xf32>, tensor<4xf32>
  func.return
}
// CHECK: 'tmath.mul' op operand shapes differ: lhs 3, rhs 4; expected equal shapes

// -----

func.func @f(%a: tensor<3xi32>) {
  %c = tmath.tanh %a : tensor<3xi32>
  func.return
}
// CHECK: 'tmath.tanh' op operand must be an f32 tensor, got tensor<3xi32>

// -----

func.func @f(%w: tensor<4x3xf32>, %x: tensor<4xf32>) {
  %y = tmath.matvec %w, %x : tensor<4x3xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}
// CHECK: 'tmath.matvec' op matrix 4x3 cannot multiply vector 4: expected a vector of 3 elements

// -----

func.func @f(%w: tensor<4x3xf32>, %x: tensor<3xf32>) {
  %y = tmath.matvec %w, %x : tensor<4x3xf32>, tensor<3xf32> -> tensor<3xf32>
  func.return
}
// CHECK: 'tmath.matvec' op result has shape 3, expected 4

// -----

func.func @f(%a: tensor<4x3xf32>, %b: tensor<4x3xf32>) {
  %y = tmath.matmul %a, %b : tensor<4x3xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  func.return
}
// CHECK: 'tmath.matmul' op inner dimensions differ: lhs 4x3, rhs 4x3; expected rhs with 3 rows

// -----

func.func @f(%v: tensor<2x3x3xf32>, %x: tensor<3xf32>, %y: tensor<4xf32>) {
  %r = tmath.bilinear %v, %x, %y : tensor<2x3x3xf32>, tensor<3xf32>, tensor<4xf32> -> tensor<2xf32>
  func.return
}
// CHECK: 'tmath.bilinear' op rhs has shape 4, expected 3

// -----

func.func @f(%a: tensor<3xf32>, %b: tensor<2x2xf32>) {
  %r = tmath.concat %a, %b : tensor<3xf32>, tensor<2x2xf32> -> tensor<5xf32>
  func.return
}
// CHECK: 'tmath.concat' op input 1 has shape 2x2, expected 1-d with trailing shape scalar

// -----

func.func @f(%a: tensor<3xf32>, %b: tensor<2xf32>) {
  %r = tmath.concat %a, %b : tensor<3xf32>, tensor<2xf32> -> tensor<6xf32>
  func.return
}
// CHECK: 'tmath.concat' op result has shape 6, expected 5

// -----

func.func @f(%a: tensor<8xf32>) {
  %r = tmath.slice %a[6] : tensor<8xf32> -> tensor<4xf32>
  func.return
}
// CHECK: 'tmath.slice' op slice [6, 10) is out of bounds for shape 8

// -----

func.func @f(%e: tensor<10xf32>, %i: i32) {
  %r = tmath.gather %e[%i] : tensor<10xf32>, i32 -> tensor<1xf32>
  func.return
}
// CHECK: 'tmath.gather' op table must have rank 2, got shape 10

// -----

func.func @f(%a: tensor<2x2xi32>, %i: i32) {
  %r = tmath.extract %a[%i] : tensor<2x2xi32>, i32 -> i32
  func.return
}
// CHECK: 'tmath.extract' op input must be a vector, got tensor<2x2xi32>

// -----

func.func @f() {
  %r = "tmath.constant"() <{value = dense<1.0> : tensor<3xf32>}> : () -> tensor<4xf32>
  func.return
}
// CHECK: 'tmath.constant' op value type tensor<3xf32> differs from result tensor<4xf32>

// -----

func.func @f(%x: tensor<4x?xf32>) {
  %r = tmath.exp %x : tensor<4x?xf32>
  func.return
}
// CHECK: 'tmath.exp' op operand must have a static shape or rows of one (tensor<?x...xf32>), got tensor<4x?xf32>

// -----

func.func @f(%x: tensor<5xf32>, %l: f32) {
  %r = tmath.softmax_xent %x, %l : tensor<5xf32>, f32 -> f32
  func.return
}
// CHECK: invalid.mlir:[[# @LINE - 3]]:3: error: 'tmath.softmax_xent' op Unexpected attribute f32{{$}}

// -----

func.func @f(%w: tensor<4x6xf32>, %x: tensor<?x5xf32>) {
  %y = tmath.matvec %w, %x : tensor<4x6xf32>, tensor<?x5xf32> -> tensor<?x4xf32>
  func.return
}
// CHECK: 'tmath.matvec' op matrix 4x6 cannot multiply vector 5: expected a vector of 6 elements

// -----

func.func @f(%w: tensor<4x6xf32>, %x: tensor<?x6xf32>) {
  %y = tmath.matvec %w, %x : tensor<4x6xf32>, tensor<?x6xf32> -> tensor<4xf32>
  func.return
}
// CHECK: 'tmath.matvec' op result has shape 4, expected ?x4

// -----

func.func @f(%a: tensor<?x4xf32>, %b: tensor<3xf32>) {
  %y = tmath.add %a, %b : tensor<?x4xf32>, tensor<3xf32>
  func.return
}
// CHECK: 'tmath.add' op operand shapes differ: lhs 4, rhs 3; expected equal shapes (or rows of the other's shape)

// -----

func.func @f(%a: tensor<?x4xf32>, %b: tensor<4xf32>) {
  %y = tmath.concat %a, %b : tensor<?x4xf32>, tensor<4xf32> -> tensor<?x8xf32>
  func.return
}
// CHECK: 'tmath.concat' op inputs must be all rows or all static tensors

// -----

func.func @f(%emb: tensor<10x3xf32>, %ids: tensor<?x2xi32>) {
  %e = tmath.gather %emb[%ids] : tensor<10x3xf32>, tensor<?x2xi32> -> tensor<?x3xf32>
  func.return
}
// CHECK: 'tmath.gather' op index must be rows of integers (tensor<?xi32>), got tensor<?x2xi32>

// -----

func.func @f(%x: tensor<?x4xf32>, %l: i32) {
  %y = tmath.softmax_xent %x, %l : tensor<?x4xf32>, i32 -> tensor<?xf32>
  func.return
}
// CHECK: 'tmath.softmax_xent' op label must be rows of integers (tensor<?xi32>), got i32

// -----

func.func @f(%x: tensor<?x4xf32>) {
  %s = tmath.sum %x : tensor<?x4xf32> -> f32
  func.return
}
// CHECK: 'tmath.sum' op result has type f32, expected tensor<?xf32>

// -----

// An i1 index: native code read true as -1, the interpreter as 1.
func.func @f(%s: tensor<?xi32>, %i: i1) -> i32 {
  %p = tmath.extract %s[%i] : tensor<?xi32>, i1 -> i32
  func.return %p : i32
}
// CHECK: 'tmath.extract' op index is an i1: extend it to an integer type first

// -----

// An i1 label: the interpreter read true as 1, native code as -1 (an index
// out of range at run time).
func.func @f(%x: tensor<4xf32>, %l: i1) -> f32 {
  %p = tmath.softmax_xent %x, %l : tensor<4xf32>, i1 -> f32
  func.return %p : f32
}
// CHECK: 'tmath.softmax_xent' op label is an i1: extend it to an integer type first

// -----

// a value yielded past the results went unread natively
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = tmath.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %t = tmath.tanh %a : tensor<4xf32>
    tmath.yield %t, %a : tensor<4xf32>, tensor<4xf32>
  }
  func.return %h : tensor<4xf32>
}
// CHECK: 'tmath.fused' op the body must end with a 'tmath.yield' of the results' types (tensor<4xf32>)

// -----

// A body that uses a value from outside the op: native code evaluates the
// body from its inputs alone and failed with a KeyError.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %h = tmath.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %t = tmath.add %a, %y : tensor<4xf32>
    tmath.yield %t : tensor<4xf32>
  }
  func.return %h : tensor<4xf32>
}
// CHECK: 'tmath.fused' op 'tmath.add' in the body uses %y defined outside the op: pass it as an input

// -----

// A size in an i8: natively 300 wrapped to 44, the interpreter gave 300.
func.func @f(%c: tensor<?xi32>) -> i8 {
  %n = tmath.size %c : tensor<?xi32> -> i8
  func.return %n : i8
}
// CHECK: 'tmath.size' op result must be i32, i64 or index, got i8

// -----

// No largest element: natively 0, the interpreter failed.
func.func @f(%x: tensor<0xf32>) -> i32 {
  %k = tmath.argmax %x : tensor<0xf32> -> i32
  func.return %k : i32
}
// CHECK: 'tmath.argmax' op cannot take the argmax of an empty vector

// -----

func.func @f(%x: tensor<?x0xf32>) -> tensor<?xi32> {
  %k = tmath.argmax %x : tensor<?x0xf32> -> tensor<?xi32>
  func.return %k : tensor<?xi32>
}
// CHECK: 'tmath.argmax' op cannot take the argmax of an empty vector
