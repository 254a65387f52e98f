// Every example prints, re-parses and prints again to the same text, and its
// generic form parses back to the same custom form.
// RUN: recir-opt %examples/fib.mlir > %t.fib.mlir && recir-opt %t.fib.mlir | diff %t.fib.mlir -
// RUN: recir-opt %examples/fib.mlir --print-op-generic | recir-opt | diff %t.fib.mlir -
// RUN: recir-opt %examples/ackermann.mlir > %t.ack.mlir && recir-opt %t.ack.mlir | diff %t.ack.mlir -
// RUN: recir-opt %examples/ackermann.mlir --print-op-generic | recir-opt | diff %t.ack.mlir -
// RUN: recir-opt %examples/takeuchi.mlir > %t.tak.mlir && recir-opt %t.tak.mlir | diff %t.tak.mlir -
// RUN: recir-opt %examples/takeuchi.mlir --print-op-generic | recir-opt | diff %t.tak.mlir -
// RUN: recir-opt %examples/thesis_primes.mlir > %t.pr.mlir && recir-opt %t.pr.mlir | diff %t.pr.mlir -
// RUN: recir-opt %examples/thesis_primes.mlir --print-op-generic | recir-opt | diff %t.pr.mlir -
// RUN: recir-opt %examples/tree_lstm.mlir > %t.tl.mlir && recir-opt %t.tl.mlir | diff %t.tl.mlir -
// RUN: recir-opt %examples/tree_lstm.mlir --print-op-generic | recir-opt | diff %t.tl.mlir -
// RUN: recir-opt %examples/fib.mlir | filecheck %s

// CHECK-LABEL: func.func @fib(%n: i32) -> i32 {
// CHECK-NEXT:    invoke.subgraph @fib_rec(%k: i32) -> i32 {
// CHECK:           invoke.invoke @fib_rec(%{{.*}}) : (i32) -> i32
// CHECK:           invoke.return %{{.*}} : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    %{{.*}} = invoke.invoke @fib_rec(%n) : (i32) -> i32
