// RUN: recir-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

// An scf.if with results must yield them from both regions (xDSL inserts an
// empty scf.yield where none is written; the JIT then built a malformed phi).

func.func @no_yield(%n: i32, %c: i1) -> i32 {
  %r = scf.if %c -> (i32) {
    %a = arith.addi %n, %n : i32
  } else {
    scf.yield %n : i32
  }
  func.return %r : i32
}
// CHECK: invalid.mlir:7:3: error: 'scf.if' op then region yields () but the op has results (i32)

// -----

func.func @wrong_type(%n: i32, %x: f32, %c: i1) -> i32 {
  %r = scf.if %c -> (i32) {
    scf.yield %n : i32
  } else {
    scf.yield %x : f32
  }
  func.return %r : i32
}
// CHECK: invalid.mlir:19:3: error: 'scf.if' op else region yields (f32) but the op has results (i32)

// -----

func.func @no_else(%n: i32, %c: i1) -> i32 {
  %r = scf.if %c -> (i32) {
    scf.yield %n : i32
  }
  func.return %r : i32
}
// CHECK: invalid.mlir:31:3: error: 'scf.if' op has 1 results but no else region

// -----

func.func @fine(%n: i32, %c: i1) -> i32 {
  %r = scf.if %c -> (i32) {
    scf.yield %n : i32
  } else {
    scf.yield %n : i32
  }
  func.return %r : i32
}
// CHECK-LABEL: func.func @fine
// CHECK-NEXT:    %r = scf.if %c -> (i32) {
