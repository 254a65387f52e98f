// RUN: recir-opt -p lower-invoke-to-call-return %s --split-input-file | filecheck %s
// RUN: recir-opt -p capture-outer-refs,lower-invoke-to-call-return %examples/thesis_primes.mlir | filecheck %s --check-prefix=PRIMES
// RUN: recir-opt -p capture-outer-refs,lower-invoke-to-call-return %examples/ackermann.mlir | filecheck %s --check-prefix=ACK
// RUN: recir-opt -p capture-outer-refs,lower-invoke-to-call-return %examples/takeuchi.mlir | filecheck %s --check-prefix=TAK

// One call: @inc is placed once, its one call site is numbered 0.
func.func private @inc(%x: i32) -> i32 {
  %one = arith.constant 1 : i32
  %y = arith.addi %x, %one : i32
  func.return %y : i32
}
func.func @one_call(%a: i32) -> i32 {
  %r = invoke.invoke @inc(%a) : (i32) -> i32
  func.return %r : i32
}

// CHECK-LABEL: dataflow.graph @one_call(%a: i32) -> i32 {
// CHECK-NEXT:    %[[C:.*]] = dataflow.call %a to @inc[0] : i32
// CHECK-NEXT:    %r = dataflow.return %y from @inc[0] : i32
// CHECK-NEXT:    %x = dataflow.merge %[[C]] : i32
// CHECK-NEXT:    %one = arith.constant 1 : i32
// CHECK-NEXT:    %[[ONE:.*]] = dataflow.gate %one on %x : i32, i32
// CHECK-NEXT:    %y = arith.addi %x, %[[ONE]] : i32
// CHECK-NEXT:    dataflow.output %r : i32
// CHECK-NEXT:  }
// CHECK-NOT:   func.func

// -----

// Two call sites of one callee, two arguments each: one Call per argument,
// one Merge per parameter joining both sites, one Return per site.
func.func private @sub(%x: i32, %y: i32) -> i32 {
  %d = arith.subi %x, %y : i32
  func.return %d : i32
}
func.func @two_sites(%a: i32, %b: i32) -> i32 {
  %p = invoke.invoke @sub(%a, %b) : (i32, i32) -> i32
  %q = invoke.invoke @sub(%p, %a) : (i32, i32) -> i32
  func.return %q : i32
}

// CHECK-LABEL: dataflow.graph @two_sites(%a: i32, %b: i32) -> i32 {
// CHECK-NEXT:    %[[A0:.*]] = dataflow.call %a to @sub[0] : i32
// CHECK-NEXT:    %[[B0:.*]] = dataflow.call %b to @sub[0] : i32
// CHECK-NEXT:    %p = dataflow.return %d from @sub[0] : i32
// CHECK-NEXT:    %[[A1:.*]] = dataflow.call %p to @sub[1] : i32
// CHECK-NEXT:    %[[B1:.*]] = dataflow.call %a to @sub[1] : i32
// CHECK-NEXT:    %q = dataflow.return %d from @sub[1] : i32
// CHECK-NEXT:    %x = dataflow.merge %[[A0]], %[[A1]] : i32
// CHECK-NEXT:    %y = dataflow.merge %[[B0]], %[[B1]] : i32
// CHECK-NEXT:    %d = arith.subi %x, %y : i32
// CHECK-NEXT:    dataflow.output %q : i32
// CHECK-NEXT:  }

// -----

// Self recursion (fib): sites 1 and 2 feed the body's own Merge (a cycle),
// scf.if becomes Switches on %base and a Join; constants are gated.
func.func private @fib_rec(%k: i32) -> i32 {
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i32
  %base = arith.cmpi sle, %k, %one : i32
  %r = scf.if %base -> (i32) {
    scf.yield %one : i32
  } else {
    %k1 = arith.subi %k, %one : i32
    %k2 = arith.subi %k, %two : i32
    %a = invoke.invoke @fib_rec(%k1) : (i32) -> i32
    %b = invoke.invoke @fib_rec(%k2) : (i32) -> i32
    %s = arith.addi %a, %b : i32
    scf.yield %s : i32
  }
  func.return %r : i32
}
func.func @fib(%n: i32) -> i32 {
  %r = invoke.invoke @fib_rec(%n) : (i32) -> i32
  func.return %r : i32
}

