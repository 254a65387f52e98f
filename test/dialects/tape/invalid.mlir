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

// -----

// A frame of no bytes: natively the arena gave a null frame and the entry
// returned 0.0 with no error.
func.func @f(%x: f32) -> f32 {
  %f = tape.new 0 : !tape.frame
  func.return %x : f32
}
// CHECK: 'tape.new' op needs bytes > 0, got 0

// -----

func.func @f(%x: f32) -> f32 {
  %f = tape.new -64 : !tape.frame
  func.return %x : f32
}
// CHECK: 'tape.new' op needs bytes > 0, got -64

// -----

// 2^63 - 1 bytes: the arena's rounding to 64 bytes wrapped it to a negative
// size; natively it failed as out of memory only because the pointer past
// it compared above the chunk's end, the interpreter ran it.
func.func @f(%x: f32) -> f32 {
  %f = tape.new 9223372036854775807 : !tape.frame
  tape.save %x, %f[0] : f32
  %y = tape.load %f[0] : f32
  func.return %y : f32
}
// CHECK: 'tape.new' op needs bytes <= 2^62 (4611686018427387904), got 9223372036854775807: no machine can allocate such a frame

// -----

func.func @f(%x: f32) -> f32 {
  %f = tape.new 4611686018427387905 : !tape.frame
  func.return %x : f32
}
// CHECK: 'tape.new' op needs bytes <= 2^62 (4611686018427387904), got 4611686018427387905

// -----

// A load of another type than the save there: natively it reinterpreted the
// f32's bits (1069547520 for 1.5), the interpreter returned the f32.
func.func @f(%x: f32) -> i32 {
  %f = tape.new 8 : !tape.frame
  tape.save %x, %f[0] : f32
  %y = tape.load %f[0] : i32
  func.return %y : i32
}
// CHECK: 'tape.load' op reads a i32 at offset 0, where tape.save writes a f32

// -----

// The only save runs in a loop that may run no times: natively the load
// read 0.0, the interpreter failed on the unsaved slot.
func.func @f(%x: f32, %n: i32) -> f32 {
  %f = tape.new 8 : !tape.frame
  %z = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  scf.for %i = %z to %n step %one : i32 {
    tape.save %x, %f[0] : f32
  }
  %y = tape.load %f[0] : f32
  func.return %y : f32
}
// CHECK: 'tape.load' op reads offset 0 of a frame, but no tape.save there dominates it: it may run before any save

// -----

// The save is in a block that does not dominate the load's.
func.func @f(%x: f32, %c: i1) -> f32 {
  %f = tape.new 8 : !tape.frame
  cf.cond_br %c, ^save, ^load
^save:
  tape.save %x, %f[0] : f32
  cf.br ^load
^load:
  %y = tape.load %f[0] : f32
  func.return %y : f32
}
// CHECK: 'tape.load' op reads offset 0 of a frame, but no tape.save there dominates it: it may run before any save

// -----

// A save after the load in the same block does not reach it either.
func.func @f(%x: f32) -> f32 {
  %f = tape.new 8 : !tape.frame
  %y = tape.load %f[0] : f32
  tape.save %x, %f[0] : f32
  func.return %y : f32
}
// CHECK: 'tape.load' op reads offset 0 of a frame, but no tape.save there dominates it: it may run before any save
