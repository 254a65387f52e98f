// RUN: recir-opt -p convert-invoke-to-gomp %s | filecheck %s
// A concurrent invoke becomes a GOMP_task on an outlined function (marked
// invoke.task: convert-recir-to-llvm gives it the context of the thread that
// runs it), its data {contexts, args..., result slots} in the caller's frame;
// the join waits and loads the result from its slot. The function is marked
// invoke.spawns and reads its context with invoke.context.

func.func private @leaf(%n: i32) -> i32 {
  func.return %n : i32
}
func.func @pair(%n: i32) -> i32 {
  %a = invoke.invoke @leaf(%n) concurrent : (i32) -> i32
  %b = invoke.invoke @leaf(%n) : (i32) -> i32
  %a2 = invoke.join %a : (i32) -> i32
  %s = arith.addi %a2, %b : i32
  func.return %s : i32
}

// CHECK-LABEL: func.func @pair(%n: i32) -> i32 attributes {invoke.spawns} {
// CHECK-NEXT:    %{{.*}} = arith.constant 1 : i64
// CHECK-NEXT:    %[[SLOT:.*]] = llvm.alloca %{{.*}} x i32
// CHECK-NEXT:    %{{.*}} = arith.constant 3 : i64
// CHECK-NEXT:    %[[DATA:.*]] = llvm.alloca %{{.*}} x i64
// CHECK-NEXT:    %[[CTX:.*]] = invoke.context
// CHECK-NEXT:    %[[C48:.*]] = arith.constant 48 : i64
// CHECK-NEXT:    %[[FIELD:.*]] = llvm.getelementptr %[[CTX]][%[[C48]]]
// CHECK-NEXT:    %[[CONTEXTS:.*]] = llvm.load %[[FIELD]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    llvm.store %[[CONTEXTS]], %[[DATA]]
// CHECK:         llvm.store %n, %{{.*}} : i32, !llvm.ptr
// CHECK:         llvm.store %[[SLOT]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK-NEXT:    %[[FN:.*]] = llvm.mlir.addressof @pair_task0 : !llvm.ptr
// CHECK:         llvm.call @GOMP_task(%[[FN]], %[[DATA]], {{.*}})
// CHECK-NEXT:    %b = invoke.invoke @leaf(%n) : (i32) -> i32
// CHECK-NEXT:    llvm.call @GOMP_taskwait() : () -> ()
// CHECK-NEXT:    %a2 = llvm.load %[[SLOT]] : !llvm.ptr -> i32
// CHECK-NEXT:    %s = arith.addi %a2, %b : i32
// CHECK:       llvm.func @GOMP_task(
// CHECK:       llvm.func @GOMP_taskwait()
// CHECK:       llvm.func @omp_get_thread_num() -> i32
// CHECK-LABEL: func.func private @pair_task0(%{{.*}}: !llvm.ptr) attributes {invoke.task} {
// CHECK:         %[[N:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i32
// CHECK:         %[[OUT:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    %[[R:.*]] = invoke.invoke @leaf(%[[N]]) : (i32) -> i32
// CHECK-NEXT:    llvm.store %[[R]], %[[OUT]] : i32, !llvm.ptr
// CHECK-NEXT:    func.return

// RUN: recir-opt -p convert-invoke-to-gomp %s | filecheck %s --check-prefix=GUARD
// A function marked invoke.budget_guards (invoke-clone-serial keeps one body
// for it) takes its budget first: each concurrent invoke is spawned as a task
// only where the budget is above 0, and invoked in place otherwise, its result
// through the same slot; the join waits only where it spawned.

func.func private @guarded(%budget: i32, %n: i32) -> i32 attributes {invoke.budget_guards} {
  %a = invoke.invoke @leaf(%n) concurrent : (i32) -> i32
  %b = invoke.invoke @leaf(%n) : (i32) -> i32
  %a2 = invoke.join %a : (i32) -> i32
  %s = arith.addi %a2, %b : i32
  func.return %s : i32
}

// GUARD-LABEL: func.func private @guarded(%budget: i32, %n: i32) -> i32 attributes {invoke.budget_guards, invoke.spawns} {
// GUARD-NEXT:    %{{.*}} = arith.constant 1 : i64
// GUARD-NEXT:    %[[SLOT:.*]] = llvm.alloca %{{.*}} x i32
// GUARD:         %[[ZERO:.*]] = arith.constant 0 : i32
// GUARD-NEXT:    %[[SPAWNS:.*]] = arith.cmpi sgt, %budget, %[[ZERO]] : i32
// GUARD-NEXT:    cf.cond_br %[[SPAWNS]], ^[[SPAWN:.*]], ^[[HERE:.*]]
// GUARD-NEXT:  ^[[SPAWN]]:
// GUARD:         llvm.call @GOMP_task(
// GUARD-NEXT:    cf.br ^[[REST:.*]]
// GUARD-NEXT:  ^[[HERE]]:
// GUARD-NEXT:    %[[A:.*]] = invoke.invoke @leaf(%n) : (i32) -> i32
// GUARD-NEXT:    llvm.store %[[A]], %[[SLOT]] : i32, !llvm.ptr
// GUARD-NEXT:    cf.br ^[[REST]]
// GUARD-NEXT:  ^[[REST]]:
// GUARD-NEXT:    %b = invoke.invoke @leaf(%n) : (i32) -> i32
// GUARD-NEXT:    cf.cond_br %[[SPAWNS]], ^[[WAIT:.*]], ^[[JOINED:.*]]
// GUARD-NEXT:  ^[[WAIT]]:
// GUARD-NEXT:    llvm.call @GOMP_taskwait() : () -> ()
// GUARD-NEXT:    cf.br ^[[JOINED]]
// GUARD-NEXT:  ^[[JOINED]]:
// GUARD-NEXT:    %a2 = llvm.load %[[SLOT]] : !llvm.ptr -> i32
