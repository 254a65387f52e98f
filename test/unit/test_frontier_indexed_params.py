"""Gradients of indexed parameters (`s[0]`, `s[label[i]]`, a row of `r`) with
`batching="frontier"`, against the recursive code's and finite differences.

Read inside the recursion at a fixed index, such a value is the same for
every node: the frontier refuses it at the user's line (`"auto"` then runs
the recursive code). Made in the entry instead, as that refusal advises,
the batched prefix of uniform ops returned its row operands without their
data (a TypeError); read at each node's own index, the gradient's one-hot
was typed as one vector for all rows (a KeyError in the LLVM conversion)."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import tree_rnn

H = 4
TREES = make_treebank(4, seed=3)
BATCH = [(t.left, t.right, t.word, t.label, t.root) for t in TREES]


def line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text and "line_of" not in text)


def bias_in_the_recursion(p, label, i):
    return rf.fill(p["s"][0], [H]) + rf.gather(p["r"], 1)  # FIXED-INDEX


def bias_per_node(p, label, i):
    return rf.fill(p["s"][label[i]], [H])


def traced_model(bias, hoisted: bool = False):
    """TreeRNN with `bias(p, label, i)` added in each inner node (made once
    in the entry where `hoisted`)."""
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=H)
    params["s"] = np.array([0.7, -0.3, 0.2, 0.5, -0.1], np.float32)
    params["r"] = (0.5 * np.random.default_rng(1).standard_normal((3, H))).astype(np.float32)
    with recir.trace("m") as m:
        left, right, word, label = (m.input(n, recir.structure())
                                    for n in ("left", "right", "word", "label"))
        root = m.input("root", recir.i32)
        p = {k: m.param(k, v) for k, v in params.items()}
        made = bias(p, label, root) if hoisted else None
        with recir.SubGraph("node", [recir.i32], [recir.vector(H), recir.f32]) as node:
            (i,) = node.inputs

            def finish(h, below):
                return h, rf.softmax_xent(p["w_out"] @ h + p["b_out"], label[i]) + below

            def at_inner():
                ls, rs = node(left[i]), node(right[i])
                extra = made if hoisted else bias(p, label, i)
                z = p["w"] @ rf.concat([ls[0], rs[0]]) + p["b"] + extra
                return finish(rf.tanh(z), ls[1] + rs[1])

            node.output(*recir.cond(left[i] < 0,
                                    lambda: finish(rf.gather(p["emb"], word[i]), 0.0),
                                    at_inner))
        out = node(root)
        m.output(out[0], out[1])
    return m.traced


def finite_difference(traced, name: str, index: tuple[int, ...], eps: float = 1e-2
                      ) -> float:
    value = traced.params[name].copy()
    losses = []
    for step in (eps, -eps):
        moved = value.copy()
        moved[index] += step
        traced.params[name] = moved
        losses.append(sum(float(traced.run(*item)[1]) for item in BATCH))
    traced.params[name] = value
    return (losses[0] - losses[1]) / (2 * eps)


def check_gradients(traced, entries) -> None:
    _, recursive = recir.value_and_grad(traced, threads=1).batch(BATCH)
    outs, frontier = recir.value_and_grad(traced, batching="frontier", threads=1).batch(BATCH)
    for out, item in zip(outs, BATCH, strict=True):
        assert out[1] == pytest.approx(traced.run(*item)[1], rel=1e-5)
    for name in traced.params:
        np.testing.assert_allclose(frontier[name], recursive[name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    for name, index in entries:
        want = finite_difference(traced, name, index)
        assert abs(want) > 0.1  # (a gradient that is there)
        assert frontier[name][index] == pytest.approx(want, rel=2e-2)


def test_a_fixed_index_in_the_recursion_is_refused_at_its_line_and_auto_runs_it():
    traced = traced_model(bias_in_the_recursion)
    with pytest.raises(RecirError) as refused:
        recir.value_and_grad(traced, batching="frontier", threads=1)
    assert str(refused.value) == (
        f"{__file__}:{line_of('# FIXED-INDEX')}:1: error: 'tmath.add' op computes, inside "
        "the recursive function, a value that is the same at every node (it does not depend "
        'on the node), which batching="frontier" cannot differentiate there: compute it '
        "before the `recir.SubGraph` block and use the result inside, or use "
        'batching="recursive" or "auto"')
    _, auto = recir.value_and_grad(traced, batching="auto", threads=1).batch(BATCH)
    assert auto["s"][0] == pytest.approx(finite_difference(traced, "s", (0,)), rel=2e-2)
    assert auto["r"][1, 2] == pytest.approx(finite_difference(traced, "r", (1, 2)), rel=2e-2)
    assert not auto["s"][1:].any() and not auto["r"][[0, 2]].any()


def row_of_a_made_matrix(p, label, i):
    return rf.gather(p["r"] * 2.0, 1)  # MADE-MATRIX


@pytest.mark.parametrize("hoisted", [False, True])
def test_a_row_of_a_matrix_made_from_a_parameter_is_refused_at_its_line(hoisted):
    """The message spoke of parameters 'passed down from the entry' that
    'accumulate', and advised making the matrix in the entry, which fails
    the same way."""
    traced = traced_model(row_of_a_made_matrix, hoisted)
    with pytest.raises(RecirError) as refused:
        recir.value_and_grad(traced, threads=1)
    assert str(refused.value) == (
        f"{__file__}:{line_of('# MADE-MATRIX')}:1: error: 'tmath.mul' op makes a matrix "
        "that is then multiplied (`@`), read by row (`rf.gather`) or used by "
        "`rf.bilinear`, which recir differentiates only on a parameter itself: apply this "
        'op to their result instead (`(p["w"] @ x) * 2`, not `(p["w"] * 2) @ x`) or make '
        "the matrix a parameter of its own")


def test_a_fixed_index_made_in_the_entry_has_its_frontier_gradient():
    traced = traced_model(bias_in_the_recursion, hoisted=True)
    inference = recir.compile(traced, batching="frontier", threads=1).batch(BATCH)
    for (h, loss), item in zip(inference, BATCH, strict=True):
        want_h, want_loss = traced.run(*item)
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(want_loss, rel=1e-5)
    check_gradients(traced, [("s", (0,)), ("r", (1, 0)), ("r", (1, 3))])


def test_an_index_per_node_has_its_frontier_gradient():
    check_gradients(traced_model(bias_per_node), [("s", (1,)), ("s", (3,))])