// CHECK-LABEL: dataflow.graph @fib(%n: i32) -> i32 {
// CHECK-NEXT:    %[[C0:.*]] = dataflow.call %n to @fib_rec[0] : i32
// CHECK-NEXT:    %r = dataflow.return %[[RES:.*]] from @fib_rec[0] : i32
// CHECK-NEXT:    %k = dataflow.merge %[[C0]], %[[C1:.*]], %[[C2:.*]] : i32
// CHECK-NEXT:    %one = arith.constant 1 : i32
// CHECK-NEXT:    %[[ONE:.*]] = dataflow.gate %one on %k : i32, i32
// CHECK-NEXT:    %two = arith.constant 2 : i32
// CHECK-NEXT:    %[[TWO:.*]] = dataflow.gate %two on %k : i32, i32
// CHECK-NEXT:    %base = arith.cmpi sle, %k, %[[ONE]] : i32
// CHECK-NEXT:    %[[ONE_T:.*]], %[[ONE_F:.*]] = dataflow.switch %base, %[[ONE]] : i32
// CHECK-NEXT:    %{{.*}}, %[[K_F:.*]] = dataflow.switch %base, %k : i32
// CHECK-NEXT:    %k1 = arith.subi %[[K_F]], %[[ONE_F]] : i32
// CHECK-NEXT:    %{{.*}}, %[[TWO_F:.*]] = dataflow.switch %base, %[[TWO]] : i32
// CHECK-NEXT:    %k2 = arith.subi %[[K_F]], %[[TWO_F]] : i32
// CHECK-NEXT:    %[[C1]] = dataflow.call %k1 to @fib_rec[1] : i32
// CHECK-NEXT:    %a = dataflow.return %[[RES]] from @fib_rec[1] : i32
// CHECK-NEXT:    %[[C2]] = dataflow.call %k2 to @fib_rec[2] : i32
// CHECK-NEXT:    %b = dataflow.return %[[RES]] from @fib_rec[2] : i32
// CHECK-NEXT:    %s = arith.addi %a, %b : i32
// CHECK-NEXT:    %[[RES]] = dataflow.join %[[ONE_T]], %s : i32
// CHECK-NEXT:    dataflow.output %r : i32
// CHECK-NEXT:  }

// Mutual recursion (thesis_primes): @test has three sites (from @prime_minus,
// itself, @prime_plus); @prime_minus three (the entry, @prime_plus twice);
// each body is placed once and the Returns of a callee all read its result.
// PRIMES-LABEL: dataflow.graph @thesis_primes(%n: i32) -> i32 {
// PRIMES:         %[[N2:.*]] = dataflow.call %n2 to @prime_minus[0] : i32
// PRIMES:         %p = dataflow.return %[[PM:.*]] from @prime_minus[0] : i32
// PRIMES:         %k = dataflow.merge %[[N2]], %{{.*}}, %{{.*}} : i32
// PRIMES:         %{{.*}} = dataflow.call %cand to @test[0] : i32
// PRIMES:         %is_prime = dataflow.return %[[T:.*]] from @test[0] : i1
// PRIMES:         %{{.*}} = dataflow.call %k1 to @prime_plus[0] : i32
// PRIMES:         %p_1 = dataflow.return %[[PP:.*]] from @prime_plus[0] : i32
// PRIMES:         %p_2 = dataflow.return %[[PP]] from @prime_plus[1] : i32
// PRIMES:         %[[PM]] = dataflow.join %v_1, %p_2 : i32
// PRIMES:         %rec = dataflow.return %[[T]] from @test[1] : i1
// PRIMES:         %k_1 = dataflow.merge %{{.*}}, %{{.*}} : i32
// PRIMES:         %is_prime_1 = dataflow.return %[[T]] from @test[2] : i1
// PRIMES:         %p_3 = dataflow.return %[[PM]] from @prime_minus[1] : i32
// PRIMES:         %p_4 = dataflow.return %[[PM]] from @prime_minus[2] : i32
// PRIMES:         dataflow.output %r_1 : i32
// PRIMES-NOT:   func.func

// Nested calls (ackermann): the inner call's Return feeds the outer call's
// second argument, so the outer activation waits on the inner one's tag.
// ACK-LABEL: dataflow.graph @ack(%m: i32, %n: i32) -> i32 {
// ACK:         %a = dataflow.merge %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : i32
// ACK:         %b = dataflow.merge %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : i32
// ACK:         %inner = dataflow.return %[[R:.*]] from @ack_rec[2] : i32
// ACK-NEXT:    %{{.*}} = dataflow.call %{{.*}} to @ack_rec[3] : i32
// ACK-NEXT:    %{{.*}} = dataflow.call %inner to @ack_rec[3] : i32
// ACK-NEXT:    %outer = dataflow.return %[[R]] from @ack_rec[3] : i32
// ACK-NEXT:    %v = dataflow.join %x, %outer : i32
// ACK-NEXT:    %[[R]] = dataflow.join %succ, %v : i32

// Nested calls (takeuchi): three independent sites feed the fourth.
// TAK-LABEL: dataflow.graph @tak(%x: i32, %y: i32, %z: i32) -> i32 {
// TAK:         %a = dataflow.merge %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[A4:.*]] : i32
// TAK:         %t1 = dataflow.return %[[R:.*]] from @tak_rec[1] : i32
// TAK:         %t2 = dataflow.return %[[R]] from @tak_rec[2] : i32
// TAK:         %t3 = dataflow.return %[[R]] from @tak_rec[3] : i32
// TAK-NEXT:    %[[A4]] = dataflow.call %t1 to @tak_rec[4] : i32
// TAK-NEXT:    %{{.*}} = dataflow.call %t2 to @tak_rec[4] : i32
// TAK-NEXT:    %{{.*}} = dataflow.call %t3 to @tak_rec[4] : i32
// TAK-NEXT:    %t = dataflow.return %[[R]] from @tak_rec[4] : i32
// TAK-NEXT:    %[[R]] = dataflow.join %t, %{{.*}} : i32
