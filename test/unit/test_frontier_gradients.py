"""Gradients of the frontier-batched IR from the recursive path's rules table:
`synthesize-gradients` on the batched functions and on the batched entry,
whose `frontier.schedule` becomes a `frontier.schedule_grad` the interpreter
runs backwards (by height, then by depth). Every parameter's gradient, and
each tree's input gradient, equals the recursive `_grad` summed over the
batch's trees."""

from __future__ import annotations

import numpy as np
import pytest
from test_invoke_to_frontier import tree_batch_args, trees

from recir.autodiff import saving
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.dialects import tmath
from recir.interpreter import find_entry, run_function
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from recir.parsing import parse_module
from recir.pipeline import run_passes


def batched_gradients(inputs: int, rec: str, entry: str, top_down: bool = False) -> str:
    """The pass list: batch, differentiate the batched functions, then the entry."""
    passes = ["capture-outer-refs", f"invoke-to-frontier{{inputs={inputs}}}",
              f"synthesize-gradients{{entry={rec}__post wrapper=false}}"]
    if top_down:
        passes.append(f"synthesize-gradients{{entry={rec}__expand wrapper=false}}")
    return ",".join([*passes, f"synthesize-gradients{{entry={entry}__frontier}}"])


def recursive_gradients(traced) -> object:
    module = traced.module.clone()
    run_passes(module, "capture-outer-refs,synthesize-gradients")
    return module


def assert_close(got: np.ndarray, want: np.ndarray, name: str) -> None:
    scale = max(float(np.abs(want).max()), 1e-6)
    assert np.abs(got - want).max() <= 1e-5 * scale, name


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm],
                         ids=lambda m: m.__name__.split(".")[-1])
def test_tree_model_gradients_match_the_recursive_gradients(model):
    params = model.init_params(np.random.default_rng(1), hidden=4, vocab=100)
    traced = model.trace_model(params)
    module = traced.module.clone()
    run_passes(module, batched_gradients(5, "node", traced.entry))
    batch = trees()
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    outputs = run_function(module, f"{traced.entry}__frontier_grad",
                           [*tree_batch_args(batch, params), *grads.values()])

    recursive = recursive_gradients(traced)
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    for k, tree in enumerate(batch):
        tree_args = [tree.left, tree.right, tree.word, tree.label, tree.root]
        out = run_function(recursive, f"{traced.entry}_grad",
                           [*tree_args, *params.values(), *expected.values()])
        assert outputs[-1][k] == pytest.approx(out[-1], rel=1e-5)
    for name in params:
        assert_close(grads[name], expected[name], name)


PRODUCTS = (tmath.MatvecOp, tmath.BilinearOp)


def saved_rows(module, name: str) -> list:
    """The values `@name_fwd` returns after `@name`'s results, before its frame."""
    results = len(find_entry(module, name).function_type.outputs)
    ret = find_entry(module, f"{name}_fwd").body.blocks[0].last_op
    return list(ret.operands[results:-1])


@pytest.mark.parametrize(("model", "rec", "top_down"), [
    (tree_rnn, "node", False), (rntn, "node", False), (tree_lstm, "node", False),
    (td_tree_lstm, "grow", True)], ids=["tree_rnn", "rntn", "tree_lstm", "td_tree_lstm"])
def test_the_forward_saves_exactly_the_rows_costly_to_rebuild(model, rec, top_down):
    """A batched `_fwd` returns only rows costly to rebuild (`saving.rebuilds_row`):
    a product's, a transcendental's (sigmoid, tanh: its derivative reads its
    result) or a reduction's (TD-TreeLSTM's expansion), each once; the one-pass
    rows are rebuilt. Its `_bwd` computes no product and no transcendental of
    the forward: each product it has is its own (vecmat, outer)."""
    params = model.init_params(np.random.default_rng(1), hidden=4, **(
        {"inputs": 4} if top_down else {"vocab": 100}))
    traced = model.trace_model(params)
    module = traced.module.clone()
    run_passes(module, batched_gradients(2 if top_down else 5, rec, traced.entry,
                                         top_down=top_down))
    count = 0
    for name in [f"{rec}__post", *([f"{rec}__expand"] if top_down else []),
                 f"{traced.entry}__frontier"]:
        saved = saved_rows(module, name)
        assert len(set(saved)) == len(saved), name
        assert all(isinstance(v.owner, (*PRODUCTS, *saving.SLOW)) for v in saved
                   if not isinstance(v.owner, tmath.SumOp)), name
        assert top_down or not [v for v in saved if isinstance(v.owner, tmath.SumOp)], name
        count += len(saved)
        backward = find_entry(module, f"{name}_bwd")
        assert not [op for op in backward.walk() if isinstance(op, (*PRODUCTS, *saving.SLOW))
                    ], name
        given = backward.body.blocks[0].args[:len(saved)]
        assert [a.type for a in given] == [v.type for v in saved], name
    assert count > 0


def test_top_down_tree_lstm_gradients_run_the_expansion_backwards():
    """The states that grow the tree are made while expanding: their
    gradients flow back depth by depth through @grow__expand_bwd, then
    through the entry's tanh(W_in x) to each tree's input."""
    params = td_tree_lstm.init_params(np.random.default_rng(3), hidden=4, inputs=4)
    traced = td_tree_lstm.trace_model(params)
    module = traced.module.clone()
    run_passes(module, batched_gradients(2, "grow", "td_tree_lstm", top_down=True))
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((9, 4)).astype(np.float32)
    depths = np.array([0, 1, 3, 6, 6, 5, 2, 6, 4], np.int32)
    d_xs = np.zeros_like(xs)
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    counts, _ = run_function(module, "td_tree_lstm__frontier_grad",
                             [xs, depths, *params.values(), d_xs, *grads.values()])

    recursive = recursive_gradients(traced)
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    for k in range(len(xs)):
        d_x = np.zeros(4, np.float32)
        count, _ = run_function(recursive, "td_tree_lstm_grad", [
            xs[k], int(depths[k]), *params.values(), d_x, *expected.values()])
        assert counts[k] == count
        np.testing.assert_allclose(d_xs[k], d_x, rtol=1e-5, atol=1e-6)
    assert len(set(counts.tolist())) > 2
    for name in params:
        assert_close(grads[name], expected[name], name)


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


def test_an_expansion_that_makes_floats_must_be_differentiated_too():
    module = parse_module(make_context(), GROW)
    run_passes(module, batched_gradients(2, "grow", "grow_all"))
    w, accs = np.eye(2, dtype=np.float32), [np.zeros((2, 2), np.float32)] * 2
    with pytest.raises(RecirError, match=r"no function @grow__expand_fwd in the module \(run "
                       r"synthesize-gradients\{entry=grow__expand wrapper=false\} first\): the "
                       "expansion makes float values"):
        run_function(module, "grow_all__frontier_grad",
                     [np.ones((2, 2), np.float32), np.array([1, 2], np.int32), w, *accs])
