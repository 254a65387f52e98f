// RUN: RECIR_ROUNDTRIP
// RUN: recir-opt %s | recir-opt | filecheck %s

func.func @frames(%h: tensor<4xf32>, %i: i32, %child: !tape.frame) -> (tensor<4xf32>, !tape.frame) {
  %f = tape.new 32 : !tape.frame
  tape.save %h, %f[0] : tensor<4xf32>
  tape.save %i, %f[16] : i32
  tape.save %child, %f[24] : !tape.frame
  %h2 = tape.load %f[0] : tensor<4xf32>
  func.return %h2, %f : tensor<4xf32>, !tape.frame
}

// CHECK-LABEL: func.func @frames(%h: tensor<4xf32>, %i: i32, %child: !tape.frame) -> (tensor<4xf32>, !tape.frame) {
// CHECK-NEXT:    %f = tape.new 32 : !tape.frame
// CHECK-NEXT:    tape.save %h, %f[0] : tensor<4xf32>
// CHECK-NEXT:    tape.save %i, %f[16] : i32
// CHECK-NEXT:    tape.save %child, %f[24] : !tape.frame
// CHECK-NEXT:    %h2 = tape.load %f[0] : tensor<4xf32>
// CHECK-NEXT:    func.return %h2, %f : tensor<4xf32>, !tape.frame
// CHECK-NEXT:  }
