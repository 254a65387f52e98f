// RUN: recir-opt -p tmath-fuse-elementwise,tmath-fuse-elementwise %s --split-input-file | filecheck %s
// RUN: recir-opt -p tmath-fuse-elementwise %s --split-input-file > %t.mlir
// RUN: recir-opt -p tmath-fuse-elementwise %t.mlir --split-input-file | diff %t.mlir -

// tmath-fuse-elementwise leaves the bodies of tmath.fused ops alone: on its
// own output, or on fused IR written by hand as in docs/ir.md, it changes
// nothing (it once fused a body's ops into a nested, invalid tmath.fused).

func.func @cell(%pi: tensor<4xf32>, %pf: tensor<4xf32>, %po: tensor<4xf32>,
                %pu: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c2, %h = tmath.fused(%pi, %pf, %po, %pu, %c)
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
      -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>, %o_in: tensor<4xf32>, %u_in: tensor<4xf32>,
       %c_in: tensor<4xf32>):
    %i = tmath.sigmoid %a : tensor<4xf32>
    %f = tmath.sigmoid %b : tensor<4xf32>
    %o = tmath.sigmoid %o_in : tensor<4xf32>
    %u = tmath.tanh %u_in : tensor<4xf32>
    %iu = tmath.mul %i, %u : tensor<4xf32>
    %fc = tmath.mul %f, %c_in : tensor<4xf32>
    %cn = tmath.add %iu, %fc : tensor<4xf32>
    %t = tmath.tanh %cn : tensor<4xf32>
    %hn = tmath.mul %o, %t : tensor<4xf32>
    tmath.yield %cn, %hn : tensor<4xf32>, tensor<4xf32>
  }
  func.return %h, %c2 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @cell
// CHECK-NEXT:    %c2, %h = tmath.fused(%pi, %pf, %po, %pu, %c)
// CHECK-NEXT:    ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>, %o_in: tensor<4xf32>, %u_in: tensor<4xf32>, %c_in: tensor<4xf32>):
// CHECK-NEXT:      %i = tmath.sigmoid %a : tensor<4xf32>
// CHECK-NEXT:      %f = tmath.sigmoid %b : tensor<4xf32>
// CHECK-NEXT:      %o = tmath.sigmoid %o_in : tensor<4xf32>
// CHECK-NEXT:      %u = tmath.tanh %u_in : tensor<4xf32>
// CHECK-NEXT:      %iu = tmath.mul %i, %u : tensor<4xf32>
// CHECK-NEXT:      %fc = tmath.mul %f, %c_in : tensor<4xf32>
// CHECK-NEXT:      %cn = tmath.add %iu, %fc : tensor<4xf32>
// CHECK-NEXT:      %t = tmath.tanh %cn : tensor<4xf32>
// CHECK-NEXT:      %hn = tmath.mul %o, %t : tensor<4xf32>
// CHECK-NEXT:      tmath.yield %cn, %hn : tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %h, %c2 : tensor<4xf32>, tensor<4xf32>

// -----

// A chain, fused by the first run; the second finds nothing to do.
func.func @chain(%x: tensor<3xf32>, %y: tensor<3xf32>, %w: tensor<3x3xf32>) -> tensor<3xf32> {
  %a = tmath.add %x, %y : tensor<3xf32>
  %b = tmath.tanh %a : tensor<3xf32>
  %m = tmath.matvec %w, %b : tensor<3x3xf32>, tensor<3xf32> -> tensor<3xf32>
  %c = tmath.mul %m, %b : tensor<3xf32>
  %d = tmath.neg %c : tensor<3xf32>
  func.return %d : tensor<3xf32>
}

// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %b = tmath.fused(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    ^{{.*}}(%{{.*}}: tensor<3xf32>, %{{.*}}: tensor<3xf32>):
// CHECK-NEXT:      %a = tmath.add %{{.*}}, %{{.*}} : tensor<3xf32>
// CHECK-NEXT:      %b_1 = tmath.tanh %a : tensor<3xf32>
// CHECK-NEXT:      tmath.yield %b_1 : tensor<3xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %m = tmath.matvec
// CHECK-NEXT:    %d = tmath.fused(%m, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    ^{{.*}}(%{{.*}}: tensor<3xf32>, %{{.*}}: tensor<3xf32>):
// CHECK-NEXT:      %c = tmath.mul %{{.*}}, %{{.*}} : tensor<3xf32>
// CHECK-NEXT:      %d_1 = tmath.neg %c : tensor<3xf32>
// CHECK-NEXT:      tmath.yield %d_1 : tensor<3xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %d : tensor<3xf32>
