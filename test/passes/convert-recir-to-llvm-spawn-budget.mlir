// RUN: recir-opt -p convert-recir-to-llvm %s | filecheck %s
// invoke.spawn_budget reads the budget the runtime chose for this call from
// the context (`spawn_budget`, 72 bytes in), and takes its default where that
// is 0.

func.func @budget() -> i32 {
  %b = invoke.spawn_budget 4
  func.return %b : i32
}

// CHECK-LABEL: llvm.func @budget(%0: !llvm.ptr) -> i32 {
// CHECK:         %[[AT:.*]] = llvm.mlir.constant(72) : i64
// CHECK-NEXT:    %[[FIELD:.*]] = llvm.getelementptr %0[%[[AT]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[WIDE:.*]] = llvm.load %[[FIELD]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[CHOSEN:.*]] = llvm.trunc %[[WIDE]] : i64 to i32
// CHECK-NEXT:    %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    %[[UNSET:.*]] = llvm.icmp "eq" %[[CHOSEN]], %[[ZERO]] : i32
// CHECK-NEXT:    %[[DEFAULT:.*]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT:    %b = llvm.select %[[UNSET]], %[[DEFAULT]], %[[CHOSEN]] : i1, i32
// CHECK-NEXT:    llvm.return %b : i32
