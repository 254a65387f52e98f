// RUN: RECIR_ROUNDTRIP
// RUN: recir-opt %s --split-input-file | recir-opt --split-input-file | filecheck %s

// A cycle through a call site: operands are defined later in the graph
// region (%c1 feeds the merge before its definition), and survive printing
// in both the custom and the generic form.
dataflow.graph @twice(%x: i32) -> i32 {
  %c0 = dataflow.call %x to @inc[0] : i32
  %a = dataflow.merge %c0, %c1 : i32
  %one = arith.constant 1 : i32
  %one_t = dataflow.gate %one on %a : i32, i32
  %s = arith.addi %a, %one_t : i32
  %r0 = dataflow.return %s from @inc[0] : i32
  %c1 = dataflow.call %r0 to @inc[1] : i32
  %r1 = dataflow.return %s from @inc[1] : i32
  dataflow.output %r1 : i32
}

// CHECK-LABEL: dataflow.graph @twice(%{{.*}}: i32) -> i32 {
// CHECK-NEXT:    %[[C0:.*]] = dataflow.call %{{.*}} to @inc[0] : i32
// CHECK-NEXT:    %[[A:.*]] = dataflow.merge %[[C0]], %[[C1:.*]] : i32
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[ONE_T:.*]] = dataflow.gate %[[ONE]] on %[[A]] : i32, i32
// CHECK-NEXT:    %[[S:.*]] = arith.addi %[[A]], %[[ONE_T]] : i32
// CHECK-NEXT:    %[[R0:.*]] = dataflow.return %[[S]] from @inc[0] : i32
// CHECK-NEXT:    %[[C1]] = dataflow.call %[[R0]] to @inc[1] : i32
// CHECK-NEXT:    %[[R1:.*]] = dataflow.return %[[S]] from @inc[1] : i32
// CHECK-NEXT:    dataflow.output %[[R1]] : i32
// CHECK-NEXT:  }

// -----

// Switch and Join: an scf.if's two branches, tensors flow like scalars.
dataflow.graph @pick(%p: i1, %v: tensor<4xf32>) -> tensor<4xf32> {
  %t, %f = dataflow.switch %p, %v : tensor<4xf32>
  %n = tmath.neg %f : tensor<4xf32>
  %r = dataflow.join %t, %n : tensor<4xf32>
  dataflow.output %r : tensor<4xf32>
}

// CHECK-LABEL: dataflow.graph @pick(%{{.*}}: i1, %{{.*}}: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    %[[T:.*]], %[[F:.*]] = dataflow.switch %{{.*}}, %{{.*}} : tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = tmath.neg %[[F]] : tensor<4xf32>
// CHECK-NEXT:    %[[R:.*]] = dataflow.join %[[T]], %[[N]] : tensor<4xf32>
// CHECK-NEXT:    dataflow.output %[[R]] : tensor<4xf32>
// CHECK-NEXT:  }
