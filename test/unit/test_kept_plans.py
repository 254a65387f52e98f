"""A frontier function keeps its schedule's arrays and its height loops'
plans between calls (`backend/kept_plans.py`). Batches of growing and
shrinking sizes back to back, and two functions' calls interleaved, each
equal the interpreter (outputs) and a NumPy TreeRNN (gradients); what a
call returns stays as it was through later calls; a kept plan checks the
arrays it keeps and refuses more rows than they hold."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_native import compiled, tree_inputs
from test_frontier_products import HIDDEN, assert_numpy_gradients, batch

import recir
from recir.backend import native_schedule
from recir.backend.kept_plans import KeptPlan, KeptRows
from recir.diagnostics import RecirError
from recir.interpreter.frontier import dtype_of, row_shape
from recir.models import tree_lstm, tree_rnn

# sizes back to back: small, smaller, all (the kept arrays grow), fewer again
PARTS = [(2, 4), (0, 1), (0, None), (1, 3), (3, None)]


def test_batches_of_other_sizes_back_to_back_equal_the_interpreter():
    traced, native, _ = compiled(tree_lstm)
    items = [tree_inputs(t) for t in batch()]
    loop = native.native.loops["node__post"]
    returned = []
    capacities = []
    for lo, hi in PARTS:
        outs = native.batch(items[lo:hi])
        for (h, loss), item in zip(outs, items[lo:hi], strict=True):
            want_h, want_loss = traced.run(*item)
            np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
            assert loss == pytest.approx(want_loss, rel=1e-5)
        returned.append((outs, [(h.copy(), loss) for h, loss in outs]))
        capacities.append(loop.kept.capacity)
    # grown for the largest batch (to the expansion's capacity once the numbering
    # call runs the loop), then kept
    assert capacities == sorted(capacities) and capacities[2] == capacities[-1]
    for outs, copies in returned:  # no later call wrote into an earlier call's results
        for (h, loss), (h0, loss0) in zip(outs, copies, strict=True):
            np.testing.assert_array_equal(h, h0)
            assert loss == loss0


def test_two_functions_interleaved_equal_numpy_gradients():
    """Two gradient functions (other weights) and an inference function,
    called in turn with batches of other sizes: each call's gradients are
    its own batch's, its outputs its own trees'."""
    trees = batch()
    functions = []
    for seed in (21, 22):
        params = tree_rnn.init_params(np.random.default_rng(seed), hidden=HIDDEN, vocab=100)
        traced = tree_rnn.trace_model(params)
        functions.append((params, traced, recir.value_and_grad(traced, batching="frontier"),
                          recir.compile(traced, batching="frontier")))
    returned = []
    for lo, hi in PARTS:
        part = trees[lo:hi]
        items = [tree_inputs(t) for t in part]
        for params, traced, grad, infer in functions:
            got = {k: np.zeros_like(v) for k, v in params.items()}
            outs, _ = grad.batch(items, got)
            returned.append((outs, [h.copy() for h, _ in outs]))
            assert_numpy_gradients(params, got, part)
            for (h, loss), (h2, loss2), item in zip(outs, infer.batch(items), items,
                                                     strict=True):
                want_h, want_loss = traced.run(*item)  # its products summed otherwise
                np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
                np.testing.assert_array_equal(h, h2)
                assert loss == pytest.approx(want_loss, rel=1e-4)
                assert loss == loss2
    for outs, copies in returned:  # as they were returned
        for (h, _), h0 in zip(outs, copies, strict=True):
            np.testing.assert_array_equal(h, h0)


def test_a_kept_plan_checks_its_arrays_and_their_rows():
    """An owned array of another dtype or row shape is refused when the
    plan takes it; a call of more rows than the kept arrays hold too."""
    _, native, _ = compiled(tree_rnn)
    native.batch([tree_inputs(t) for t in batch()[:3]])
    loop = native.native.loops["node__post"]
    plan = KeptPlan(loop, loop.kept.header, loop.kept.owned, loop.kept.shared)
    inputs: list = [None] * len(loop.inputs)  # the shared ones: their fields given
    for k in plan.owned:
        _, dtype, shape = loop.native.kinds[k]
        inputs[k] = np.zeros((5, *shape), dtype)
    outputs = [np.zeros((5, *row_shape(t)), dtype_of(t)) for t in loop.native.outputs]
    shared = np.zeros(2 * len(plan.shared), np.int64)
    first = plan.owned[0]
    plan.fill(loop, inputs, outputs, 5, [], shared)
    for wrong in (inputs[first].astype(np.float64), np.zeros((5, 3), inputs[first].dtype)):
        with pytest.raises(RecirError, match="keeps rows of"):
            plan.fill(loop, [*inputs[:first], wrong, *inputs[first + 1:]], outputs, 5, [],
                      shared)
        assert plan.arrays is None  # half placed: placed again by the next call
    filled = plan.fill(loop, inputs, outputs, 5, [], shared)
    assert plan.capacity == 5
    assert (filled[plan.rows_at] == 5).all()
    assert filled[plan.header + 2 * first + 1] == inputs[first].ctypes.data
    with pytest.raises(RecirError, match="kept arrays hold 5 rows, not 6"):
        plan.fill(loop, inputs, outputs, 6, [], shared)


def test_kept_rows_grow_by_a_quarter_at_least_and_keep_their_arrays_otherwise():
    rows = KeptRows([(np.dtype(np.float32), (3,)), (np.dtype(np.int32), ())])
    first = rows.at_least(10)
    assert [a.shape for a in first] == [(10, 3), (10,)]
    assert rows.at_least(4) is first
    assert rows.at_least(10) is first
    grown = rows.at_least(11)
    assert [a.shape for a in grown] == [(12, 3), (12,)]
    assert grown[0].dtype == np.float32
    assert [a.shape for a in rows.at_least(100)] == [(100, 3), (100,)]


def test_kept_rows_that_fail_to_grow_keep_their_count():
    """A growth that fails (too little memory, Ctrl-C) leaves the arrays and
    the count of rows they hold as they were: a later call grows them
    again, not takes the small ones for large ones."""
    rows = KeptRows([(np.dtype(np.float32), (3,))])
    rows.at_least(4)
    with pytest.raises(MemoryError):
        rows.at_least(2**55)  # 2**55 rows of 12 bytes: more than any address space
    assert rows.capacity == 4
    assert len(rows.at_least(8)[0]) >= 8


def test_a_call_stopped_while_its_loop_is_first_planned_leaves_no_half_plan(monkeypatch):
    """Ctrl-C between a loop's layouts and its kept plan, on its first call:
    the next call plans it again and equals the interpreter."""
    traced, native, _ = compiled(tree_rnn)
    loop = native.native.loops["node__post"]
    loop.layouts = loop.kept = native.again = None  # as a function that has not run yet
    made = native_schedule.KeptPlan

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(native_schedule, "KeptPlan", made)
        raise KeyboardInterrupt

    monkeypatch.setattr(native_schedule, "KeptPlan", interrupted)
    items = [tree_inputs(t) for t in batch()[:3]]
    with pytest.raises(KeyboardInterrupt):
        native.batch(items)
    for got, item in zip(native.batch(items), items, strict=True):
        for value, want in zip(got, traced.run(*item), strict=True):
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
