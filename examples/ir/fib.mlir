// fib(n) = 1 if n <= 1, fib(n-1) + fib(n-2) otherwise (the thesis's benchmark).
// The two recursive invokes are independent: they may run concurrently.
func.func @fib(%n: i32) -> i32 {
  invoke.subgraph @fib_rec(%k: i32) -> i32 {
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
    invoke.return %r : i32
  }
  %r = invoke.invoke @fib_rec(%n) : (i32) -> i32
  func.return %r : i32
}
