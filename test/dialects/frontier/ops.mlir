// RUN: RECIR_ROUNDTRIP
// RUN: recir-opt %s | recir-opt | filecheck %s

func.func @branch(%p: tensor<?xi1>, %h: tensor<?x4xf32>, %z: tensor<4xf32>) -> tensor<?x4xf32> {
  %yes, %no = frontier.partition %p : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %a = frontier.take %h[%yes] : tensor<?x4xf32>, tensor<?xi32>
  %b = frontier.broadcast %z, %no : tensor<4xf32>, tensor<?xi32> -> tensor<?x4xf32>
  %m = frontier.merge %a[%yes], %b[%no] : tensor<?x4xf32>
  func.return %m : tensor<?x4xf32>
}

// CHECK-LABEL: func.func @branch(
// CHECK-NEXT:    %yes, %no = frontier.partition %p : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    %a = frontier.take %h[%yes] : tensor<?x4xf32>, tensor<?xi32>
// CHECK-NEXT:    %b = frontier.broadcast %z, %no : tensor<4xf32>, tensor<?xi32> -> tensor<?x4xf32>
// CHECK-NEXT:    %m = frontier.merge %a[%yes], %b[%no] : tensor<?x4xf32>
// CHECK-NEXT:    func.return %m : tensor<?x4xf32>

func.func @compare(%a: tensor<?xi32>, %b: tensor<?xi32>, %x: tensor<?xf32>, %y: tensor<?xf32>) -> tensor<?xi1> {
  %p = frontier.cmpi slt, %a, %b : tensor<?xi32>
  %q = frontier.cmpf ogt, %x, %y : tensor<?xf32>
  %r = arith.andi %p, %q : tensor<?xi1>
  func.return %r : tensor<?xi1>
}

// CHECK-LABEL: func.func @compare(
// CHECK-NEXT:    %p = frontier.cmpi slt, %a, %b : tensor<?xi32>
// CHECK-NEXT:    %q = frontier.cmpf ogt, %x, %y : tensor<?xf32>
// CHECK-NEXT:    %r = arith.andi %p, %q : tensor<?xi1>

func.func @ragged(%left: tensor<?xi32>, %off: tensor<?xi32>, %tree: tensor<?xi32>, %node: tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>) {
  %l = frontier.extract_ragged %left, %off[%tree, %node] : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
  %n = frontier.size_ragged %off[%tree] : tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
  func.return %l, %n : tensor<?xi32>, tensor<?xi32>
}

// CHECK-LABEL: func.func @ragged(
// CHECK-NEXT:    %l = frontier.extract_ragged %left, %off[%tree, %node] : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %n = frontier.size_ragged %off[%tree] : tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>

// A countdown: one site; the stored value is each row's n.
func.func private @down__expand(%tree: tensor<?xi32>, %n: tensor<?xi32>, %step: i32) -> (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi1>) {
  %zero = arith.constant 0 : i32
  %zeros = frontier.broadcast %zero, %n : i32, tensor<?xi32> -> tensor<?xi32>
  %done = frontier.cmpi sle, %n, %zeros : tensor<?xi32>
  %stop, %go = frontier.partition %done : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %t = frontier.take %tree[%go] : tensor<?xi32>, tensor<?xi32>
  %m = frontier.take %n[%go] : tensor<?xi32>, tensor<?xi32>
  %steps = frontier.broadcast %step, %m : i32, tensor<?xi32> -> tensor<?xi32>
  %m1 = arith.subi %m, %steps : tensor<?xi32>
  func.return %go, %t, %m1, %n, %done : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi1>
}
func.func private @down__post(%n: tensor<?xi32>, %done: tensor<?xi1>, %child: tensor<?xi32>, %count: tensor<?xi32>, %step: i32) -> tensor<?xi32> {
  %stop, %go = frontier.partition %done : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %c = frontier.take %child[%go] : tensor<?xi32>, tensor<?xi32>
  %below = frontier.take %count[%c] : tensor<?xi32>, tensor<?xi32>
  %one = arith.constant 1 : i32
  %ones = frontier.broadcast %one, %stop : i32, tensor<?xi32> -> tensor<?xi32>
  %ones2 = frontier.broadcast %one, %go : i32, tensor<?xi32> -> tensor<?xi32>
  %more = arith.addi %below, %ones2 : tensor<?xi32>
  %r = frontier.merge %ones[%stop], %more[%go] : tensor<?xi32>
  func.return %r : tensor<?xi32>
}
func.func @count(%n: tensor<?xi32>, %step: i32) -> tensor<?xi32> {
  %r = frontier.schedule @down__expand, @down__post(%n) shared(%step) {sites = 1 : i64} : (tensor<?xi32>), (i32) -> (tensor<?xi32>)
  func.return %r : tensor<?xi32>
}

// CHECK-LABEL: func.func @count(
// CHECK-NEXT:    %r = frontier.schedule @down__expand, @down__post(%n) shared(%step) {sites = 1 : i64} : (tensor<?xi32>), (i32) -> (tensor<?xi32>)

// Its gradient: the cotangent of the result per batch element; no float
// operands here, so no gradients.
func.func @count_grad(%n: tensor<?xi32>, %step: i32, %d: tensor<?xi32>) {
  frontier.schedule_grad @down__expand, @down__post() moving(%n) shared(%step) {sites = 1 : i64} : (), (tensor<?xi32>), (i32) -> ()
  func.return
}

// CHECK-LABEL: func.func @count_grad(
// CHECK-NEXT:    frontier.schedule_grad @down__expand, @down__post() moving(%n) shared(%step) {sites = 1 : i64} : (), (tensor<?xi32>), (i32) -> ()
