// RUN: recir-opt -p convert-tmath-to-loops %s | filecheck %s

// A result's rows written straight to the room its slot holds on entry (the
// caller's table rows or buffer, and how many rows fit there; 0: none), so
// the caller's copy out of the scratch is skipped: a product returned as it
// is, where its rows fit, and each side of a returned merge where that side
// is every row in order (the other has none: the merge is then that side).

func.func @rooms(%p: tensor<?xi1>, %x: tensor<?x4xf32>, %w: tensor<3x4xf32>) -> (tensor<?x3xf32>, tensor<?x3xf32>) {
  %m = tmath.matvec %w, %x : tensor<3x4xf32>, tensor<?x4xf32> -> tensor<?x3xf32>
  %yes, %no = frontier.partition %p : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %a = frontier.take %x[%yes] : tensor<?x4xf32>, tensor<?xi32>
  %ma = tmath.matvec %w, %a : tensor<3x4xf32>, tensor<?x4xf32> -> tensor<?x3xf32>
  %b = frontier.take %x[%no] : tensor<?x4xf32>, tensor<?xi32>
  %mb = tmath.matvec %w, %b : tensor<3x4xf32>, tensor<?x4xf32> -> tensor<?x3xf32>
  %r = frontier.merge %ma[%yes], %mb[%no] : tensor<?x3xf32>
  func.return %m, %r : tensor<?x3xf32>, tensor<?x3xf32>
}

// CHECK-LABEL: func.func @rooms(
// CHECK-SAME:    %[[OUT0:[0-9]+]]: !llvm.ptr, %[[OUT1:[0-9]+]]: !llvm.ptr, %[[SCRATCH:[0-9]+]]: !llvm.ptr, %{{[0-9]+}}: i64) {
// CHECK:         %[[ROOM0:.*]] = llvm.load %[[OUT0]] : !llvm.ptr -> i64
// CHECK:         %[[AT0:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    %[[ROOM1:.*]] = llvm.load %[[OUT1]] : !llvm.ptr -> i64
// CHECK:         %[[AT1:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.ptr
// The first product: its room only where the rows it reads (%x, the
// caller's: they could lie in the room) lie apart from it; its slot is
// still checked, then its room where it fits.
// CHECK:         %[[ROOM_AT:.*]] = llvm.ptrtoint %[[AT0]] : !llvm.ptr to i64
// CHECK:         %[[X_AT:.*]] = llvm.ptrtoint %{{.*}} : !llvm.ptr to i64
// CHECK:         %[[BELOW:.*]] = arith.cmpi ule, %{{.*}}, %[[ROOM_AT]] : i64
// CHECK-NEXT:    %[[ABOVE:.*]] = arith.cmpi ule, %{{.*}}, %[[X_AT]] : i64
// CHECK-NEXT:    %{{.*}} = arith.ori %[[BELOW]], %[[ABOVE]] : i1
// CHECK:         cf.assert %{{.*}}, "error: the frontier's scratch buffer is too small"
// CHECK:         %[[FITS:.*]] = arith.cmpi ule, %{{.*}}, %[[ROOM0]] : i64
// CHECK:         %[[C0:.*]] = arith.select %{{.*}}, %[[AT0]], %[[SCRATCH]] : !llvm.ptr
// CHECK:         llvm.call @recir_gemm_nt(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[C0]],
// The merge's first side: the second side has no rows, the first's numbers
// are 0, 1, ... and its rows fit the second result's room.
// CHECK:         %[[NONE:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : i64
// CHECK:         scf.for {{.*}} -> (i1) : i64 {
// CHECK:         %[[WHOLE:.*]] = arith.andi %[[NONE]], %{{.*}} : i1
// CHECK-NEXT:    %[[CLEAR:.*]] = arith.andi %[[WHOLE]], %{{.*}} : i1
// CHECK-NEXT:    %{{.*}} = arith.cmpi ule, %{{.*}}, %[[ROOM1]] : i64
// CHECK-NEXT:    %{{.*}} = arith.andi %[[CLEAR]], %{{.*}} : i1
// CHECK-NEXT:    %[[A:.*]] = arith.select %{{.*}}, %[[AT1]], %{{.*}} : !llvm.ptr
// CHECK:         llvm.call @recir_gemm_nt(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[A]],
// The second side likewise.
// CHECK:         %[[B:.*]] = arith.select %{{.*}}, %[[AT1]], %{{.*}} : !llvm.ptr
// CHECK:         llvm.call @recir_gemm_nt(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[B]],
// The slots then say where the rows are: the room or the scratch.
// CHECK:         llvm.store %[[C0]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         func.return
