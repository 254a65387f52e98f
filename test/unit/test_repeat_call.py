"""A frontier call after the first writes its inputs into the last call's
plans and makes the same native call (`backend/repeat_call.py`). Repeated
calls of other trees and sizes equal the interpreter (outputs) and a NumPy
TreeRNN (gradients), on one thread and on a team; a batch the kept tables
cannot hold, and one whose trees fail in native code, go through the
schedule, which grows the tables or raises as it always did, and the calls
after them are repeats again."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_native import tree_inputs
from test_frontier_products import assert_numpy_gradients, batch

import recir
from recir.backend import repeat_call
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.models import tree_lstm, tree_rnn


def schedule_only(monkeypatch) -> None:
    """Every frontier call through its schedule, none repeated: for tests
    that look inside the schedule."""
    monkeypatch.setattr(repeat_call.RepeatCall, "repeat", lambda self, *args: None)
    monkeypatch.setattr(repeat_call.RepeatGradient, "repeat_gradient", lambda self, *args: None)


@pytest.fixture
def repeats(monkeypatch):
    """Per repeat tried (of an inference or a gradient): whether it made the call."""
    made: list[bool] = []
    for cls, name in ((repeat_call.RepeatCall, "repeat"),
                      (repeat_call.RepeatGradient, "repeat_gradient")):
        def counted(self, *args, repeat=getattr(cls, name)):
            found = repeat(self, *args)
            made.append(found is not None)
            return found

        monkeypatch.setattr(cls, name, counted)
    return made


def model(threads: int):
    params = tree_lstm.init_params(np.random.default_rng(4), hidden=8, vocab=100)
    traced = tree_lstm.trace_model(params)
    return traced, recir.compile(traced, batching="frontier", threads=threads)


def assert_as_interpreter(traced, outs, items) -> None:
    for (h, loss), item in zip(outs, items, strict=True):
        want_h, want_loss = traced.run(*item)
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(want_loss, rel=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_repeated_calls_of_other_trees_equal_the_interpreter(threads, repeats):
    traced, native = model(threads)
    items = [tree_inputs(t) for t in batch()]
    parts = [items[:4], items[4:], items[1:3], items[:1], items[2:7], items[5:]]
    returned = []
    for part in parts * 2:
        outs = native.batch(part)
        assert_as_interpreter(traced, outs, part)
        returned.append((outs, [h.copy() for h, _ in outs]))
    assert sum(repeats) >= len(parts)  # (the tables grow at first: those go through the schedule)
    assert repeats[-len(parts):] == [True] * len(parts)
    for outs, copies in returned:  # what a repeat returns is the caller's own
        for (h, _), h0 in zip(outs, copies, strict=True):
            np.testing.assert_array_equal(h, h0)


def test_a_batch_beyond_the_kept_tables_goes_through_the_schedule(repeats):
    traced, native = model(1)
    items = [tree_inputs(t) for t in batch()]
    for _ in range(3):  # the loop's first call from Python, its second in the numbering call
        native.batch(items[:2])
    assert repeats == [True]
    capacity = native.again.capacity
    many = items * 40  # more rows than the tables the small calls made
    outs = native.batch(many)
    assert repeats[-1] is False
    assert_as_interpreter(traced, outs[:len(items)], items)
    for part in (many[3:], many[1:]):  # its plans made in the numbering call, then repeated
        assert_as_interpreter(traced, native.batch(part), part)
    assert repeats[-1] is True and native.again.capacity > capacity


def test_a_batch_that_fails_natively_raises_as_the_schedule_does(repeats):
    traced, native = model(2)
    good = [tree_inputs(t) for t in batch()]
    bad = Tree(left=[-1, -1, 0], right=[-1, -1, 9], word=[0, 1, 2], label=[0, 1, 2])
    for _ in range(3):
        native.batch(good)
    for _ in range(2):
        with pytest.raises(RecirError, match=r"index 9 out of range for length 3 \(at run time, in native "
                                             r".* \(batch element 1\)$"):
            native.batch([good[0], tree_inputs(bad)])
    # a repeat, then the schedule, which raised; then each element alone (to
    # name the one at fault), the bad one last
    assert repeats[:2] == [True, False] and native.again is None
    assert_as_interpreter(traced, native.batch(good), good)
    assert_as_interpreter(traced, native.batch(good[2:]), good[2:])
    assert repeats[-1] is True


@pytest.mark.parametrize("threads", [1, 2])
def test_repeated_gradients_of_other_trees_equal_numpy(threads, repeats):
    params = tree_rnn.init_params(np.random.default_rng(6), hidden=8, vocab=100)
    grad = recir.value_and_grad(tree_rnn.trace_model(params), batching="frontier",
                                threads=threads)
    trees = batch()
    parts = [trees[:4], trees[4:], trees[1:3], trees[:1], trees[2:7], trees[5:]]
    for part in parts * 2:
        got = {k: np.zeros_like(v) for k, v in params.items()}
        grad.batch([tree_inputs(t) for t in part], got)
        assert_numpy_gradients(params, got, part)
    assert repeats[-len(parts):] == [True] * len(parts)
    _, fresh = grad.batch([tree_inputs(t) for t in parts[1]])  # no buffers given: zeroed ones
    assert repeats[-1] is True
    assert_numpy_gradients(params, fresh, parts[1])


def test_a_gradient_that_fails_natively_leaves_its_tables_to_the_schedule(repeats):
    """A repeat whose loop fails goes through the schedule, which raises;
    the gradient tables a failed call may leave written (a `_bwd` stopped
    half-way) are zeroed before the next call: its gradients are NumPy's."""
    params = tree_rnn.init_params(np.random.default_rng(7), hidden=8, vocab=100)
    grad = recir.value_and_grad(tree_rnn.trace_model(params), batching="frontier", threads=2)
    trees = batch()
    bad = Tree(left=[-1, -1, 0], right=[-1, -1, 1], word=[0, 100, 2], label=[0, 1, 2])
    for _ in range(3):
        grad.batch([tree_inputs(t) for t in trees])
    with pytest.raises(RecirError, match=r"index 100 out of range for length 100 \(at run time, in native @node__post"
                                         r".* \(batch element 9\)$"):
        grad.batch([*map(tree_inputs, trees), tree_inputs(bad)])  # (a word past the vocabulary)
    assert repeats[:2] == [True, False] and grad.again is None
    for part in (trees, trees[3:], trees[1:]):
        got = {k: np.zeros_like(v) for k, v in params.items()}
        grad.batch([tree_inputs(t) for t in part], got)
        assert_numpy_gradients(params, got, part)
    assert repeats[-1] is True
