// RUN: recir-opt -p convert-scf-to-cf %s | filecheck %s
// RUN: recir-opt -p convert-scf-to-cf %s > %t && xdsl-opt -p convert-scf-to-cf %s | diff %t -

// recir's convert-scf-to-cf (xDSL's lowerings, each applied once) gives
// what xDSL's pass gives (the second RUN line compares the two): a loop
// nest whose inner body holds an scf.if becomes blocks, inner ones included,
// with no scf op left, and the loop-carried sum passed as a block argument.
func.func @nest(%n: index, %x: i32) -> i32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (i32) {
    %s = scf.for %j = %c0 to %i step %c1 iter_args(%a = %acc) -> (i32) {
      %pos = arith.cmpi sgt, %x, %zero : i32
      %t = scf.if %pos -> (i32) {
        %y = arith.addi %a, %x : i32
        scf.yield %y : i32
      } else {
        scf.yield %a : i32
      }
      scf.yield %t : i32
    }
    scf.yield %s : i32
  }
  func.return %r : i32
}

// CHECK-LABEL: func.func @nest(
// CHECK-NOT:     scf.
// CHECK:         cf.br ^[[OUTER:.*]](%{{.*}}, %{{.*}} : index, i32)
// CHECK:       ^[[OUTER]](%[[I:.*]]: index, %[[ACC:.*]]: i32):
// CHECK:         arith.cmpi slt, %[[I]], %{{.*}} : index
// CHECK:         cf.cond_br
// CHECK:         arith.cmpi sgt
// CHECK:         cf.cond_br
// CHECK:         arith.addi
// CHECK-NOT:     scf.
// CHECK:         func.return
