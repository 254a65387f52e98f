// RUN: recir-opt -p convert-tmath-to-loops,convert-scf-to-cf,convert-recir-to-llvm %s | filecheck %s
// A frame keeps at most 64 KiB of buffers: the largest go to the heap
// (aligned_alloc, 64-byte aligned as the allocas, before the branch; free
// before every return, the error return included), and the stack check
// subtracts what stays on the frame.

func.func @scale(%x: tensor<3000000xf32>, %y: tensor<4xf32>, %s: f32) -> f32 {
  %f = tmath.fill %s : f32 -> tensor<3000000xf32>
  %a = tmath.mul %x, %f : tensor<3000000xf32>
  %b = tmath.add %y, %y : tensor<4xf32>
  %t = tmath.sum %a : tensor<3000000xf32> -> f32
  %u = tmath.sum %b : tensor<4xf32> -> f32
  %r = arith.addf %t, %u : f32
  func.return %r : f32
}

// CHECK-LABEL: llvm.func @scale(
// CHECK-NEXT:    %[[N4:.*]] = llvm.mlir.constant(4) : i64
// CHECK-NEXT:    %[[SMALL:.*]] = llvm.alloca %[[N4]] x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK-NOT:     llvm.alloca
// CHECK:         %[[FRAME:.*]] = llvm.call_intrinsic "llvm.frameaddress.p0"
// CHECK-NEXT:    %[[SP:.*]] = llvm.ptrtoint %[[FRAME]] : !llvm.ptr to i64
// CHECK-NEXT:    %[[BYTES:.*]] = llvm.mlir.constant(64) : i64
// CHECK-NEXT:    %[[BOTTOM:.*]] = llvm.sub %[[SP]], %[[BYTES]] : i64
// CHECK-NEXT:    %[[LIMIT:.*]] = llvm.load %{{.*}} atomic monotonic : !llvm.ptr -> i64
// CHECK-NEXT:    %[[ROOM:.*]] = llvm.icmp "uge" %[[BOTTOM]], %[[LIMIT]] : i64
// CHECK-NEXT:    %[[ALIGN:.*]] = llvm.mlir.constant(64) : i64
// CHECK-NEXT:    %[[SIZE:.*]] = llvm.mlir.constant(12000000) : i64
// CHECK-NEXT:    %[[FILL:.*]] = llvm.call @aligned_alloc(%[[ALIGN]], %[[SIZE]]) : (i64, i64) -> !llvm.ptr
// CHECK:         %[[SIZE2:.*]] = llvm.mlir.constant(12000000) : i64
// CHECK-NEXT:    %[[PRODUCT:.*]] = llvm.call @aligned_alloc(%{{.*}}, %[[SIZE2]]) : (i64, i64) -> !llvm.ptr
// CHECK-NOT:     llvm.call @aligned_alloc
// CHECK:         llvm.cond_br
// CHECK:         llvm.call @free(%[[FILL]]) : (!llvm.ptr) -> ()
// CHECK-NEXT:    llvm.call @free(%[[PRODUCT]]) : (!llvm.ptr) -> ()
// CHECK-NEXT:    llvm.return %{{.*}} : f32
// CHECK:         llvm.call @free(%[[FILL]]) : (!llvm.ptr) -> ()
// CHECK-NEXT:    llvm.call @free(%[[PRODUCT]]) : (!llvm.ptr) -> ()
// CHECK-NEXT:    llvm.return %{{.*}} : f32
// CHECK-NEXT:  }
// CHECK:       llvm.func @aligned_alloc(i64, i64) -> !llvm.ptr
// CHECK-NEXT:  llvm.func @free(!llvm.ptr)
