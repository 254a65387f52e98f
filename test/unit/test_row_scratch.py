"""The frontier's scratch slots (`rows.Scratch`, `row_lowering.ScratchLiveness`).

A temporary's bytes are handed out again only after its last use, and a
batched function needs the bytes its live temporaries take at once per row,
not the sum of all its temporaries: a TreeLSTM cell's shrink.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_gradients import batched_gradients
from test_invoke_to_frontier import tree_batch_args

import recir
from recir import frontend as rf
from recir.backend.native_loops import most_rows
from recir.data.synthetic import make_treebank
from recir.data.trees import Tree
from recir.dialects.row_types import is_rows
from recir.interpreter import run_function
from recir.models import tree_lstm
from recir.models.tree_common import reference_tree, trace_tree_model
from recir.passes.rows import ALIGN, element_bytes, row_width
from recir.pipeline import FRONTIER, FUSE, run_passes

HIDDEN = 19  # no multiple of a vector or of the 64-byte slot unit
PRODUCTS = 4  # temporaries made while `early` waits for its use


def make_cells(tanh, concat):
    def leaf(p, x):
        return (x,)

    def combine(p, ls, rs):
        left, right = ls[0], rs[0]
        early = tanh(left * right + left)  # read again only after every product below
        z = tanh(p["w"] @ concat([left, right]) + p["b"])
        chain = []
        for _ in range(PRODUCTS):  # each product's rows live to the end: fresh slots
            z = tanh(p["v"] @ z + p["b"])
            chain.append(z)
        total = chain[0]
        for later in chain[1:]:
            total = total + later
        return (total - early,)

    return leaf, combine


def late_use_model(params: dict[str, np.ndarray]) -> recir.TracedModel:
    return trace_tree_model("late_use", params, HIDDEN, *make_cells(rf.tanh, rf.concat))


def batch() -> list[Tree]:
    leaf = Tree(left=[-1], right=[-1], word=[7], label=[3])
    return [leaf, *make_treebank(2, "linear", num_leaves=5, seed=2, vocab_size=50),
            *make_treebank(3, seed=3, vocab_size=50),
            *make_treebank(1, "balanced", num_leaves=16, seed=4, vocab_size=50)]


def inputs(trees: list[Tree]) -> list[tuple]:
    return [(t.left, t.right, t.word, t.label, t.root) for t in trees]


def test_a_value_read_after_many_temporaries_keeps_its_bytes(tmp_path):
    """`early` is live across four products, whose rows all live to the end:
    were its slot handed out before its last use, a later product would
    overwrite it.
    Values against float64 NumPy, gradients against the interpreter on the
    batched gradient IR (the `_fwd` saves values for the `_bwd`, which
    reads them after its own temporaries)."""
    rng = np.random.default_rng(7)
    shapes = {"emb": (50, HIDDEN), "w": (HIDDEN, 2 * HIDDEN), "v": (HIDDEN, HIDDEN),
              "b": (HIDDEN,), "w_out": (5, HIDDEN), "b_out": (5,)}
    params = {k: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)
              for k, s in shapes.items()}
    traced = late_use_model(params)
    trees = batch()
    into = {k: np.zeros_like(v) for k, v in params.items()}
    outs, grads = recir.value_and_grad(traced, batching="frontier", threads=1,
                                       cache_dir=tmp_path).batch(inputs(trees), into)
    leaf, combine = make_cells(np.tanh, np.concatenate)
    for (h, loss), tree in zip(outs, trees, strict=True):
        h_ref, loss_ref = reference_tree(tree, tree.root, params, leaf, combine)
        np.testing.assert_allclose(h, h_ref, rtol=1e-4, atol=1e-5)
        assert loss == pytest.approx(loss_ref, rel=1e-4)
    module = traced.module.clone()
    run_passes(module, batched_gradients(5, "node", traced.entry))
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    run_function(module, f"{traced.entry}__frontier_grad",
                 [*tree_batch_args(trees, params), *expected.values()])
    for k, g in expected.items():
        np.testing.assert_allclose(grads[k], g, rtol=1e-3, atol=1e-4, err_msg=k)


def every_temporary_bytes(traced: recir.TracedModel, name: str) -> int:
    """Bytes a row that a fresh slot for every rows result of `@name` takes
    (after fusion, as lowered): what the buffer needs without reuse."""
    module = traced.module.clone()
    run_passes(module, FRONTIER.format(inputs=len(traced.input_names)) + "," + FUSE)
    function = next(f for f in module.ops if getattr(f, "sym_name", None) is not None
                    and f.sym_name.data == name)
    total = 0
    for op in function.body.blocks[0].ops:
        for r in op.results:
            if is_rows(r.type):
                row_bytes = row_width(r.type) * element_bytes(r.type.element_type)
                total += max(ALIGN, -(-row_bytes // ALIGN) * ALIGN)
    return total


def test_a_tree_lstm_cells_scratch_a_row_is_its_live_temporaries(tmp_path):
    """TreeLSTM (h = 64): the `@node__post` buffer a row is under half of a
    slot for every temporary, at least its widest temporary (the 5h gate
    pre-activations), and the runtime's buffer is that times the widest
    height: no call ran out and was repeated."""
    hidden = 64
    params = tree_lstm.init_params(np.random.default_rng(3), hidden=hidden, embed=hidden,
                                   vocab=100)
    traced = tree_lstm.trace_model(params)
    native = recir.compile(traced, batching="frontier", threads=1, cache_dir=tmp_path)
    post = native.native.functions["node__post"]
    every = every_temporary_bytes(traced, "node__post")
    assert 5 * hidden * 4 <= post.per_row < every // 2, (post.per_row, every)
    trees = make_treebank(3, "balanced", num_leaves=32, seed=5, vocab_size=100)
    outs = native.batch(inputs(trees))
    for (h, _), tree in zip(outs, trees, strict=True):
        np.testing.assert_allclose(h, tree_lstm.reference(tree, tree.root, params)[0],
                                   rtol=1e-4, atol=1e-5)
    widest = 3 * 32  # the leaves' height
    assert post.scratch.nbytes <= post.per_row * widest + ALIGN


def test_a_height_loop_sizes_each_threads_scratch_by_its_most_rows():
    """A team's block of a split height, a whole height on the calling
    thread (which may be wider than a block), or a thread's group."""
    bounds = np.array([0, 40, 55, 60], np.int64)  # heights of 40, 15 and 5 rows
    assert most_rows(bounds, 1, 0, None) == 40
    assert most_rows(bounds, 2, 1, None) == 20  # 40 split, then 15 and 5 alone
    assert most_rows(bounds, 4, 1, None) == 15  # the calling thread's 15 rows
    groups = np.array([[0, 30, 40], [40, 45, 55], [55, 56, 60]], np.int64)
    assert most_rows(bounds, 2, 3, groups) == 30


def test_most_rows_matches_its_numpy_formula_on_random_heights():
    """A block of each split height (ceil(rows / threads)) or a whole one."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        heights = int(rng.integers(0, 12))
        bounds = np.cumsum(np.r_[rng.integers(0, 3), rng.integers(0, 300, heights)])
        threads, split = int(rng.integers(1, 5)), int(rng.integers(0, heights + 1))
        rows = bounds[1:] - bounds[:-1]
        blocks = -(-rows[:split] // threads)
        want = max(int(blocks.max(initial=0)), int(rows[split:].max(initial=0)), 1)
        assert most_rows(bounds.astype(np.int64), threads, split, None) == want
