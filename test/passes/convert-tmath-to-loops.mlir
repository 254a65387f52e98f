// RUN: recir-opt -p convert-tmath-to-loops %s | filecheck %s
// Tensors become buffers: arguments and results are pointers, results are
// out-parameters, kernels are scf.for loops, dynamic reads are checked.

func.func private @cell(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %s = tmath.add %x, %y : tensor<4xf32>
  func.return %s : tensor<4xf32>
}
func.func @pick(%arr: tensor<?xi32>, %i: i32, %x: tensor<4xf32>) -> (tensor<4xf32>, i32) {
  %v = tmath.extract %arr[%i] : tensor<?xi32>, i32 -> i32
  %h = invoke.invoke @cell(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %h, %v : tensor<4xf32>, i32
}

// CHECK-LABEL: func.func private @cell(%0: !llvm.ptr, %1: !llvm.ptr, %2: !llvm.ptr) {
// CHECK:         %[[OUT:.*]] = llvm.alloca %{{.*}} x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} : i64 {
// CHECK-NEXT:      %[[XP:.*]] = llvm.getelementptr %0[%[[I]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT:      %[[X:.*]] = llvm.load %[[XP]] : !llvm.ptr -> f32
// CHECK-NEXT:      %[[YP:.*]] = llvm.getelementptr %1[%[[I]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT:      %[[Y:.*]] = llvm.load %[[YP]] : !llvm.ptr -> f32
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[X]], %[[Y]] fastmath<contract> : f32
// CHECK-NEXT:      %[[SP:.*]] = llvm.getelementptr %[[OUT]][%[[I]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT:      llvm.store %[[S]], %[[SP]] : f32, !llvm.ptr
// CHECK-NEXT:    }
// CHECK:         scf.for
// CHECK:           llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK:         func.return
// CHECK-NEXT:  }

// CHECK-LABEL: func.func @pick(%0: !llvm.ptr, %i: i32, %1: !llvm.ptr, %2: !llvm.ptr) -> i32 {
// CHECK-NEXT:    %[[LEN:.*]] = llvm.load %0 : !llvm.ptr -> i64
// CHECK-NEXT:    %[[EIGHT:.*]] = arith.constant 8 : i64
// CHECK-NEXT:    %[[DP:.*]] = llvm.getelementptr %0[%[[EIGHT]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[DATA:.*]] = llvm.load %[[DP]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    %[[IDX:.*]] = arith.extsi %i : i32 to i64
// CHECK-NEXT:    %[[OK:.*]] = arith.cmpi ult, %[[IDX]], %[[LEN]] : i64
// CHECK-NEXT:    cf.assert %[[OK]], "{{.*}}convert-tmath-to-loops.mlir:10:3: error: 'tmath.extract' op index out of range"
// CHECK-NEXT:    %[[VP:.*]] = llvm.getelementptr %[[DATA]][%[[IDX]]] : (!llvm.ptr, i64) -> !llvm.ptr, i32
// CHECK-NEXT:    %v = llvm.load %[[VP]] : !llvm.ptr -> i32
// CHECK:         %[[H:.*]] = llvm.alloca %{{.*}} x f32
// CHECK-NEXT:    invoke.invoke @cell(%1, %1, %[[H]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
// CHECK:         scf.for
// CHECK:         func.return %v : i32
