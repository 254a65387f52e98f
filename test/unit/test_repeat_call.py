"""A frontier call after the first writes its inputs into the last call's
plans and makes the same native call (`backend/repeat_call.py`). Repeated
calls of other trees and sizes equal the interpreter, on one thread and on
a team; a batch the kept tables cannot hold, and one whose trees fail in
native code, go through the schedule, which grows the tables or raises as
it always did, and the calls after them are repeats again."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_native import tree_inputs
from test_frontier_products import batch

import recir
from recir.backend import repeat_call
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.models import tree_lstm


@pytest.fixture
def repeats(monkeypatch):
    """Per call of `RepeatCall.repeat`: whether it made the call."""
    made: list[bool] = []
    repeat = repeat_call.RepeatCall.repeat

    def counted(self, *args):
        found = repeat(self, *args)
        made.append(found is not None)
        return found

    monkeypatch.setattr(repeat_call.RepeatCall, "repeat", counted)
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
        with pytest.raises(RecirError, match=r"index out of range \(at run time, in native "):
            native.batch([good[0], tree_inputs(bad)])
    assert repeats == [True, False] and native.again is None
    assert_as_interpreter(traced, native.batch(good), good)
    assert_as_interpreter(traced, native.batch(good[2:]), good[2:])
    assert repeats[-1] is True
