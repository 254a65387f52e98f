// RUN: recir-opt -p invoke-clone-serial,convert-recir-to-llvm %s | filecheck %s
// A public function with a serial entry (invoke-clone-serial's @f__serial)
// also gets @f__batch_serial: a batch whose calls, one task each, call
// @f__serial and spawn nothing (the runtime picks it for calls of like size).

func.func private @leaf(%n: i32) -> i32 {
  func.return %n : i32
}
func.func private @pair(%n: i32) -> i32 {
  %a = invoke.invoke @leaf(%n) concurrent : (i32) -> i32
  %b = invoke.invoke @leaf(%n) : (i32) -> i32
  %a2 = invoke.join %a : (i32) -> i32
  %s = arith.addi %a2, %b : i32
  func.return %s : i32
}
func.func @entry(%n: i32) -> i32 {
  %r = invoke.invoke @pair(%n) : (i32) -> i32
  func.return %r : i32
}

// CHECK-LABEL: llvm.func @entry__batch(
// CHECK:         llvm.mlir.addressof @entry__item : !llvm.ptr
// CHECK-LABEL: llvm.func internal @entry__item(
// CHECK:         llvm.call @entry(
// CHECK-LABEL: llvm.func @entry__batch_serial(
// CHECK:         llvm.call @GOMP_single_start() : () -> i8
// CHECK:         %[[ITEM:.*]] = llvm.mlir.addressof @entry__batch_serial_item : !llvm.ptr
// CHECK:         llvm.call @GOMP_task(%[[ITEM]], {{.*}})
// CHECK-LABEL: llvm.func internal @entry__batch_serial_item(
// CHECK:         llvm.call @entry__serial(
