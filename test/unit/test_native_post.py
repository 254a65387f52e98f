"""A call's post segment as one native run (`native_post.py`) and its backward
(`native_grad.py`): outputs and gradients against the NumPy path and the
Python loop on 1, 2 and 3 threads with and without split work, the record
kinds they add to `split`'s dispatcher against NumPy, the height order
against plain Python, bad indices as the Python loop's located errors, and
the models and calls left to the Python loop."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.backend.kernels import split
from recir.batching import distinct, kernels, native, native_grad, native_post
from recir.batching.api import BatchedFunction, BatchedGradFunction
from recir.data import make_treebank
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn

pytestmark = pytest.mark.skipif(not split.available(), reason="needs libgomp and CBLAS")


def tree_args(tree: Tree) -> tuple:
    return (tree.left, tree.right, tree.word, tree.label, tree.root)


def mixed_trees() -> list[tuple]:
    leaf = Tree(left=[-1], right=[-1], word=[7], label=[3])
    trees = [leaf, *make_treebank(3, "linear", num_leaves=9, seed=2),
             *make_treebank(8, seed=3), *make_treebank(2, "balanced", num_leaves=32, seed=4)]
    return [tree_args(t) for t in trees]


@pytest.fixture
def runs(monkeypatch):
    """Whether each post segment ran natively (True) or fell back (False)."""
    found = []
    real = native_post.NativePost.run
    monkeypatch.setattr(native_post.NativePost, "run",
                        lambda self, schedule: found.append(real(self, schedule)) or found[-1])
    return found


@pytest.fixture
def distinct_heights(monkeypatch):
    """Lets every height with a gather-product pair run it on distinct rows;
    the distinct row counts of the heights that did."""
    monkeypatch.setattr(distinct, "MIN_SAVED", 0)
    found = []
    real = distinct.Distinct.__init__

    def init(self, *args):
        real(self, *args)
        found.append(len(self.values))
    monkeypatch.setattr(distinct.Distinct, "__init__", init)
    return found


def run_steps(records: list[list[int]], threads: int) -> None:
    words = np.array([w for r in records for w in r], np.int64)
    offsets = np.cumsum([0] + [len(r) for r in records[:-1]]).astype(np.int64)
    starts = np.arange(len(records) + 1, dtype=np.int64)  # one record a step
    counters = np.zeros(len(records), np.int64)
    split.runner()(words.ctypes.data, offsets.ctypes.data, starts.ctypes.data,
                         len(records), counters.ctypes.data, threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_copy_and_pick_records_match_numpy_and_flag_bad_indices(threads):
    rng = np.random.default_rng(0)
    src = rng.standard_normal((10, 4), dtype=np.float32)
    dst = np.zeros((4, 6), np.float32)
    index = np.array([2, 9, 10, -1], np.int32)  # the last two out of bounds
    flat = np.arange(20, dtype=np.int32)
    offsets, lengths = np.array([0, 5], np.int64), np.array([5, 15], np.int64)
    roots, at = np.array([0, 1, 1, 0], np.int64), np.array([4, 14, 15, -1], np.int32)
    picked = np.full(4, -7, np.int32)
    error = np.zeros(2, np.int64)
    run_steps([
        [split.COPY, 0, dst.ctypes.data + 8, 24, src.ctypes.data, 16, 16, index.ctypes.data,
         4, 10, 4, error.ctypes.data],
        [split.PICK, 0, picked.ctypes.data, flat.ctypes.data, offsets.ctypes.data,
         lengths.ctypes.data, roots.ctypes.data, at.ctypes.data, 4, error.ctypes.data + 8],
    ], threads)
    expected = np.zeros((4, 6), np.float32)
    expected[:2, 2:] = src[[2, 9]]
    assert np.array_equal(dst, expected) and error[0] == 1  # bad rows left unwritten
    assert picked.tolist() == [4, 19, -7, -7] and error[1] == 1


@pytest.mark.parametrize("model", [tree_rnn, tree_lstm], ids=["tree_rnn", "tree_lstm"])
@pytest.mark.parametrize("threads,split_all", [(1, False), (2, False), (2, True), (3, True)])
@pytest.mark.parametrize("rows", ["all", "distinct"])
def test_native_post_matches_numpy_path(model, threads, split_all, rows, runs, monkeypatch,
                                        request):
    found = request.getfixturevalue("distinct_heights") if rows == "distinct" else None
    if split_all:  # every product and row kernel cut into parts, x's rows in blocks of 3
        monkeypatch.setattr(kernels, "SPLIT_FLOPS", 0)
        monkeypatch.setattr(native.Kernels, "SPLIT_ELEMENTS", 0)
        monkeypatch.setattr(native_post, "NT_BLOCK", 3)
    params = model.init_params(np.random.default_rng(5), hidden=20, vocab=100)
    traced = model.trace_model(params)
    batched, reference = BatchedFunction(traced, threads=threads), BatchedFunction(
        traced, native=False)
    inputs = mixed_trees()
    for batch in (inputs, inputs[3:6], inputs[::-1]):  # the scratch reused by other shapes
        for a, b in zip(batched.batch(batch), reference.batch(batch), strict=True):
            for x, y in zip(a, b, strict=True):
                x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
                assert np.abs(x - y).max() <= 1e-5 * max(np.abs(y).max(), 1.0)
    assert runs == [True] * 3
    if found is not None:  # TreeLSTM's leaf product on distinct words (TreeRNN has none)
        assert len(found) == (3 if model is tree_lstm else 0)
        assert all(0 < count < 100 for count in found)


@pytest.mark.parametrize("field", ["word", "label"])
@pytest.mark.parametrize("threads", [1, 2])
def test_bad_index_is_the_python_loops_located_error(field, threads, runs):
    params = tree_lstm.init_params(np.random.default_rng(0), vocab=100)
    batched = BatchedFunction(tree_lstm.trace_model(params), threads=threads)
    good = make_treebank(2, seed=5)
    bad = dict(left=good[1].left, right=good[1].right, word=good[1].word,
               label=good[1].label)
    bad[field] = np.full_like(bad[field], 100 if field == "word" else 9)
    with pytest.raises(RecirError, match=r"tree_common.py:\d+:\d+: error: .*out of range"):
        batched.batch([tree_args(good[0]), tree_args(Tree(**bad))])
    assert runs == [False]  # the native run flagged it, the Python loop raised
    h, loss = batched(*tree_args(good[0]))
    assert runs == [False, True]
    assert loss == pytest.approx(tree_lstm.reference(good[0], good[0].root, params)[1],
                                 rel=1e-5)


def test_left_to_the_python_loop(runs):
    """RNTN's bilinear product and TD-TreeLSTM's top-down cell have no native
    post records."""
    params = rntn.init_params(np.random.default_rng(1), vocab=100)
    batched = BatchedFunction(rntn.trace_model(params), threads=2)
    batched.batch(mixed_trees()[:4])
    assert runs == [] and batched.runner.native_post() is None
    params = td_tree_lstm.init_params(np.random.default_rng(3))
    assert BatchedFunction(td_tree_lstm.trace_model(params)).runner.native_post() is None


@pytest.mark.parametrize("model", [tree_rnn, tree_lstm], ids=["tree_rnn", "tree_lstm"])
@pytest.mark.parametrize("threads,split_all", [(1, False), (2, True)])
@pytest.mark.parametrize("backward", ["native", "python", "failed"])
@pytest.mark.parametrize("rows", ["all", "distinct"])
def test_gradients_from_the_native_forward_match_the_python_loop(model, threads, split_all,
                                                                 backward, rows, runs,
                                                                 monkeypatch, request):
    """A gradient call's forward runs natively, and its backward (`native_grad`),
    or the Python backward on the frames it leaves (where the native one does
    not apply, or a check failed after it had added rows): outputs and
    gradients as with the Python loop's forward and backward; the leaves'
    product on all their rows or on their distinct words."""
    found = request.getfixturevalue("distinct_heights") if rows == "distinct" else None
    if backward == "python":
        monkeypatch.setattr(native_grad, "backward", lambda *args: False)
    if backward == "failed":
        real = native_grad.Sweep.execute
        monkeypatch.setattr(native_grad.Sweep, "execute", lambda self: real(self) and False)
    if split_all:
        monkeypatch.setattr(kernels, "SPLIT_FLOPS", 0)
        monkeypatch.setattr(native.Kernels, "SPLIT_ELEMENTS", 0)
        monkeypatch.setattr(native_post, "NT_BLOCK", 3)
    params = model.init_params(np.random.default_rng(6), hidden=20, vocab=100)
    params = {k: v / 4 if v.ndim == 2 else v for k, v in params.items()}
    traced = model.trace_model(params)
    inputs = mixed_trees()
    fast = BatchedGradFunction(traced, threads=threads)
    slow = BatchedGradFunction(traced, threads=threads)
    slow.runner.fast_post = native_post.NativePost(slow.runner)
    slow.runner.fast_post.ok = False
    for batch in (inputs, inputs[2:7]):  # the tape's buffers reused
        (outs, grads), (outs2, grads2) = fast.batch(batch), slow.batch(batch)
        for (h, loss), (h2, loss2) in zip(outs, outs2, strict=True):
            assert np.allclose(h, h2, rtol=1e-5, atol=1e-6)
            assert loss == pytest.approx(loss2, rel=1e-5)
        for name in params:
            scale = max(np.abs(grads2[name]).max(), 1e-30)
            assert np.abs(grads[name] - grads2[name]).max() <= 1e-5 * scale, name
    assert runs == [True, True]
    assert found is None or len(found) == (2 if model is tree_lstm else 0)


def test_context_errors_are_read_from_every_part():
    post_contexts = (native.Context * 3)()
    post_contexts[2].error = 1
    errors = np.frombuffer(post_contexts, np.int32).reshape(3, -1)[:, 2]
    assert errors.tolist() == [0, 0, 1] and native.Context.error.offset == 8
    assert ctypes.sizeof(native.Context) % 4 == 0


@pytest.mark.parametrize("seed", range(4))
def test_height_order_matches_plain_python(seed):
    """Random call trees laid out level by level, as expansion makes them."""
    from recir.batching import heights

    rng = np.random.default_rng(seed)
    sites, children, level, total = 3, [[] for _ in range(3)], [0], 1
    while level and total < 300:
        below = []
        for _ in level:
            for site in range(sites):
                if rng.random() < 0.45:
                    children[site].append(total + len(below))
                    below.append(0)
                else:
                    children[site].append(-1)
        level, total = below, total + len(below)
    for site in range(sites):
        children[site] += [-1] * (total - len(children[site]))
    height = [0] * total
    for i in reversed(range(total)):
        height[i] = max([height[c[i]] + 1 for c in children if c[i] >= 0], default=0)
    expected = sorted(range(total), key=lambda i: (height[i], i))
    perm, inv, renumbered, bounds = heights.order([np.array(c) for c in children])
    assert perm.tolist() == expected and inv[perm].tolist() == list(range(total))
    assert bounds.tolist() == [sum(h < k for h in height) for k in range(max(height) + 2)]
    for c, r in zip(children, renumbered, strict=True):
        assert r.tolist() == [inv[c[i]] if c[i] >= 0 else -1 for i in perm]


def two_calls_model(params):
    """TreeRNN whose entry invokes @node twice (the root and its left child):
    a gradient call keeps both forwards' tapes until its backward."""
    leaf, combine = tree_rnn.make_cells(rf.tanh, rf.concat)
    vec = recir.vector(params["b"].shape[0])
    with recir.trace("two_calls") as m:
        left, right, word, label = (m.input(n, recir.structure())
                                    for n in ("left", "right", "word", "label"))
        root, other = m.input("root", recir.i32), m.input("other", recir.i32)
        p = {k: m.param(k, v) for k, v in params.items()}
        with recir.SubGraph("node", [recir.i32], [vec, recir.f32]) as node:
            (i,) = node.inputs

            def inner():
                (ls, loss_l), (rs, loss_r) = node(left[i]), node(right[i])
                return (*combine(p, (ls,), (rs,)), loss_l + loss_r)

            def with_loss(state, below):
                return state, rf.softmax_xent(p["w_out"] @ state + p["b_out"], label[i]) + below

            node.output(*recir.cond(left[i] < 0, lambda: with_loss(
                leaf(p, rf.gather(p["emb"], word[i]))[0], 0.0), lambda: with_loss(*inner())))
        (h, loss), (_, loss2) = node(root), node(other)
        m.output(h, loss * 2.0 + loss2)
    return m.traced


@pytest.mark.parametrize("threads", [1, 2])
def test_two_calls_of_the_recursive_function_keep_their_own_tapes(threads, runs):
    params = tree_rnn.init_params(np.random.default_rng(8), hidden=16, vocab=100)
    traced = two_calls_model(params)
    trees = make_treebank(6, seed=3)
    batch = [(*tree_args(t), t.left[t.root] if t.left[t.root] >= 0 else t.root)
             for t in trees]
    serial = recir.value_and_grad(traced, threads=1)
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    for args in batch:
        for k, g in serial(*args)[1].items():
            expected[k] += g
    fast = BatchedGradFunction(traced, threads=threads)
    for _ in range(2):  # the second call reuses the lanes
        grads = fast.batch(batch)[1]
        for name in params:
            scale = max(np.abs(expected[name]).max(), 1e-30)
            assert np.abs(grads[name] - expected[name]).max() <= 1e-5 * scale, name
    assert runs == [True] * 4
