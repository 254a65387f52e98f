"""Fused and unfused code give the same numbers, forward and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir.context import make_context
from recir.data import make_treebank
from recir.dialects import tmath
from recir.interpreter import run_function
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from recir.pipeline import lower
from recir.passes.tmath_fuse_elementwise import TmathFuseElementwisePass

MODELS = {"tree_rnn": tree_rnn, "rntn": rntn, "tree_lstm": tree_lstm}


def small(module, **sizes):
    params = module.init_params(np.random.default_rng(1), **sizes)
    return module.trace_model({k: (0.4 * v).astype(np.float32) for k, v in params.items()})


def inputs(tree):
    return tree.left, tree.right, tree.word, tree.label, tree.root


@pytest.mark.parametrize("name", sorted(MODELS))
def test_native_fused_equals_unfused(name: str) -> None:
    model = small(MODELS[name], hidden=12, vocab=50)
    # one thread: fusion does not depend on tasks, and their code doubles compile time
    fused, plain = recir.compile(model, threads=1), recir.compile(model, fuse=False, threads=1)
    g_fused = recir.value_and_grad(model, threads=1)
    g_plain = recir.value_and_grad(model, fuse=False, threads=1)
    for tree in make_treebank(4, vocab_size=50, seed=3):
        for a, b in zip(fused(*inputs(tree)), plain(*inputs(tree))):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        ga, gb = g_fused(*inputs(tree))[1], g_plain(*inputs(tree))[1]
        for k in ga:
            np.testing.assert_allclose(ga[k], gb[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_fused_ir_interprets_to_the_same_values() -> None:
    model = small(tree_lstm, hidden=6, embed=4, vocab=50)
    module = lower(model.module, "capture-outer-refs")
    TmathFuseElementwisePass().apply(make_context(), module)
    assert any(isinstance(op, tmath.FusedOp) for op in module.walk())
    tree = make_treebank(1, vocab_size=50, seed=5)[0]
    args = [*inputs(tree), *model.params.values()]
    for a, b in zip(run_function(module, model.entry, args), model.run(*inputs(tree))):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_td_tree_lstm_backward_is_fused_and_equal() -> None:
    params = td_tree_lstm.init_params(np.random.default_rng(2), hidden=6, inputs=4)
    params = {k: (0.5 * v).astype(np.float32) for k, v in params.items()}
    x = np.array([0.5, -0.2, 0.9, 0.1], np.float32)
    params["u_score"] = np.tanh(params["w_in"] @ x)
    model = td_tree_lstm.trace_model(params)
    (n1, t1), g1 = recir.value_and_grad(model, threads=1)(x, 5)
    (n2, t2), g2 = recir.value_and_grad(model, fuse=False, threads=1)(x, 5)
    assert n1 == n2
    assert t1 == pytest.approx(t2, rel=1e-6)
    for k in g1:
        np.testing.assert_allclose(g1[k], g2[k], rtol=1e-6, atol=1e-7)


def test_fused_op_verifier_names_the_problem() -> None:
    from recir.diagnostics import RecirError
    from recir.parsing import parse_module

    text = """
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = tmath.fused(%x) : (tensor<3xf32>) -> tensor<3xf32> {
  ^bb0(%a: tensor<3xf32>):
    %s = tmath.softmax %a : tensor<3xf32>
    tmath.yield %s : tensor<3xf32>
  }
  func.return %y : tensor<3xf32>
}
"""
    with pytest.raises(RecirError, match="'tmath.softmax' in the body is not elementwise"):
        parse_module(make_context(), text, "bad.mlir")


def test_a_chain_nothing_reads_compiles_on_every_path() -> None:
    """An elementwise chain a model computes and never reads fuses into a
    `tmath.fused` of no results, which the loop kernels indexed (an
    IndexError at compile time); it now lowers to no loop."""
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=8)
    leaf, combine = tree_rnn.make_cells(recir.frontend.tanh, recir.frontend.concat)

    def wasteful(p, ls, rs):
        recir.frontend.tanh(ls[0]) * rs[0]  # nothing reads it
        return combine(p, ls, rs)

    traced = tree_rnn.trace_tree_model("tree_rnn", params, params["b"].shape[0], leaf,
                                       wasteful)
    trees = make_treebank(4, seed=1)
    batch = [(t.left, t.right, t.word, t.label, t.root) for t in trees]
    expected = [traced.run(*args) for args in batch]
    for batching in ("recursive", "frontier"):
        got = recir.compile(traced, batching=batching, threads=1).batch(batch)
        for want, out in zip(expected, got, strict=True):
            for a, b in zip(want, out, strict=True):
                assert np.allclose(a, b, rtol=1e-4, atol=1e-5)
