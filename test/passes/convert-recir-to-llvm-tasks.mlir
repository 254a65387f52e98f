// RUN: recir-opt -p convert-invoke-to-gomp,convert-recir-to-llvm %s | filecheck %s
// convert-invoke-to-gomp makes a concurrent invoke a GOMP_task on an outlined
// function, which convert-recir-to-llvm gives its thread's context; the join
// waits and loads the result from its slot;
// the public function gets two entry points taking packed arguments:
// __packed, one call on the calling thread, and __team, which libgomp runs on
// every thread: its single thread runs one call itself (count 1) or spawns one
// task per call (a batch). The error return waits for the tasks first: they
// write into this frame.

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

// CHECK-LABEL: llvm.func @pair(
// CHECK:         %[[FN:.*]] = llvm.mlir.addressof @pair_task0 : !llvm.ptr
// CHECK:         llvm.call @GOMP_task(%[[FN]], {{.*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i8, i32, !llvm.ptr, i32, !llvm.ptr) -> ()
// CHECK-NEXT:    %b = llvm.call @leaf(%{{.*}}, %n_1) : (!llvm.ptr, i32) -> i32
// CHECK-NEXT:    llvm.call @GOMP_taskwait() : () -> ()
// CHECK-NEXT:    %a2 = llvm.load %{{.*}} : !llvm.ptr -> i32
// CHECK-NEXT:    %s = llvm.add %a2, %b : i32
// CHECK:         llvm.store %{{.*}}, %{{.*}} : i64, !llvm.ptr
// CHECK-NEXT:    llvm.br ^[[FAIL:.*]]
// CHECK-NEXT:  ^[[FAIL]]:
// CHECK-NEXT:    llvm.call @GOMP_taskwait() : () -> ()
// CHECK-NEXT:    %{{.*}} = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    llvm.return
// CHECK:       llvm.func @GOMP_task(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i8, i32, !llvm.ptr, i32, !llvm.ptr)
// CHECK:       llvm.func internal @pair_task0(%{{.*}}: !llvm.ptr) {
// CHECK:         llvm.call @omp_get_thread_num() : () -> i32
// CHECK:         %[[R:.*]] = llvm.call @leaf(%{{.*}}, %{{.*}}) : (!llvm.ptr, i32) -> i32
// CHECK-NEXT:    llvm.store %[[R]], %{{.*}} : i32, !llvm.ptr
// CHECK-LABEL: llvm.func @pair__packed(
// CHECK:         llvm.call @pair(%{{.*}}, %{{.*}}) : (!llvm.ptr, i32) -> i32
// CHECK-LABEL: llvm.func @pair__team(
// CHECK:         llvm.call @pthread_getattr_np(
// CHECK:         llvm.call @GOMP_single_start() : () -> i8
// CHECK:         %[[COUNT:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK-NEXT:    %[[ONE:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:    %[[LONE:.*]] = llvm.icmp "eq" %[[COUNT]], %[[ONE]] : i64
// CHECK-NEXT:    llvm.cond_br %[[LONE]], ^[[CALL:.*]], ^[[SPAWN:.*]]
// CHECK-NEXT:  ^[[CALL]]:
// CHECK:         llvm.call @pair__item(%{{.*}}) : (!llvm.ptr) -> ()
// CHECK:       ^[[HEAD:.*]](%[[K:.*]]: i64):
// CHECK-NEXT:    %{{.*}} = llvm.icmp "slt" %[[K]], %[[COUNT]] : i64
// CHECK:         %[[ITEM:.*]] = llvm.mlir.addressof @pair__item : !llvm.ptr
// CHECK:         llvm.call @GOMP_task(%[[ITEM]], {{.*}})
// CHECK:         llvm.br ^[[HEAD]](%{{.*}} : i64)
// CHECK-LABEL: llvm.func internal @pair__item(
// CHECK:         llvm.call @pair(%{{.*}}, %{{.*}}) : (!llvm.ptr, i32) -> i32
// CHECK-NOT:   llvm.func @pair__
