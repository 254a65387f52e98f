// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

func.func @f() {
  invoke.invoke @missing() : () -> ()
  func.return
}
// CHECK: 'invoke.invoke' op callee @missing does not exist

// -----

func.func @g(%x: i32) -> i32 {
  func.return %x : i32
}
func.func @f(%x: i32) -> i32 {
  %r = invoke.invoke @g(%x, %x) : (i32, i32) -> i32
  func.return %r : i32
}
// CHECK: 'invoke.invoke' op @g expects 1 arguments, got 2

// -----

func.func @g(%x: i32) -> i32 {
  func.return %x : i32
}
func.func @f(%x: f32) -> i32 {
  %r = invoke.invoke @g(%x) : (f32) -> i32
  func.return %r : i32
}
// CHECK: 'invoke.invoke' op argument 0 of @g has type f32, expected i32

// -----

func.func @g(%x: i32) -> i32 {
  func.return %x : i32
}
func.func @f(%x: i32) -> (i32, i32) {
  %r, %s = invoke.invoke @g(%x) : (i32) -> (i32, i32)
  func.return %r, %s : i32, i32
}
// CHECK: 'invoke.invoke' op @g expects 1 results, got 2

// -----

func.func @g(%x: i32) -> i32 {
  func.return %x : i32
}
func.func @f(%x: i32) -> f32 {
  %r = invoke.invoke @g(%x) : (i32) -> f32
  func.return %r : f32
}
// CHECK: 'invoke.invoke' op result 0 of @g has type f32, expected i32

// -----

func.func @f(%x: i32) {
  invoke.subgraph @s(%k: i32) -> i32 {
    %c = arith.constant 1.0 : f32
    invoke.return %c : f32
  }
  func.return
}
// CHECK: 'invoke.return' op returns (f32) but @s declares results (i32)

// -----

func.func @f(%x: i32) {
  invoke.subgraph @s(%k: i32) -> i32 {
    invoke.return %k : i32
  }
  invoke.subgraph @s(%k: i32) -> i32 {
    invoke.return %k : i32
  }
  func.return
}
// CHECK: 'invoke.subgraph' op the name @s is defined twice

// -----

func.func @owner(%x: i32) {
  invoke.subgraph @inner(%k: i32) -> i32 {
    invoke.return %k : i32
  }
  func.return
}
func.func @outsider(%x: i32) -> i32 {
  %r = invoke.invoke @inner(%x) : (i32) -> i32
  func.return %r : i32
}
// CHECK: 'invoke.invoke' op subgraph @inner is not visible here: invoke it from inside the region that defines it

// -----

func.func @f(%x: i32) {
  invoke.subgraph @s(%k: i32 -> i32 {
    invoke.return %k : i32
  }
  func.return
}
// CHECK: invalid.mlir:[[# @LINE - 5]]:{{[0-9]+}}: error:

// -----

func.func @f() -> i32 {
  %b = invoke.spawn_budget -1
  func.return %b : i32
}
// CHECK: 'invoke.spawn_budget' op spawn budget must be at least 0, got -1

// -----

// A concurrent invoke's result read without its join: natively it was 0 (the
// task had not written it), and the task could outlive the frame it writes.
func.func @g(%a: i32) -> i32 { func.return %a : i32 }
func.func @f(%n: i32) -> i32 {
  %a = invoke.invoke @g(%n) concurrent : (i32) -> i32
  %s = arith.addi %a, %n : i32
  func.return %s : i32
}
// CHECK: 'invoke.invoke' op a concurrent invoke's results are used through one invoke.join that takes them all

// -----

// Joined twice (the lowering erased the task's placeholder at the first join).
func.func @g(%a: i32) -> i32 { func.return %a : i32 }
func.func @f(%n: i32) -> i32 {
  %a = invoke.invoke @g(%n) concurrent : (i32) -> i32
  %b = invoke.join %a : (i32) -> i32
  %c = invoke.join %a : (i32) -> i32
  %s = arith.addi %b, %c : i32
  func.return %s : i32
}
// CHECK: 'invoke.invoke' op a concurrent invoke's results are used through one invoke.join that takes them all

// -----

func.func @g(%a: i32) -> i32 { func.return %a : i32 }
func.func @f(%n: i32) -> i32 {
  %a = invoke.invoke @g(%n) : (i32) -> i32
  %b = invoke.join %a : (i32) -> i32
  func.return %b : i32
}
// CHECK: 'invoke.join' op joins the results of an invoke that is not concurrent

// -----

// A join of a joined value (convert-invoke-to-gomp failed on it with a
// KeyError holding the value's repr, at no line).
func.func @g(%a: i32) -> i32 { func.return %a : i32 }
func.func @f(%n: i32) -> i32 {
  %a = invoke.invoke @g(%n) concurrent : (i32) -> i32
  %b = invoke.join %a : (i32) -> i32
  %c = invoke.join %b : (i32) -> i32
  func.return %c : i32
}
// CHECK: 'invoke.join' op joins values that are not the results of one concurrent invoke.invoke

// -----

func.func @f(%n: i32) -> i32 {
  %c = invoke.join %n : (i32) -> i32
  func.return %c : i32
}
// CHECK: 'invoke.join' op joins values that are not the results of one concurrent invoke.invoke

// -----

// A subgraph at the top level (capture-outer-refs failed to lift it, with a
// traceback under recir-run; the interpreter ran it).
invoke.subgraph @sg(%k: i32) -> i32 {
  invoke.return %k : i32
}
func.func @f(%n: i32) -> i32 {
  %r = invoke.invoke @sg(%n) : (i32) -> i32
  func.return %r : i32
}
// CHECK: 'invoke.subgraph' op subgraph @sg must be defined inside a function: at the top level, define a func.func
