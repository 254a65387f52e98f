// RUN: recir-opt -p convert-recir-to-llvm %s | filecheck %s
// Without convert-invoke-to-gomp (code compiled for one thread), a
// `concurrent` invoke is a call in place and its `invoke.join` passes the
// results on: nothing of the join is left.

func.func @twice(%n: i32) -> i32 {
  %a = invoke.invoke @id(%n) concurrent : (i32) -> i32
  %b = invoke.invoke @id(%n) : (i32) -> i32
  %a2 = invoke.join %a : (i32) -> i32
  %s = arith.addi %a2, %b : i32
  func.return %s : i32
}
func.func private @id(%n: i32) -> i32 {
  func.return %n : i32
}

// CHECK-LABEL: llvm.func @twice
// CHECK:         %a = llvm.call @id(%0, %n) : (!llvm.ptr, i32) -> i32
// CHECK:         %b = llvm.call @id(%0, %n) : (!llvm.ptr, i32) -> i32
// CHECK-NOT:     invoke.join
// CHECK:         %s = llvm.add %a, %b : i32
