// RUN: recir-opt -p convert-tmath-to-loops,convert-scf-to-cf,convert-recir-to-llvm %s | filecheck %s
// Code that keeps a tape (gradients) but spawns no tasks: each public
// function gets @f__packed(data), which loads the context and the arguments
// from 8-byte fields of data and stores a scalar result through the pointer
// after them, so the runtime can start it on a switched stack.

func.func @fwd(%x: f32, %n: i32) -> f32 {
  %f = tape.new 8 : !tape.frame
  tape.save %x, %f[0] : f32
  %y = tape.load %f[0] : f32
  func.return %y : f32
}

// CHECK-LABEL: llvm.func @fwd__packed(%{{.*}}: !llvm.ptr) {
// CHECK-NEXT:    %[[CTX:.*]] = llvm.load %[[DATA:.*]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    %[[C8:.*]] = llvm.mlir.constant(8) : i64
// CHECK-NEXT:    %[[P8:.*]] = llvm.getelementptr %[[DATA]][%[[C8]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[X:.*]] = llvm.load %[[P8]] : !llvm.ptr -> f32
// CHECK-NEXT:    %[[C16:.*]] = llvm.mlir.constant(16) : i64
// CHECK-NEXT:    %[[P16:.*]] = llvm.getelementptr %[[DATA]][%[[C16]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[N:.*]] = llvm.load %[[P16]] : !llvm.ptr -> i32
// CHECK-NEXT:    %[[Y:.*]] = llvm.call @fwd(%[[CTX]], %[[X]], %[[N]]) : (!llvm.ptr, f32, i32) -> f32
// CHECK-NEXT:    %[[C24:.*]] = llvm.mlir.constant(24) : i64
// CHECK-NEXT:    %[[P24:.*]] = llvm.getelementptr %[[DATA]][%[[C24]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[SLOT:.*]] = llvm.load %[[P24]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    llvm.store %[[Y]], %[[SLOT]] : f32, !llvm.ptr
// CHECK-NEXT:    llvm.return
