"""The row kernels that are a loop over rows around the op's own kernel
(`row_kernels.per_row`): a tree model whose cell uses each such op (the
reductions, softmax, argmax as a gather index, fill from a row's scalar,
the elementwise ops) runs batched by frontiers (`batching="frontier"`) with
the outputs of the interpreter and of the recursive function, tree by tree,
and the recursive function's summed gradients."""

from __future__ import annotations

import numpy as np
import pytest
from test_invoke_to_frontier import trees

import recir
from recir import frontend as rf
from recir.models.tree_common import trace_tree_model

HIDDEN = 4


def params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    shapes = {"emb": (12, HIDDEN), "w": (HIDDEN, 2 * HIDDEN), "b": (HIDDEN,),
              "w_out": (3, HIDDEN), "b_out": (3,)}
    return {k: (0.5 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}


def leaf(p, x):
    return (rf.sigmoid(x),)


def combine(p, ls, rs):
    """Every per-row op: softmax, sum, max, argmax (a row's gather index),
    fill (a row's scalar), exp, log, relu, division, subtraction."""
    a = p["w"] @ rf.concat([ls[0], rs[0]]) + p["b"]
    s = rf.softmax(a)
    picked = rf.gather(p["emb"], rf.argmax(a))
    shift = rf.fill(rf.max(a), (HIDDEN,))
    spread = rf.log(rf.exp(s) + 1.0) / (rf.fill(rf.sum(s * s), (HIDDEN,)) + 1.0)
    return (rf.relu(a - shift) + spread - 0.5 * picked,)


def inputs(tree):
    return (tree.left, tree.right, tree.word % 12, tree.label % 3, tree.root)


def test_per_row_kernels_give_the_recursive_outputs():
    model = trace_tree_model("per_row", params(), HIDDEN, leaf, combine)
    batch = [inputs(t) for t in trees()]
    outs = recir.compile(model, batching="frontier").batch(batch)
    recursive = recir.compile(model, threads=1)
    for item, (h, loss) in zip(batch, outs, strict=True):
        for h_ref, loss_ref in (recursive(*item), model.run(*item)):  # native, NumPy
            np.testing.assert_allclose(h, h_ref, rtol=1e-4, atol=1e-5)
            assert loss == pytest.approx(loss_ref, rel=1e-4)


def test_per_row_kernels_give_the_recursive_gradients():
    model = trace_tree_model("per_row_grad", params(), HIDDEN, leaf, combine)
    assert_recursive_gradients(recir.value_and_grad(model, batching="frontier"),
                               recir.value_and_grad(model, batching="recursive"),
                               [inputs(t) for t in trees()], model.params)


def assert_recursive_gradients(batched, recursive, batch, params):
    """`batched` (frontier) gives `recursive`'s outputs and gradients on
    `batch`, every gradient nonzero somewhere."""
    outs, grads = batched.batch(batch)
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    for item, (h, loss) in zip(batch, outs, strict=True):
        (h_ref, loss_ref), _ = recursive(*item, into=expected)
        np.testing.assert_allclose(h, h_ref, rtol=1e-4, atol=1e-5)
        assert loss == pytest.approx(loss_ref, rel=1e-4)
    for k, g in expected.items():
        assert np.abs(g).max() > 0, k
        np.testing.assert_allclose(grads[k], g, rtol=1e-3, atol=1e-4, err_msg=k)


SLICES = """
func.func @tanh_slice(%x: tensor<?x8xf32>) -> tensor<?x4xf32> {
  %t = tmath.tanh %x : tensor<?x8xf32>
  %s = tmath.slice %t[2] : tensor<?x8xf32> -> tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}
func.func @taken_slice(%x: tensor<?x8xf32>, %i: tensor<?xi32>) -> tensor<?x4xf32> {
  %a = frontier.take %x[%i] : tensor<?x8xf32>, tensor<?xi32>
  %s = tmath.slice %a[3] : tensor<?x8xf32> -> tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}
"""


def test_a_returned_slice_of_rows_comes_back_contiguous(tmp_path):
    """A slice over rows is a view with its input's stride; returned, it is
    copied row by row into a contiguous result."""
    from xdsl.dialects import func

    from recir.context import make_context
    from recir.frontier_compile import compile_rows
    from recir.parsing import parse_module

    module = parse_module(make_context(), SLICES)
    functions = [op for op in module.ops if isinstance(op, func.FuncOp)]
    calls = compile_rows([(functions, None)], tmp_path).functions
    x = np.random.default_rng(0).standard_normal((7, 8)).astype(np.float32)
    (out,) = calls["tanh_slice"]([x.copy()])
    np.testing.assert_allclose(out, np.tanh(x)[:, 2:6], rtol=2e-6)
    numbers = np.array([6, 0, 3, 3, 1], np.int32)
    (out,) = calls["taken_slice"]([x.copy(), numbers])
    np.testing.assert_array_equal(out, x[numbers][:, 3:7])
