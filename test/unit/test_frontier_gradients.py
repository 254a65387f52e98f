"""Gradients of the frontier-batched IR: `synthesize-gradients` applied to the
bottom-up function (the recursive path's rules table), run backwards height
by height in the interpreter, equal the recursive `_grad` summed over the
batch's trees."""

from __future__ import annotations

import numpy as np
import pytest

from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.interpreter.frontier_grad import frontier_value_and_grad
from recir.models import rntn, tree_lstm, tree_rnn
from recir.parsing import parse_module
from recir.pipeline import run_passes
from test_invoke_to_frontier import tree_batch_args, trees

BATCHED = "capture-outer-refs,invoke-to-frontier{{inputs={n}}},synthesize-gradients{{entry={f}__post wrapper=false}}"


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm],
                         ids=lambda m: m.__name__.split(".")[-1])
def test_tree_model_gradients_match_the_recursive_gradients(model):
    params = model.init_params(np.random.default_rng(1), hidden=4, vocab=100)
    traced = model.trace_model(params)
    module = traced.module.clone()
    run_passes(module, BATCHED.format(n=5, f="node"))
    batch = trees()
    args = tree_batch_args(batch, params)
    outputs, grads = frontier_value_and_grad(module, f"{traced.entry}__frontier", args)

    recursive = traced.module.clone()
    run_passes(recursive, "capture-outer-refs,synthesize-gradients")
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    losses = []
    for tree in batch:
        tree_args = [tree.left, tree.right, tree.word, tree.label, tree.root]
        out = run_function(recursive, f"{traced.entry}_grad",
                           [*tree_args, *params.values(), *expected.values()])
        losses.append(out[-1])
    np.testing.assert_allclose(outputs[-1], losses, rtol=1e-5)
    first_param = len(args) - len(params)
    assert sorted(grads) == list(range(first_param, len(args)))
    for index, name in enumerate(params, first_param):
        scale = max(float(np.abs(expected[name]).max()), 1e-6)
        assert np.abs(grads[index] - expected[name]).max() <= 1e-5 * scale, name


GROW = """
func.func @grow_all(%h0: tensor<2xf32>, %depth0: i32, %w: tensor<2x2xf32>) -> f32 {
  invoke.subgraph @grow(%h: tensor<2xf32>, %depth: i32) -> f32 {
    %zero = arith.constant 0 : i32
    %leaf = arith.cmpi sle, %depth, %zero : i32
    %t = scf.if %leaf -> (f32) {
      %s = tmath.sum %h : tensor<2xf32> -> f32
      scf.yield %s : f32
    } else {
      %one = arith.constant 1 : i32
      %d1 = arith.subi %depth, %one : i32
      %m = tmath.matvec %w, %h : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
      %h1 = tmath.tanh %m : tensor<2xf32>
      %below = invoke.invoke @grow(%h1, %d1) : (tensor<2xf32>, i32) -> f32
      scf.yield %below : f32
    }
    invoke.return %t : f32
  }
  %t = invoke.invoke @grow(%h0, %depth0) : (tensor<2xf32>, i32) -> f32
  func.return %t : f32
}
"""


def test_gradients_through_values_made_top_down_are_a_clear_error():
    """A state computed while expanding (TD-TreeLSTM's) needs the expansion's
    backward, which the schedule does not run yet."""
    module = parse_module(make_context(), GROW)
    run_passes(module, BATCHED.format(n=2, f="grow"))
    w = np.eye(2, dtype=np.float32)
    with pytest.raises(RecirError, match="through float values made top down"):
        frontier_value_and_grad(module, "grow_all__frontier",
                                [np.ones((2, 2), np.float32), np.array([1, 2], np.int32), w])
