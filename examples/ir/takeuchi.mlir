// tak(x, y, z) = tak(tak(x-1, y, z), tak(y-1, z, x), tak(z-1, x, y)) if y < x,
//              = z otherwise. The three inner calls are independent.
func.func @tak(%x: i32, %y: i32, %z: i32) -> i32 {
  invoke.subgraph @tak_rec(%a: i32, %b: i32, %c: i32) -> i32 {
    %one = arith.constant 1 : i32
    %less = arith.cmpi slt, %b, %a : i32
    %r = scf.if %less -> (i32) {
      %a1 = arith.subi %a, %one : i32
      %b1 = arith.subi %b, %one : i32
      %c1 = arith.subi %c, %one : i32
      %t1 = invoke.invoke @tak_rec(%a1, %b, %c) : (i32, i32, i32) -> i32
      %t2 = invoke.invoke @tak_rec(%b1, %c, %a) : (i32, i32, i32) -> i32
      %t3 = invoke.invoke @tak_rec(%c1, %a, %b) : (i32, i32, i32) -> i32
      %t = invoke.invoke @tak_rec(%t1, %t2, %t3) : (i32, i32, i32) -> i32
      scf.yield %t : i32
    } else {
      scf.yield %c : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @tak_rec(%x, %y, %z) : (i32, i32, i32) -> i32
  func.return %r : i32
}
