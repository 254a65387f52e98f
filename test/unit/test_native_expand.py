"""The expand segment as one native loop (`native_expand.py`): its call trees,
children and stored values against the interpreter's, results against plain
Python, growth past its first capacity, a cycle in a tree as an error on
both paths, bad structure indices as the interpreter's located errors, and
the segments left to the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.batching import schedule
from recir.batching.api import BatchedFunction
from recir.batching.schedule import Schedule
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from test_native_post import mixed_trees, tree_args  # the same trees

TREE_MODELS = [tree_rnn, rntn, tree_lstm]


class Interpreter:
    """Stands in for a NativeExpand that does not apply."""

    ok = False


@pytest.fixture
def expansions(monkeypatch):
    """Each call's expansion as {(root, moving arguments): (children's keys per
    site, stored values)}: independent of how invocations are numbered."""
    found = []
    real = Schedule.order_by_height

    def record(self):
        roots = np.concatenate(self.root_chunks)
        stored = {v: np.concatenate(c) for v, c in self.stored_chunks.items()}
        moving = [a for a, p in zip(self.plan.rec.body.block.args, self.plan.passthrough,
                                    strict=True) if not p]
        key = [(int(roots[i]), *(int(stored[a][i]) for a in moving))
               for i in range(self.total)]
        children = [np.concatenate(c) for c in self.child_chunks]
        found.append({key[i]: (tuple(key[c[i]] if c[i] >= 0 else None for c in children),
                               tuple(stored[v][i].item() for v in stored))
                      for i in range(self.total)})
        real(self)

    monkeypatch.setattr(Schedule, "order_by_height", record)
    return found


@pytest.mark.parametrize("model", TREE_MODELS, ids=lambda m: m.__name__.split(".")[-1])
def test_call_tree_and_stored_values_match_the_interpreter(model, expansions):
    params = model.init_params(np.random.default_rng(0), vocab=100)
    batched = BatchedFunction(model.trace_model(params))
    assert batched.runner.native_expand() is not None
    batch = mixed_trees()
    fast = batched.batch(batch)
    batched.runner.fast_expand = Interpreter()
    slow = batched.batch(batch)
    native, interpreted = expansions
    assert native == interpreted
    assert len(native) == sum(len(args[0]) for args in batch)  # every node, once
    for (h, loss), (h2, loss2) in zip(fast, slow, strict=True):
        # rows in another order: the products may round differently
        np.testing.assert_allclose(h, h2, rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(loss2, rel=1e-5)


def test_capacity_grows_and_results_stay(expansions):
    params = tree_lstm.init_params(np.random.default_rng(1), vocab=100)
    batched = BatchedFunction(tree_lstm.trace_model(params))
    batch = mixed_trees()
    expected = batched.batch(batch)
    fast = batched.runner.native_expand()
    fast.capacity = 2
    again = batched.batch(batch)
    assert fast.capacity >= 2 * len(expansions[-1]) and expansions[-1] == expansions[0]
    for (h, loss), (h2, loss2) in zip(expected, again, strict=True):
        np.testing.assert_array_equal(h, h2)
        assert loss == loss2


@pytest.mark.parametrize("native", [True, False], ids=["native", "interpreter"])
def test_a_cycle_in_a_tree_is_an_error_not_a_hang(native, monkeypatch):
    """Node 2's left child is itself: the call tree never ends. Natively the
    tables stop growing at `MAX_INVOCATIONS`; the interpreter stops after
    `MAX_DEPTH` levels (made small here: every level costs interpreter time)."""
    monkeypatch.setattr(schedule, "MAX_DEPTH", 50)
    params = tree_rnn.init_params(np.random.default_rng(2), vocab=100)
    batched = BatchedFunction(tree_rnn.trace_model(params))
    if not native:
        batched.runner.fast_expand = Interpreter()
    cyclic = (np.array([-1, -1, 2]), np.array([-1, -1, 1]), np.array([1, 2, 0]),
              np.array([0, 0, 0]), 2)
    limit = "4194304 invocations" if native else "50 levels"
    with pytest.raises(RecirError, match=f"expanded more than {limit} .*cycle"):
        batched(*cyclic)
    tree = make_treebank(1, seed=4)[0]
    h, loss = batched(*tree_args(tree))  # and the next call is fine
    assert loss == pytest.approx(tree_rnn.reference(tree, tree.root, params)[1], rel=1e-5)
    if native:
        assert batched.runner.native_expand().capacity < 4 * tree.num_nodes + 4096


@pytest.mark.parametrize("child", [99, -7])
def test_bad_child_index_is_the_interpreters_located_error(child):
    """A child index past a tree's arrays: the native loop flags it and the
    interpreter raises at the model's line; the next batch is fine."""
    params = tree_rnn.init_params(np.random.default_rng(3), vocab=100)
    batched = BatchedFunction(tree_rnn.trace_model(params))
    tree = make_treebank(1, seed=5)[0]
    left, right = np.array(tree.left), np.array(tree.right)
    # a negative left child is the model's leaf test: a bad one goes on the right
    (left if child > 0 else right)[tree.root] = child
    bad = (left, right, tree.word, tree.label, tree.root)
    with pytest.raises(RecirError, match=r"tree_common.py:\d+:\d+: error: .*index -?\d+ out "
                                         "of range"):
        batched.batch([tree_args(tree), bad])
    h, loss = batched(*tree_args(tree))
    assert loss == pytest.approx(tree_rnn.reference(tree, tree.root, params)[1], rel=1e-5)


