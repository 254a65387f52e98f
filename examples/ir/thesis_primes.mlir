// The thesis's primes, exactly as printed there: four mutually recursive
// functions. It only tests candidates 6i-1 and divides by 6k-1, so it is not
// the n-th prime; the thesis's Appendix C gives its values (thesis_primes(7500) = 42209).
func.func @thesis_primes(%n: i32) -> i32 {
  // test(n, i): true if (6i-1)^2 > n, false if n mod (6i-1) == 0, else test(n, i+1)
  invoke.subgraph @test(%v: i32, %i: i32) -> i1 {
    %one = arith.constant 1 : i32
    %six = arith.constant 6 : i32
    %zero = arith.constant 0 : i32
    %six_i = arith.muli %six, %i : i32
    %d = arith.subi %six_i, %one : i32
    %d2 = arith.muli %d, %d : i32
    %done = arith.cmpi sgt, %d2, %v : i32
    %r = scf.if %done -> (i1) {
      %t = arith.constant true
      scf.yield %t : i1
    } else {
      %rem = arith.remsi %v, %d : i32
      %divides = arith.cmpi eq, %rem, %zero : i32
      %w = scf.if %divides -> (i1) {
        %f = arith.constant false
        scf.yield %f : i1
      } else {
        %i1 = arith.addi %i, %one : i32
        %rec = invoke.invoke @test(%v, %i1) : (i32, i32) -> i1
        scf.yield %rec : i1
      }
      scf.yield %w : i1
    }
    invoke.return %r : i1
  }
  // prime_minus(n, i) = (n == 0 ? 6i-1 : prime_plus(n-1, i)) if test(6i-1, 1)
  //                   = prime_plus(n, i)                      otherwise
  invoke.subgraph @prime_minus(%k: i32, %i: i32) -> i32 {
    %one = arith.constant 1 : i32
    %six = arith.constant 6 : i32
    %zero = arith.constant 0 : i32
    %six_i = arith.muli %six, %i : i32
    %cand = arith.subi %six_i, %one : i32
    %is_prime = invoke.invoke @test(%cand, %one) : (i32, i32) -> i1
    %r = scf.if %is_prime -> (i32) {
      %last = arith.cmpi eq, %k, %zero : i32
      %v = scf.if %last -> (i32) {
        scf.yield %cand : i32
      } else {
        %k1 = arith.subi %k, %one : i32
        %p = invoke.invoke @prime_plus(%k1, %i) : (i32, i32) -> i32
        scf.yield %p : i32
      }
      scf.yield %v : i32
    } else {
      %p = invoke.invoke @prime_plus(%k, %i) : (i32, i32) -> i32
      scf.yield %p : i32
    }
    invoke.return %r : i32
  }
  // prime_plus(n, i) = (n == 0 ? 6i-1 : prime_minus(n-1, i+1)) if test(6i-1, 1)
  //                  = prime_minus(n, i+1)                      otherwise
  invoke.subgraph @prime_plus(%k: i32, %i: i32) -> i32 {
    %one = arith.constant 1 : i32
    %six = arith.constant 6 : i32
    %zero = arith.constant 0 : i32
    %six_i = arith.muli %six, %i : i32
    %cand = arith.subi %six_i, %one : i32
    %i1 = arith.addi %i, %one : i32
    %is_prime = invoke.invoke @test(%cand, %one) : (i32, i32) -> i1
    %r = scf.if %is_prime -> (i32) {
      %last = arith.cmpi eq, %k, %zero : i32
      %v = scf.if %last -> (i32) {
        scf.yield %cand : i32
      } else {
        %k1 = arith.subi %k, %one : i32
        %p = invoke.invoke @prime_minus(%k1, %i1) : (i32, i32) -> i32
        scf.yield %p : i32
      }
      scf.yield %v : i32
    } else {
      %p = invoke.invoke @prime_minus(%k, %i1) : (i32, i32) -> i32
      scf.yield %p : i32
    }
    invoke.return %r : i32
  }
  // thesis_primes(n) = 2 if n <= 0; 3 if n == 1; prime_minus(n-2, 1) otherwise
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i32
  %three = arith.constant 3 : i32
  %le0 = arith.cmpi sle, %n, %zero : i32
  %r = scf.if %le0 -> (i32) {
    scf.yield %two : i32
  } else {
    %is1 = arith.cmpi eq, %n, %one : i32
    %v = scf.if %is1 -> (i32) {
      scf.yield %three : i32
    } else {
      %n2 = arith.subi %n, %two : i32
      %p = invoke.invoke @prime_minus(%n2, %one) : (i32, i32) -> i32
      scf.yield %p : i32
    }
    scf.yield %v : i32
  }
  func.return %r : i32
}
