// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

func.func @f(%h: tensor<4xf32>, %rows: tensor<?xi32>) {
  %a = "frontier.take"(%h, %rows) : (tensor<4xf32>, tensor<?xi32>) -> tensor<4xf32>
  func.return
}
// CHECK: 'frontier.take' op source must be rows (a tensor with a leading ? and static other dimensions), got tensor<4xf32>

// -----

func.func @f(%h: tensor<?x4xf32>, %rows: tensor<?xf32>) {
  %a = frontier.take %h[%rows] : tensor<?x4xf32>, tensor<?xf32>
  func.return
}
// CHECK: 'frontier.take' op rows must be rows of integers (tensor<?xi32>), got tensor<?xf32>

// -----

func.func @f(%p: tensor<?xi32>) {
  %a, %b = "frontier.partition"(%p) : (tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>)
  func.return
}
// CHECK: 'frontier.partition' op predicate must be tensor<?xi1>, got tensor<?xi32>

// -----

func.func @f(%a: tensor<?x4xf32>, %b: tensor<?x3xf32>, %r: tensor<?xi32>) {
  %m = "frontier.merge"(%a, %r, %b, %r) : (tensor<?x4xf32>, tensor<?xi32>, tensor<?x3xf32>, tensor<?xi32>) -> tensor<?x4xf32>
  func.return
}
// CHECK: 'frontier.merge' op lhs, rhs and result must share one type, got tensor<?x4xf32>, tensor<?x3xf32>, tensor<?x4xf32>

// -----

func.func @f(%x: f32, %like: tensor<?xi32>) {
  %m = "frontier.broadcast"(%x, %like) : (f32, tensor<?xi32>) -> tensor<?x1xf32>
  func.return
}
// CHECK: 'frontier.broadcast' op result has type tensor<?x1xf32>, expected tensor<?xf32>

// -----

func.func @f(%a: tensor<?x2xi32>) {
  %p = "frontier.cmpi"(%a, %a) <{predicate = 2 : i64}> : (tensor<?x2xi32>, tensor<?x2xi32>) -> tensor<?xi1>
  func.return
}
// CHECK: 'frontier.cmpi' op operands must be rows of scalars, got tensor<?x2xi32>

// -----

func.func @f(%a: tensor<?xi32>) {
  %p = "frontier.cmpf"(%a, %a) <{predicate = 2 : i64}> : (tensor<?xi32>, tensor<?xi32>) -> tensor<?xi1>
  func.return
}
// CHECK: 'frontier.cmpf' op operands must be rows of scalars, got tensor<?xi32>

// -----

func.func @f(%v: tensor<4x2xi32>, %o: tensor<?xi32>, %t: tensor<?xi32>) {
  %l = frontier.extract_ragged %v, %o[%t, %t] : tensor<4x2xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
  func.return
}
// CHECK: 'frontier.extract_ragged' op values must be a vector, got tensor<4x2xi32>

// -----

func.func @f(%n: tensor<?xi32>) -> tensor<?xi32> {
  %r = frontier.schedule @missing, @missing(%n) shared() {sites = 1 : i64} : (tensor<?xi32>), () -> (tensor<?xi32>)
  func.return %r : tensor<?xi32>
}
// CHECK: 'frontier.schedule' op no function @missing in the module

// -----

func.func private @e(%tree: tensor<?xi32>, %n: tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) {
  func.return %n, %n, %n : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>
}
func.func private @p(%child: tensor<?xi32>, %count: tensor<?xi32>) -> tensor<?xi32> {
  func.return %count : tensor<?xi32>
}
func.func @f(%n: tensor<?xf32>) -> tensor<?xi32> {
  %r = frontier.schedule @e, @p(%n) shared() {sites = 1 : i64} : (tensor<?xf32>), () -> (tensor<?xi32>)
  func.return %r : tensor<?xi32>
}
// CHECK: 'frontier.schedule' op @e inputs are (tensor<?xi32>, tensor<?xi32>), expected (tensor<?xi32>, tensor<?xf32>)
