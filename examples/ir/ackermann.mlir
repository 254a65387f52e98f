// ack(m, n) = n + 1 if m == 0; ack(m-1, 1) if n == 0; ack(m-1, ack(m, n-1)).
// The nested call feeds the outer one: recursion with a data dependence.
func.func @ack(%m: i32, %n: i32) -> i32 {
  invoke.subgraph @ack_rec(%a: i32, %b: i32) -> i32 {
    %zero = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %m_zero = arith.cmpi eq, %a, %zero : i32
    %r = scf.if %m_zero -> (i32) {
      %succ = arith.addi %b, %one : i32
      scf.yield %succ : i32
    } else {
      %a1 = arith.subi %a, %one : i32
      %n_zero = arith.cmpi eq, %b, %zero : i32
      %v = scf.if %n_zero -> (i32) {
        %x = invoke.invoke @ack_rec(%a1, %one) : (i32, i32) -> i32
        scf.yield %x : i32
      } else {
        %b1 = arith.subi %b, %one : i32
        %inner = invoke.invoke @ack_rec(%a, %b1) : (i32, i32) -> i32
        %outer = invoke.invoke @ack_rec(%a1, %inner) : (i32, i32) -> i32
        scf.yield %outer : i32
      }
      scf.yield %v : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @ack_rec(%m, %n) : (i32, i32) -> i32
  func.return %r : i32
}
