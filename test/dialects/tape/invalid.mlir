// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

func.func @f(%h: tensor<4xf32>) {
  %f = tape.new 8 : !tape.frame
  tape.save %h, %f[8] : tensor<4xf32>
  func.return
}
// CHECK: 'tape.save' op offset 8 is outside the frame of 8 bytes

// -----

func.func @f() {
  %f = tape.new 8 : !tape.frame
  %x = tape.load %f[-4] : f32
  func.return
}
// CHECK: 'tape.load' op offset -4 is negative
