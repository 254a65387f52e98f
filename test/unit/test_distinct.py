"""Products of gathered rows on their distinct indices (`batching/distinct.py`):
the pieces against plain Python; whole calls are checked against the
Python loop in `test_native_post.py` (the `distinct` cases)."""

from __future__ import annotations

import numpy as np
import pytest

from recir.backend.kernels import split
from recir.batching import distinct
from recir.batching.api import BatchedFunction
from recir.batching.kernels import PerRoot
from recir.data import make_treebank
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.models import tree_lstm


class FakeOp:
    def __init__(self, kind, ins, outs):
        self.kind, self.ins, self.outs = kind, ins, outs


def test_find_takes_a_gather_whose_only_use_is_a_product():
    pick = FakeOp("pick", (1, 2), (3,))
    gather = FakeOp("gather", (4, 3), (5,))
    product = FakeOp("product", (6, 5), (7,))
    pair = distinct.find([pick, gather, product], [7], {})
    assert (pair.pick, pair.gather, pair.product) == (pick, gather, product)
    assert distinct.find([pick, gather, product], [5, 7], {}) is None  # also yielded
    assert distinct.find([pick, gather, product, FakeOp("rows", (5,), (8,))], [7], {}) is None
    assert distinct.find([pick, gather, product], [7], {5: (9, 0)}) is None  # a concat's columns
    stored = distinct.find([FakeOp("gather", (4, 2), (5,)), product], [7], {})
    assert stored is not None and stored.pick is None  # indices stored by the expansion


def test_indices_read_the_structure_arrays_like_plain_python():
    words = [np.array([5, 6, 7], np.int32), np.array([8, 9], np.int32)]
    tree = PerRoot.ragged(words)
    roots = np.array([0, 1, 0, 1, 0], np.int64)
    at = np.array([2, 1, 0, 0, 1], np.int32)
    pair = distinct.Pair(FakeOp("gather", (4, 3), (5,)), None, FakeOp("pick", (1, 2), (3,)))
    found = distinct.indices(pair, {2: at}, tree, roots, 1, 5)
    assert found.tolist() == [words[r][i] for r, i in zip(roots[1:5], at[1:5], strict=True)]
    assert distinct.indices(pair, {}, tree, roots, 0, 5) is None  # not known before the run
    at[3] = 2  # past tree 1's two words: the run's own check reports it
    assert distinct.indices(pair, {2: at}, tree, roots, 0, 5) is None


def test_plan_keeps_only_heights_that_save_work(monkeypatch):
    pair = distinct.Pair(None, None, None)
    index = np.array([3, 1, 3, 3, 1, 2], np.int32)
    found = distinct.plan(pair, index, 40, table_rows=4, saved_per_row=distinct.MIN_SAVED)
    assert found.values.tolist() == [1, 2, 3] and found.lo == 40 and found.n == 6
    assert np.array_equal(found.values[found.inverse], index)
    assert distinct.plan(pair, index, 0, 4, distinct.MIN_SAVED // 4) is None  # 3 rows saved
    assert distinct.plan(pair, index, 0, 3, distinct.MIN_SAVED) is None  # index 3 of 3 rows
    assert distinct.plan(pair, None, 0, 4, distinct.MIN_SAVED) is None


def test_without_cuts_the_distinct_heights_out_of_runs():
    class Height:
        def __init__(self, n):
            self.n = n

    runs = [(0, 0, 10), (1, 10, 30), (0, 30, 35)]
    heights = {0: Height(4), 14: Height(6), 30: Height(5)}
    kept = distinct.without(runs, heights)
    rows = {(k, r) for k, lo, hi in kept for r in range(lo, hi)}
    skipped = {r for lo, h in heights.items() for r in range(lo, lo + h.n)}
    assert rows == {(k, r) for k, lo, hi in runs for r in range(lo, hi) if r not in skipped}


@pytest.mark.skipif(not split.available(), reason="needs libgomp and CBLAS")
def test_a_word_past_the_embedding_is_still_the_located_error(monkeypatch):
    monkeypatch.setattr(distinct, "MIN_SAVED", 0)
    params = tree_lstm.init_params(np.random.default_rng(0), vocab=100)
    batched = BatchedFunction(tree_lstm.trace_model(params), threads=2)
    good = make_treebank(2, seed=5)
    bad = Tree(left=good[1].left, right=good[1].right, word=np.full_like(good[1].word, 100),
               label=good[1].label)
    args = [(t.left, t.right, t.word, t.label, t.root) for t in (good[0], bad)]
    with pytest.raises(RecirError, match=r"tree_common.py:\d+:\d+: error: .*out of range"):
        batched.batch(args)
