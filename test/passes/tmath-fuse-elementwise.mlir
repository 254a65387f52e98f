// RUN: recir-opt -p tmath-fuse-elementwise %s --split-input-file | filecheck %s

// The TreeLSTM cell's tail: gates, the new cell state and h in one group.
func.func @cell(%pi: tensor<4xf32>, %pf: tensor<4xf32>, %po: tensor<4xf32>, %pu: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %i = tmath.sigmoid %pi : tensor<4xf32>
  %f = tmath.sigmoid %pf : tensor<4xf32>
  %o = tmath.sigmoid %po : tensor<4xf32>
  %u = tmath.tanh %pu : tensor<4xf32>
  %iu = tmath.mul %i, %u : tensor<4xf32>
  %fc = tmath.mul %f, %c : tensor<4xf32>
  %c2 = tmath.add %iu, %fc : tensor<4xf32>
  %t = tmath.tanh %c2 : tensor<4xf32>
  %h = tmath.mul %o, %t : tensor<4xf32>
  func.return %h, %c2 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @cell(%pi: tensor<4xf32>, %pf: tensor<4xf32>, %po: tensor<4xf32>, %pu: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
// CHECK-NEXT:    %c2, %h = tmath.fused(%pi, %pf, %po, %pu, %c) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
// CHECK-NEXT:    ^{{.*}}(%{{[0-9]+}}: tensor<4xf32>, %{{[0-9]+}}: tensor<4xf32>, %{{[0-9]+}}: tensor<4xf32>, %{{[0-9]+}}: tensor<4xf32>, %{{[0-9]+}}: tensor<4xf32>):
// CHECK-NEXT:      %i = tmath.sigmoid %{{[0-9]+}} : tensor<4xf32>
// CHECK-NEXT:      %f = tmath.sigmoid %{{[0-9]+}} : tensor<4xf32>
// CHECK-NEXT:      %o = tmath.sigmoid %{{[0-9]+}} : tensor<4xf32>
// CHECK-NEXT:      %u = tmath.tanh %{{[0-9]+}} : tensor<4xf32>
// CHECK-NEXT:      %iu = tmath.mul %i, %u : tensor<4xf32>
// CHECK-NEXT:      %fc = tmath.mul %f, %{{[0-9]+}} : tensor<4xf32>
// CHECK-NEXT:      %c2_1 = tmath.add %iu, %fc : tensor<4xf32>
// CHECK-NEXT:      %t = tmath.tanh %c2_1 : tensor<4xf32>
// CHECK-NEXT:      %h_1 = tmath.mul %o, %t : tensor<4xf32>
// CHECK-NEXT:      tmath.yield %c2_1, %h_1 : tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %h, %c2 : tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:  }

// -----


// A diamond: one input feeds two branches that meet again.
func.func @diamond(%x: tensor<3xf32>) -> tensor<3xf32> {
  %a = tmath.exp %x : tensor<3xf32>
  %b = tmath.tanh %x : tensor<3xf32>
  %c = tmath.mul %a, %b : tensor<3xf32>
  func.return %c : tensor<3xf32>
}

// CHECK-LABEL: func.func @diamond(%x: tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    %c = tmath.fused(%x) : (tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    ^{{.*}}(%{{[0-9]+}}: tensor<3xf32>):
// CHECK-NEXT:      %a = tmath.exp %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      %b = tmath.tanh %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      %c_1 = tmath.mul %a, %b : tensor<3xf32>
// CHECK-NEXT:      tmath.yield %c_1 : tensor<3xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %c : tensor<3xf32>
// CHECK-NEXT:  }

// -----


// A matrix product interrupts the chain: two groups, the product between.
func.func @interrupted(%w: tensor<3x3xf32>, %x: tensor<3xf32>) -> tensor<3xf32> {
  %a = tmath.tanh %x : tensor<3xf32>
  %b = tmath.mul %a, %x : tensor<3xf32>
  %y = tmath.matvec %w, %b : tensor<3x3xf32>, tensor<3xf32> -> tensor<3xf32>
  %c = tmath.sigmoid %y : tensor<3xf32>
  %d = tmath.add %c, %b : tensor<3xf32>
  func.return %d : tensor<3xf32>
}

// CHECK-LABEL: func.func @interrupted(%w: tensor<3x3xf32>, %x: tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    %b = tmath.fused(%x) : (tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    ^{{.*}}(%{{[0-9]+}}: tensor<3xf32>):
// CHECK-NEXT:      %a = tmath.tanh %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      %b_1 = tmath.mul %a, %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      tmath.yield %b_1 : tensor<3xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = tmath.matvec %w, %b : tensor<3x3xf32>, tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %d = tmath.fused(%y, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    ^{{.*}}(%{{[0-9]+}}: tensor<3xf32>, %{{[0-9]+}}: tensor<3xf32>):
// CHECK-NEXT:      %c = tmath.sigmoid %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      %d_1 = tmath.add %c, %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      tmath.yield %d_1 : tensor<3xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %d : tensor<3xf32>
// CHECK-NEXT:  }

// -----


// A value used inside and outside the group stays a result; a use between
// the group's ops (the sum) keeps its producer out of the later group.
func.func @multi_use(%x: tensor<3xf32>) -> (tensor<3xf32>, f32) {
  %a = tmath.exp %x : tensor<3xf32>
  %b = tmath.neg %a : tensor<3xf32>
  %s = tmath.sum %b : tensor<3xf32> -> f32
  %c = tmath.mul %b, %a : tensor<3xf32>
  %d = tmath.relu %c : tensor<3xf32>
  func.return %d, %s : tensor<3xf32>, f32
}

// CHECK-LABEL: func.func @multi_use(%x: tensor<3xf32>) -> (tensor<3xf32>, f32) {
// CHECK-NEXT:    %a, %b = tmath.fused(%x) : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
// CHECK-NEXT:    ^{{.*}}(%{{[0-9]+}}: tensor<3xf32>):
// CHECK-NEXT:      %a_1 = tmath.exp %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      %b_1 = tmath.neg %a_1 : tensor<3xf32>
// CHECK-NEXT:      tmath.yield %a_1, %b_1 : tensor<3xf32>, tensor<3xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %s = tmath.sum %b : tensor<3xf32> -> f32
// CHECK-NEXT:    %d = tmath.fused(%b, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    ^{{.*}}(%{{[0-9]+}}: tensor<3xf32>, %{{[0-9]+}}: tensor<3xf32>):
// CHECK-NEXT:      %c = tmath.mul %{{[0-9]+}}, %{{[0-9]+}} : tensor<3xf32>
// CHECK-NEXT:      %d_1 = tmath.relu %c : tensor<3xf32>
// CHECK-NEXT:      tmath.yield %d_1 : tensor<3xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %d, %s : tensor<3xf32>, f32
// CHECK-NEXT:  }
