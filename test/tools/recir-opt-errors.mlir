// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s
// RUN: recir-opt %s --verify-diagnostics --split-input-file -p convert-recir-to-llvm | filecheck %s --check-prefix=ORDER

// Each error names the line of the op that is wrong.

func.func @f() {
  func.return
}
func.func @f() {
  func.return
}
// CHECK: recir-opt-errors.mlir:9:1: error: 'func.func' op redefines symbol @f (first defined at {{.*}}recir-opt-errors.mlir:6:1)

// -----

func.func @g(%n: i32) -> i32 {
  %r = arith.addi %n, %undefined : i32
  func.return %r : i32
}


// The error points at the first use, not at the end of the input.
// CHECK: recir-opt-errors.mlir:17:23: error: use of undefined value %undefined

// -----

// A pass run before the pass it depends on names the first op it cannot handle.
func.func @h(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tmath.tanh %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// ORDER: recir-opt-errors.mlir:29:3: error: 'tmath.tanh' op is not handled by convert-recir-to-llvm: run convert-tmath-to-loops before convert-recir-to-llvm


// -----

// So does a save into a frame (its value's bytes are copied by the loops).
func.func @s(%x: f32) -> f32 {
  %f = tape.new 8 : !tape.frame
  tape.save %x, %f[0] : f32
  %y = tape.load %f[0] : f32
  func.return %y : f32
}
// ORDER: recir-opt-errors.mlir:[[# @LINE - 4]]:3: error: 'tape.save' op is not handled by convert-recir-to-llvm: run convert-tmath-to-loops before convert-recir-to-llvm

// -----

// A type error found while parsing is one line naming the op, as the
// verifier's are.
func.func @t(%a: i32, %b: f32) -> i32 {
  %c = arith.addi %a, %b : i32
  func.return %c : i32
}
// CHECK: recir-opt-errors.mlir:[[# @LINE - 3]]:3: error: 'arith.addi' op operand %b has type f32 but is used as i32{{$}}
// CHECK-NOT: ^
