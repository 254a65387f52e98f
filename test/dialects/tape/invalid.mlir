// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

func.func @f(%h: tensor<4xf32>) {
  %f = tape.new 8 : !tape.frame
  tape.save %h, %f[8] : tensor<4xf32>
  func.return
}
// CHECK: 'tape.save' op bytes 8..24 of a tensor<4xf32> are outside the frame of 8 bytes

// -----

func.func @f() {
  %f = tape.new 8 : !tape.frame
  %x = tape.load %f[-4] : f32
  func.return
}
// CHECK: 'tape.load' op offset -4 is negative

// -----

// A slot that starts inside the frame but runs past its end.
func.func @f(%h: tensor<4xf32>) {
  %f = tape.new 8 : !tape.frame
  tape.save %h, %f[0] : tensor<4xf32>
  func.return
}
// CHECK: 'tape.save' op bytes 0..16 of a tensor<4xf32> are outside the frame of 8 bytes

// -----

// Two saves into one frame whose slots overlap: the second would overwrite
// part of the first's value.
func.func @f(%h: tensor<4xf32>, %i: i32) {
  %f = tape.new 32 : !tape.frame
  tape.save %h, %f[0] : tensor<4xf32>
  tape.save %i, %f[4] : i32
  func.return
}
// CHECK: 'tape.new' op a i32 saved at offset 4 overlaps the tensor<4xf32> saved before it (to byte 16)

// -----

// A load of a slot of this function's frame that nothing saves: native code
// read the arena's bytes, the interpreter failed with a KeyError.
func.func @f() -> tensor<4xf32> {
  %f = tape.new 16 : !tape.frame
  %h = tape.load %f[0] : tensor<4xf32>
  func.return %h : tensor<4xf32>
}
// CHECK: 'tape.load' op reads offset 0 of a frame no tape.save writes there
