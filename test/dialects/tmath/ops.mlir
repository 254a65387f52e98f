// RUN: RECIR_ROUNDTRIP
// RUN: recir-opt %s | recir-opt | filecheck %s

func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = tmath.add %a, %b : tensor<2x3xf32>
  %1 = tmath.sub %0, %b : tensor<2x3xf32>
  %2 = tmath.mul %1, %a : tensor<2x3xf32>
  %3 = tmath.div %2, %b : tensor<2x3xf32>
  %4 = tmath.neg %3 : tensor<2x3xf32>
  %5 = tmath.sigmoid %4 : tensor<2x3xf32>
  %6 = tmath.tanh %5 : tensor<2x3xf32>
  %7 = tmath.relu %6 : tensor<2x3xf32>
  %8 = tmath.exp %7 : tensor<2x3xf32>
  %9 = tmath.log %8 : tensor<2x3xf32>
  func.return %9 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:    %{{.*}} = tmath.add %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.sub %{{.*}}, %b : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.mul %{{.*}}, %a : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.div %{{.*}}, %b : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.neg %{{.*}} : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.sigmoid %{{.*}} : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.tanh %{{.*}} : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.relu %{{.*}} : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.exp %{{.*}} : tensor<2x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.log %{{.*}} : tensor<2x3xf32>
// CHECK-NEXT:    func.return %{{.*}} : tensor<2x3xf32>

func.func @products(%w: tensor<4x3xf32>, %x: tensor<3xf32>, %m: tensor<3x2xf32>,
                    %v: tensor<2x3x3xf32>) -> (tensor<4xf32>, tensor<4x2xf32>, tensor<2xf32>) {
  %y = tmath.matvec %w, %x : tensor<4x3xf32>, tensor<3xf32> -> tensor<4xf32>
  %z = tmath.matmul %w, %m : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
  %b = tmath.bilinear %v, %x, %x : tensor<2x3x3xf32>, tensor<3xf32>, tensor<3xf32> -> tensor<2xf32>
  func.return %y, %z, %b : tensor<4xf32>, tensor<4x2xf32>, tensor<2xf32>
}

// CHECK-LABEL: func.func @products(
// CHECK:         %{{.*}} = tmath.matvec %w, %x : tensor<4x3xf32>, tensor<3xf32> -> tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.matmul %w, %m : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    %{{.*}} = tmath.bilinear %v, %x, %x : tensor<2x3x3xf32>, tensor<3xf32>, tensor<3xf32> -> tensor<2xf32>

func.func @structure(%emb: tensor<10x4xf32>, %children: tensor<?xi32>, %i: i32,
                     %s: f32) -> (tensor<8xf32>, i32, i32, tensor<4xf32>) {
  %w = tmath.extract %children[%i] : tensor<?xi32>, i32 -> i32
  %e = tmath.gather %emb[%w] : tensor<10x4xf32>, i32 -> tensor<4xf32>
  %n = tmath.size %children : tensor<?xi32> -> i32
  %c = tmath.concat %e, %e : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
  %h = tmath.slice %c[2] : tensor<8xf32> -> tensor<4xf32>
  %f = tmath.fill %s : f32 -> tensor<4xf32>
  %k = tmath.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %z = tmath.constant dense<0.0> : tensor<4xf32>
  %g = tmath.add %f, %k : tensor<4xf32>
  func.return %c, %w, %n, %g : tensor<8xf32>, i32, i32, tensor<4xf32>
}

// CHECK-LABEL: func.func @structure(
// CHECK:         %{{.*}} = tmath.extract %children[%i] : tensor<?xi32>, i32 -> i32
// CHECK-NEXT:    %{{.*}} = tmath.gather %emb[%{{.*}}] : tensor<10x4xf32>, i32 -> tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.size %children : tensor<?xi32> -> i32
// CHECK-NEXT:    %{{.*}} = tmath.concat %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
// CHECK-NEXT:    %{{.*}} = tmath.slice %{{.*}}[2] : tensor<8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.fill %s : f32 -> tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.constant dense<0.000000e+00> : tensor<4xf32>

