// recir-run prints each scalar result on its own line; native code (the
// default, or --jit) and the interpreter agree.
// RUN: recir-run %examples/fib.mlir --entry fib --arg 20 --interpret | filecheck %s --check-prefix=FIB
// RUN: recir-run %examples/fib.mlir --entry fib --arg 20 --jit | filecheck %s --check-prefix=FIB
// RUN: recir-run %examples/ackermann.mlir --entry ack --arg 2 --arg 3 --interpret | filecheck %s --check-prefix=ACK
// RUN: recir-run %examples/ackermann.mlir --entry ack --arg 2 --arg 3 | filecheck %s --check-prefix=ACK
// RUN: recir-run %examples/takeuchi.mlir --entry tak --arg 12 --arg 8 --arg 4 --interpret | filecheck %s --check-prefix=TAK
// RUN: recir-run %examples/takeuchi.mlir --entry tak --arg 12 --arg 8 --arg 4 | filecheck %s --check-prefix=TAK
// RUN: recir-run %examples/thesis_primes.mlir --entry thesis_primes --arg 60 --interpret | filecheck %s --check-prefix=PRIMES
// RUN: recir-run %examples/thesis_primes.mlir --entry thesis_primes --arg 60 | filecheck %s --check-prefix=PRIMES

// FIB: {{^}}10946{{$}}
// ACK: {{^}}9{{$}}
// TAK: {{^}}5{{$}}
// PRIMES: {{^}}233{{$}}