def test_top_down_tree_lstm_keeps_the_interpreter():
    params = td_tree_lstm.init_params(np.random.default_rng(4))
    batched = BatchedFunction(td_tree_lstm.trace_model(params))
    assert batched.runner.native_expand() is None


def branching_model():
    """g(i) = i < 1 ? 1 : g(i > 5 ? i - 2 : i - 1) + g(i * 2 - i - 1): an
    invoke argument chosen by a branch (a phi in the native loop) and
    arithmetic on the argument."""
    with recir.trace("branching") as m:
        n = m.input("n", recir.i32)
        with recir.SubGraph("g", [recir.i32], [recir.i32]) as g:
            (i,) = g.inputs
            g.output(recir.cond(i < 1, lambda: i * 0 + 1, lambda: g(
                recir.cond(i > 5, lambda: i - 2, lambda: i - 1)) + g(i * 2 - i - 1)))
        m.output(g(n))
    return m.traced


def plain_g(i: int) -> int:
    return 1 if i < 1 else plain_g(i - 2 if i > 5 else i - 1) + plain_g(i - 1)


def test_integer_recursion_with_a_branch_argument_matches_plain_python():
    batched = BatchedFunction(branching_model())
    assert batched.runner.native_expand() is not None
    ns = [0, 1, 3, 6, 9, 12]
    assert [int(out[0]) for out in batched.batch([(n,) for n in ns])] == [plain_g(n) for n in ns]


def chain_model():
    """c(i) = i + 1 < size(a) ? c(i + 1) + a[i] : a[i]: the predicate reads
    a per-tree array's size."""
    with recir.trace("chain") as m:
        a = m.input("a", recir.structure())
        start = m.input("start", recir.i32)
        with recir.SubGraph("c", [recir.i32], [recir.i32]) as c:
            (i,) = c.inputs
            c.output(recir.cond(i + 1 < rf.size(a), lambda: c(i + 1) + a[i], lambda: a[i]))
        m.output(c(start))
    return m.traced


def test_a_structure_arrays_size_in_the_expand_segment_matches_plain_python():
    batched = BatchedFunction(chain_model())
    assert batched.runner.native_expand() is not None
    rng = np.random.default_rng(6)
    arrays = [rng.integers(-9, 9, size=n).astype(np.int32) for n in (1, 2, 7, 40)]
    batch = [(a, s) for a in arrays for s in (0, len(a) - 1)]
    assert [int(out[0]) for out in batched.batch(batch)] == [int(a[s:].sum()) for a, s in batch]
