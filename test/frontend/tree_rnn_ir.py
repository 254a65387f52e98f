# The traced TreeRNN prints as IR: one recursive subgraph over the structure arrays.
# RUN: %python %s | filecheck %s
# RUN: %python %s | recir-opt -p capture-outer-refs | filecheck %s --check-prefix=CLOSED
import numpy as np

from recir.models import tree_rnn

print(tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=10)))

# CHECK-LABEL: func.func @tree_rnn(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %label: tensor<?xi32>, %root: i32, %emb: tensor<10x4xf32>
# CHECK-NEXT:    invoke.subgraph @node(%{{.*}}: i32) -> (tensor<4xf32>, f32) {
# CHECK:           %{{.*}} = tmath.extract %left[%{{.*}}] : tensor<?xi32>, i32 -> i32
# CHECK:           %{{.*}}, %{{.*}} = invoke.invoke @node(%{{.*}}) : (i32) -> (tensor<4xf32>, f32)
# CHECK:           %{{.*}} = tmath.concat %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
# CHECK:           %{{.*}} = tmath.softmax_xent %{{.*}}, %{{.*}} : tensor<5xf32>, i32 -> f32
# CHECK:         invoke.return
# CHECK:         %{{.*}}, %{{.*}} = invoke.invoke @node(%root) : (i32) -> (tensor<4xf32>, f32)

# CLOSED-LABEL: func.func private @node(%{{.*}}: i32, %left: tensor<?xi32>
# CLOSED-NOT:   invoke.subgraph
