// RUN: recir-opt -p convert-tmath-to-loops,convert-scf-to-cf,convert-recir-to-llvm %s | filecheck %s
// A frame keeps at most 64 KiB of buffers: the largest go to the heap
// (aligned_alloc, 64-byte aligned as the allocas, before the branch; free
// before every return, the error return included). They count against the
// stack all the same: the check subtracts every buffer's bytes, and the body
// runs with the limit raised by the heap's (lowered again at each return).

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
// CHECK-NEXT:    %[[BYTES:.*]] = llvm.mlir.constant(24000064) : i64
// CHECK-NEXT:    %[[BOTTOM:.*]] = llvm.sub %[[SP]], %[[BYTES]] : i64
// CHECK-NEXT:    %[[LIMIT:.*]] = llvm.load %0 atomic monotonic : !llvm.ptr -> i64
// CHECK-NEXT:    %[[ROOM:.*]] = llvm.icmp "uge" %[[BOTTOM]], %[[LIMIT]] : i64
// CHECK-NEXT:    %[[ALIGN:.*]] = llvm.mlir.constant(64) : i64
// CHECK-NEXT:    %[[SIZE:.*]] = llvm.mlir.constant(12000000) : i64
// CHECK-NEXT:    %[[FILL:.*]] = llvm.call @aligned_alloc(%[[ALIGN]], %[[SIZE]]) : (i64, i64) -> !llvm.ptr
// CHECK:         %[[SIZE2:.*]] = llvm.mlir.constant(12000000) : i64
// CHECK-NEXT:    %[[PRODUCT:.*]] = llvm.call @aligned_alloc(%{{.*}}, %[[SIZE2]]) : (i64, i64) -> !llvm.ptr
// CHECK-NOT:     llvm.call @aligned_alloc
// CHECK:         llvm.cond_br %{{.*}}, ^[[BODY:.*]], ^{{.*}}
// CHECK-NEXT:  ^[[BODY]]:
// CHECK-NEXT:    %[[OLD:.*]] = llvm.load %0 atomic monotonic : !llvm.ptr -> i64
// CHECK-NEXT:    %[[TOP:.*]] = llvm.mlir.constant(-1) : i64
// CHECK-NEXT:    %[[STOPPED:.*]] = llvm.icmp "eq" %[[OLD]], %[[TOP]] : i64
// CHECK-NEXT:    %[[HELD:.*]] = llvm.mlir.constant(24000000) : i64
// CHECK-NEXT:    %[[RAISED:.*]] = llvm.add %[[OLD]], %[[HELD]] : i64
// CHECK-NEXT:    %[[NEW:.*]] = llvm.select %[[STOPPED]], %[[OLD]], %[[RAISED]] : i1, i64
// CHECK-NEXT:    llvm.store %[[NEW]], %0 : i64, !llvm.ptr
// CHECK:         llvm.call @free(%[[FILL]]) : (!llvm.ptr) -> ()
// CHECK-NEXT:    llvm.call @free(%[[PRODUCT]]) : (!llvm.ptr) -> ()
// CHECK-NEXT:    %[[NOW:.*]] = llvm.load %0 atomic monotonic : !llvm.ptr -> i64
// CHECK:         %[[GIVEN:.*]] = llvm.mlir.constant(-24000000) : i64
// CHECK-NEXT:    %[[LOWERED:.*]] = llvm.add %[[NOW]], %[[GIVEN]] : i64
// CHECK-NEXT:    %[[BACK:.*]] = llvm.select %{{.*}}, %[[NOW]], %[[LOWERED]] : i1, i64
// CHECK-NEXT:    llvm.store %[[BACK]], %0 : i64, !llvm.ptr
// CHECK-NEXT:    llvm.return %{{.*}} : f32
// CHECK:         llvm.call @free(%[[FILL]]) : (!llvm.ptr) -> ()
// CHECK-NEXT:    llvm.call @free(%[[PRODUCT]]) : (!llvm.ptr) -> ()
// CHECK:         llvm.return %{{.*}} : f32
// CHECK-NEXT:  }
// CHECK:       llvm.func @aligned_alloc(i64, i64) -> !llvm.ptr
// CHECK-NEXT:  llvm.func @free(!llvm.ptr)
