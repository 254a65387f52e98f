// RUN: recir-opt -p convert-recir-to-llvm %s | filecheck %s
// A function marked `invoke.budget_guards` (invoke-clone-serial keeps one body
// for it) takes its budget first: each concurrent invoke is spawned as a task
// only where the budget is above 0, and called in place otherwise, its result
// through the same slot; the join waits only where it spawned. No serial
// entries: the batch's items call @entry, which spawns as deep as the
// context's budget says.

func.func private @leaf(%n: i32) -> i32 {
  func.return %n : i32
}
func.func private @pair(%budget: i32, %n: i32) -> i32 attributes {invoke.budget_guards} {
  %a = invoke.invoke @leaf(%n) concurrent : (i32) -> i32
  %b = invoke.invoke @leaf(%n) : (i32) -> i32
  %a2 = invoke.join %a : (i32) -> i32
  %s = arith.addi %a2, %b : i32
  func.return %s : i32
}
func.func @entry(%n: i32) -> i32 {
  %budget = invoke.spawn_budget 3
  %r = invoke.invoke @pair(%budget, %n) : (i32, i32) -> i32
  func.return %r : i32
}

// CHECK-LABEL: llvm.func internal @pair(
// CHECK-SAME:    %{{.*}}: !llvm.ptr, %budget: i32, %[[N:.*]]: i32) -> i32 {
// CHECK-NEXT:    %{{.*}} = llvm.mlir.constant(1) : i64
// CHECK-NEXT:    %[[SLOT:.*]] = llvm.alloca %{{.*}} x i32
// CHECK:         %[[SPAWNS:.*]] = llvm.icmp "sgt" %budget, %{{.*}} : i32
// CHECK-NEXT:    llvm.cond_br %[[SPAWNS]], ^[[SPAWN:.*]], ^[[HERE:.*]]
// CHECK-NEXT:  ^[[SPAWN]]:
// CHECK:         llvm.call @GOMP_task(
// CHECK:         llvm.br ^[[REST:.*]]
// CHECK-NEXT:  ^[[HERE]]:
// CHECK-NEXT:    %[[A:.*]] = llvm.call @leaf(%{{.*}}, %[[N]])
// CHECK-NEXT:    llvm.store %[[A]], %[[SLOT]]
// CHECK-NEXT:    llvm.br ^[[REST]]
// CHECK-NEXT:  ^[[REST]]:
// CHECK:         %[[B:.*]] = llvm.call @leaf(
// CHECK:         llvm.cond_br %[[SPAWNS]], ^[[WAIT:.*]], ^[[JOINED:.*]]
// CHECK-NEXT:  ^[[WAIT]]:
// CHECK-NEXT:    llvm.call @GOMP_taskwait()
// CHECK-NEXT:    llvm.br ^[[JOINED]]
// CHECK-NEXT:  ^[[JOINED]]:
// CHECK-NEXT:    %{{.*}} = llvm.load %[[SLOT]] : !llvm.ptr -> i32
// CHECK-LABEL: llvm.func internal @entry__item(
// CHECK:         llvm.call @entry(
// CHECK-NOT:   __serial
