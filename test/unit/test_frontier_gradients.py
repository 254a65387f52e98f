"""Gradients of the frontier-batched IR: `synthesize-gradients` applied to the
bottom-up function (the recursive path's rules table), run backwards height
by height in the interpreter, equal the recursive `_grad` summed over the
batch's trees."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.interpreter.frontier_grad import frontier_value_and_grad
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
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


def test_an_expansion_that_makes_floats_must_be_differentiated_too():
    module = parse_module(make_context(), GROW)
    run_passes(module, BATCHED.format(n=2, f="grow"))
    w = np.eye(2, dtype=np.float32)
    with pytest.raises(RecirError, match="no @grow__expand_fwd: the expansion makes float"):
        frontier_value_and_grad(module, "grow_all__frontier",
                                [np.ones((2, 2), np.float32), np.array([1, 2], np.int32), w])


def test_a_chain_grown_top_down_gives_each_root_its_gradient():
    module = parse_module(make_context(), GROW)
    run_passes(module, BATCHED.format(n=2, f="grow")
               + ",synthesize-gradients{entry=grow__expand wrapper=false}")
    w = np.array([[0.5, -0.3], [0.8, 0.2]], np.float32)
    h0 = np.array([[1, 2], [0.5, -1], [0.3, 0.3]], np.float32)
    depth = np.array([1, 3, 0], np.int32)
    (totals,), grads = frontier_value_and_grad(module, "grow_all__frontier", [h0, depth, w])
    recursive = parse_module(make_context(), GROW)
    run_passes(recursive, "capture-outer-refs,synthesize-gradients")
    d_w = np.zeros_like(w)
    for k in range(len(h0)):
        d_h = np.zeros(2, np.float32)
        (total,) = run_function(recursive, "grow_all_grad", [h0[k], int(depth[k]), w, d_h, d_w])
        assert totals[k] == pytest.approx(total, rel=1e-6)
        np.testing.assert_allclose(grads[0][k], d_h, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grads[2], d_w, rtol=1e-5, atol=1e-7)


def grow_from_roots(traced) -> ModuleOp:
    """TD-TreeLSTM's closed @grow, entered from given root states (its entry's
    own ops before the invoke, tanh(W_in x), are outside the schedule)."""
    module = traced.module.clone()
    run_passes(module, "capture-outer-refs")
    grow = next(f for f in module.ops if isinstance(f, func.FuncOp)
                and f.sym_name.data == "grow")
    names = ["h", "c", "depth", "u_score", "max_depth", "w_left", "b_left", "w_right",
             "b_right"]
    types = dict(zip(names, (str(a.type) for a in grow.args), strict=True))
    order = ["h", "c", "depth", "max_depth", "u_score", "w_left", "b_left", "w_right",
             "b_right"]
    signature = ", ".join(f"%{n}: {types[n]}" for n in order)
    call = ", ".join(f"%{n}" for n in names)
    call_types = ", ".join(types[n] for n in names)
    text = (f"func.func @grow_from({signature}) -> (i32, f32) {{\n"
            f"  %n, %t = invoke.invoke @grow({call}) : ({call_types}) -> (i32, f32)\n"
            f"  func.return %n, %t : i32, f32\n}}\n")
    printed = str(module).rstrip()
    assert printed.endswith("}")
    return parse_module(make_context(), printed[:-1] + text + "}\n")


def test_top_down_gradients_run_the_expansion_backwards():
    """TD-TreeLSTM: the states that grow the tree are made while expanding;
    their gradients flow back depth by depth through @grow__expand_bwd."""
    params = td_tree_lstm.init_params(np.random.default_rng(3), hidden=4, inputs=4)
    traced = td_tree_lstm.trace_model(params)
    module = grow_from_roots(traced)
    run_passes(module, "invoke-to-frontier{entry=grow_from inputs=4},"
               "synthesize-gradients{entry=grow__post wrapper=false},"
               "synthesize-gradients{entry=grow__expand wrapper=false}")
    rng = np.random.default_rng(5)
    # roots leaning along u_score grow (u.h > 0); their children decide by their own state
    hs = np.tanh(np.abs(rng.standard_normal((6, 4))) * np.sign(params["u_score"]))
    hs = hs.astype(np.float32)
    cs = (0.5 * rng.standard_normal((6, 4))).astype(np.float32)
    depths, limits = np.zeros(6, np.int32), np.array([0, 1, 3, 4, 2, 4], np.int32)
    grow_params = [params[k] for k in ("u_score", "w_left", "b_left", "w_right", "b_right")]
    (counts, totals), grads = frontier_value_and_grad(
        module, "grow_from__frontier", [hs, cs, depths, limits, *grow_params])

    recursive = grow_from_roots(traced)
    run_passes(recursive, "synthesize-gradients{entry=grow_from}")
    expected = [np.zeros_like(p) for p in grow_params]
    for k in range(len(hs)):
        dh, dc = np.zeros(4, np.float32), np.zeros(4, np.float32)
        count, total = run_function(recursive, "grow_from_grad", [
            hs[k], cs[k], 0, int(limits[k]), *grow_params, dh, dc, *expected])
        assert counts[k] == count and totals[k] == pytest.approx(total, rel=1e-5)
        np.testing.assert_allclose(grads[0][k], dh, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads[1][k], dc, rtol=1e-5, atol=1e-6)
    assert len(set(counts.tolist())) > 2
    for index, want in enumerate(expected, 4):
        scale = max(float(np.abs(want).max()), 1e-6)
        assert np.abs(grads[index] - want).max() <= 1e-5 * scale