func.func @losses(%x: tensor<5xf32>, %label: i32) -> (f32, f32, i32, tensor<5xf32>, f32) {
  %s = tmath.sum %x : tensor<5xf32> -> f32
  %m = tmath.max %x : tensor<5xf32> -> f32
  %k = tmath.argmax %x : tensor<5xf32> -> i32
  %p = tmath.softmax %x : tensor<5xf32>
  %l = tmath.softmax_xent %x, %label : tensor<5xf32>, i32 -> f32
  func.return %s, %m, %k, %p, %l : f32, f32, i32, tensor<5xf32>, f32
}

// CHECK-LABEL: func.func @losses(
// CHECK-NEXT:    %{{.*}} = tmath.sum %x : tensor<5xf32> -> f32
// CHECK-NEXT:    %{{.*}} = tmath.max %x : tensor<5xf32> -> f32
// CHECK-NEXT:    %{{.*}} = tmath.argmax %x : tensor<5xf32> -> i32
// CHECK-NEXT:    %{{.*}} = tmath.softmax %x : tensor<5xf32>
// CHECK-NEXT:    %{{.*}} = tmath.softmax_xent %x, %label : tensor<5xf32>, i32 -> f32

// Row forms: a leading `?` is one row per invocation of a frontier; a
// uniform operand (the matrix, the bias, the table) is shared by every row.
func.func @rows(%w: tensor<4x6xf32>, %x: tensor<?x6xf32>, %b: tensor<4xf32>, %v: tensor<4x3x3xf32>,
                %emb: tensor<10x3xf32>, %ids: tensor<?xi32>, %table: tensor<?xi32>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?xi32>) {
  %y = tmath.matvec %w, %x : tensor<4x6xf32>, tensor<?x6xf32> -> tensor<?x4xf32>
  %z = tmath.add %y, %b : tensor<?x4xf32>, tensor<4xf32>
  %t = tmath.tanh %z : tensor<?x4xf32>
  %s = tmath.slice %x[3] : tensor<?x6xf32> -> tensor<?x3xf32>
  %e = tmath.gather %emb[%ids] : tensor<10x3xf32>, tensor<?xi32> -> tensor<?x3xf32>
  %c = tmath.concat %s, %e : tensor<?x3xf32>, tensor<?x3xf32> -> tensor<?x6xf32>
  %r = tmath.bilinear %v, %s, %e : tensor<4x3x3xf32>, tensor<?x3xf32>, tensor<?x3xf32> -> tensor<?x4xf32>
  %sum = tmath.sum %c : tensor<?x6xf32> -> tensor<?xf32>
  %k = tmath.argmax %r : tensor<?x4xf32> -> tensor<?xi32>
  %l = tmath.extract %table[%k] : tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
  %loss = tmath.softmax_xent %t, %l : tensor<?x4xf32>, tensor<?xi32> -> tensor<?xf32>
  func.return %sum, %loss, %l : tensor<?xf32>, tensor<?xf32>, tensor<?xi32>
}

// CHECK-LABEL: func.func @rows(
// CHECK-NEXT:    %{{.*}} = tmath.matvec %w, %x : tensor<4x6xf32>, tensor<?x6xf32> -> tensor<?x4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.add %{{.*}}, %b : tensor<?x4xf32>, tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.tanh %{{.*}} : tensor<?x4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.slice %x[3] : tensor<?x6xf32> -> tensor<?x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.gather %emb[%ids] : tensor<10x3xf32>, tensor<?xi32> -> tensor<?x3xf32>
// CHECK-NEXT:    %{{.*}} = tmath.concat %{{.*}}, %{{.*}} : tensor<?x3xf32>, tensor<?x3xf32> -> tensor<?x6xf32>
// CHECK-NEXT:    %{{.*}} = tmath.bilinear %v, %{{.*}}, %{{.*}} : tensor<4x3x3xf32>, tensor<?x3xf32>, tensor<?x3xf32> -> tensor<?x4xf32>
// CHECK-NEXT:    %{{.*}} = tmath.sum %{{.*}} : tensor<?x6xf32> -> tensor<?xf32>
// CHECK-NEXT:    %{{.*}} = tmath.argmax %{{.*}} : tensor<?x4xf32> -> tensor<?xi32>
// CHECK-NEXT:    %{{.*}} = tmath.extract %table[%{{.*}}] : tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %{{.*}} = tmath.softmax_xent %{{.*}}, %{{.*}} : tensor<?x4xf32>, tensor<?xi32> -> tensor<?xf32>
