// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

dataflow.graph @f(%p: i32, %v: i32) -> i32 {
  %t, %e = dataflow.switch %p, %v : i32
  dataflow.output %t : i32
}
// CHECK: invalid.mlir:[[# @LINE - 3]]:3: error: 'dataflow.switch' op operand %p has type i32 but is used as i1{{$}}

// -----

dataflow.graph @f(%v: i32) -> i32 {
  %r = dataflow.join %v : i32
  dataflow.output %r : i32
}
// CHECK: 'dataflow.join' op needs at least two inputs, got 1

// -----

dataflow.graph @f(%v: i32) -> i32 {
  %r = dataflow.return %v from @g[0] : i32
  dataflow.output %r : i32
}
// CHECK: 'dataflow.graph' op @f: 'dataflow.return' from @g[0] has no 'dataflow.call' to @g[0]

// -----

dataflow.graph @f(%v: i32) -> f32 {
  dataflow.output %v : i32
}
// CHECK: 'dataflow.output' op outputs (i32) but @f declares results (f32)

// -----

dataflow.graph @f(%v: i32, %w: i32) -> i32 {
  %r = dataflow.gate %v on %w : i32, i32
  dataflow.output %r : i32
}
// CHECK: 'dataflow.gate' op gated value must be a constant (the result of an op without operands)

// -----

dataflow.graph @f(%v: i32) -> i32 {
  %c = dataflow.call %v to @g[-1] : i32
  %r = dataflow.return %c from @g[-1] : i32
  dataflow.output %r : i32
}
// CHECK: 'dataflow.call' op site number must be >= 0, got -1

// -----

dataflow.graph @f(%v: i32, %w: f32) -> i32 {
  %r = dataflow.merge %v, %w : i32
  dataflow.output %r : i32
}
// CHECK: invalid.mlir:[[# @LINE - 3]]:3: error: 'dataflow.merge' op operand %w has type f32 but is used as i32{{$}}
