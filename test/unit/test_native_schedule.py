"""The frontier schedule's native loops (`passes/schedule_loops.py`): the
expansion in one call equals the depth-by-depth expansion the interpreter's
driver runs (the same native `@expand`, called from Python), its tables grow
while too small, a cycle in a tree is an error and not a hang, and the
height loop checks every range before it reads or writes."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_native import compiled, tree_inputs
from test_invoke_to_frontier import trees
from test_repeat_call import schedule_only

import recir
from recir.backend.native_loops import NativeExpansion
from recir.backend.native_schedule import NativeSchedule
from recir.diagnostics import RecirError
from recir.interpreter.frontier import MAX_DEPTH, Schedule
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn


def batch_for(model) -> list:
    if model is not td_tree_lstm:
        return [tree_inputs(t) for t in trees()]
    xs = np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
    return [(xs[k], d) for k, d in enumerate([0, 1, 3, 6, 2, 4])]


@pytest.fixture(autouse=True)
def through_the_schedule(monkeypatch):
    """These tests look inside the schedule: every call runs it (none is
    repeated on the last call's plans, `repeat_call`)."""
    schedule_only(monkeypatch)


@pytest.fixture
def expansions(monkeypatch):
    """Each batch's (native loop, depth by depth) expansions."""
    found = []
    loop = NativeSchedule.expand

    def both(self, n):
        found.append((loop(self, n), Schedule.expand(self, n)))
        return found[-1][0]

    monkeypatch.setattr(NativeSchedule, "expand", both)
    return found


def assert_same(expansion, reference) -> None:
    (children, stored, levels), (children2, stored2, levels2) = expansion, reference
    assert levels == levels2
    for a, b in zip([*children, *stored], [*children2, *stored2], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm, td_tree_lstm],
                         ids=lambda m: m.__name__.split(".")[-1])
def test_the_expansion_loop_equals_the_depth_by_depth_expansion(model, expansions):
    _, native, _ = compiled(model)
    native.batch(batch_for(model))
    (expansion, reference), = expansions
    assert_same(expansion, reference)
    assert len(reference[2]) > 2  # several depths


def test_tables_too_small_grow_and_the_expansion_is_repeated(expansions, monkeypatch):
    _, native, _ = compiled(tree_lstm)
    monkeypatch.setattr(NativeExpansion, "first_capacity", lambda self, batch, shared: 1)
    outs = native.batch(batch_for(tree_lstm))
    (expansion, reference), = expansions
    assert_same(expansion, reference)
    monkeypatch.undo()
    again = native.batch(batch_for(tree_lstm))
    for (h, loss), (h2, loss2) in zip(outs, again, strict=True):
        np.testing.assert_array_equal(h, h2)
        assert loss == loss2


def test_kept_tables_serve_a_smaller_batch_after_a_larger_one(expansions):
    """The expansion's tables are made once per capacity and kept: a
    smaller batch after a larger one reuses them (rows past its own are
    left from before) and still equals the depth-by-depth expansion."""
    _, native, _ = compiled(tree_lstm)
    batch = batch_for(tree_lstm)
    loop = native.native.loops[native.schedule.expand.root_reference.data]
    kept = None
    for part in (batch, batch[:1], batch[1:3]):
        native.batch(part)
        kept = kept or loop.kept
        expansion, reference = expansions[-1]  # views the next call overwrites
        assert_same(expansion, reference)
    assert loop.kept is kept


def test_the_first_try_is_sized_by_integer_arrays_not_parameters():
    """A parameter's rows (a float embedding) say nothing of the trees."""
    _, native, _ = compiled(tree_lstm)
    loop = native.native.loops[native.schedule.expand.root_reference.data]
    count = len(loop.inputs) - loop.spec.moving
    assert 0 < len(loop.structure) < count  # trees' arrays and parameters
    shared = [np.zeros(300, np.int32) if k in loop.structure else np.zeros((5000, 4), np.float32)
              for k in range(count)]
    assert loop.first_capacity(2, shared) == 2 * 2 + 2 * 300


def test_a_cycle_in_a_tree_is_an_error_not_a_hang():
    """Node 2's left child is itself: the call tree never ends, one more
    invocation per depth, until the depth limit."""
    _, native, _ = compiled(tree_rnn)
    cyclic = tuple(np.array(a, np.int32) for a in ([-1, -1, 2], [-1, -1, 1], [1, 2, 0], [0, 0, 0])) + (2,)
    with pytest.raises(RecirError, match=f"expanded more than {MAX_DEPTH} levels .*cycle.*batching='recursive'"):
        native.batch([cyclic])
    h, _ = native(*tree_inputs(trees()[3]))  # and the next call is fine
    assert h.shape == (4,)


def test_the_height_loop_checks_every_range_before_it_reads_or_writes(monkeypatch):
    """Heights outside the tables, or a range that runs backwards, stop the
    loop with an error instead of touching memory outside the arrays."""
    _, native, _ = compiled(tree_rnn)
    loop = native.native.loops["node__post"]
    calls: list = []
    run = type(loop).__call__
    # the loop called from Python, as before its numbering call runs it
    monkeypatch.setattr(NativeSchedule, "policy", lambda self, *args: (None, None))
    monkeypatch.setattr(type(loop), "__call__",
                        lambda self, *args: calls.append(args) or run(self, *args))
    native.batch([tree_inputs(t) for t in trees()[:3]])
    monkeypatch.undo()
    bounds, inputs, outputs, saved_at, *team, rows, _, _, _ = calls[-1]  # (most, shared, pieces)
    total = int(bounds[-1])
    assert rows == total
    assert all(len(a) >= total for a in outputs)  # kept arrays, with room
    # the schedule's kept arrays cut to the call's rows: every input checked
    cut = [v[:total] if k in loop.kept.owned else v for k, v in enumerate(inputs)]
    for bad in ([0, total + 1], [0, total, total - 1], [-1, total]):
        with pytest.raises(RecirError, match="rows lie outside a frontier table"):
            loop(np.array(bad, np.int64), inputs, outputs, saved_at, *team, rows)
        with pytest.raises(RecirError, match="rows lie outside a frontier table"):
            loop(np.array(bad, np.int64), cut, [o[:total] for o in outputs], saved_at)
    loop(bounds, inputs, outputs, saved_at, *team, rows)  # the recorded call still runs
    with pytest.raises(RecirError, match="kept arrays hold"):
        loop(bounds, inputs, outputs, saved_at, *team, min(len(o) for o in outputs) + 1)


def height_loop_ops(saved: int, team: bool) -> int:
    """The ops of the height loop of a function over rows with two sliced
    inputs, `saved` inputs a `_fwd` saved, a table output and `saved`
    saved outputs."""
    from xdsl.dialects import llvm

    from recir.passes.schedule_loops import SAVED, SLICE, TABLE, Operand, height_loop

    function = llvm.FuncOp("f", llvm.LLVMFunctionType([]), llvm.LinkageAttr("external"))
    inputs = [Operand(SLICE, 16), Operand(SLICE, 600), *[Operand(SAVED, 600)] * saved]
    outputs = [Operand(TABLE, 600), *[Operand(SAVED, 600)] * saved]
    built = height_loop(function, inputs, outputs, False, [], team=team)
    return sum(1 for op in built for _ in op.walk())


@pytest.mark.parametrize("team", [False, True])
def test_a_height_loops_code_does_not_grow_with_its_saved_values(team):
    """Every saved value, in or out, takes the same steps (a table record
    of constants): twelve more of each add only their arguments to the
    call (an address in the array of descriptors each), not their steps."""
    more = height_loop_ops(14, team) - height_loop_ops(2, team)
    assert more <= 2 * 2 * 12, more  # a constant and an address each


def test_a_gradients_height_loops_check_saved_rows_and_every_output(monkeypatch):
    """The `_fwd`'s outputs (tables and saved values) and the `_bwd`'s
    saved inputs are checked against their arrays like the slices: an
    output array shorter than a height's rows, or a saved value's rows
    placed past its buffer, is an error, and nothing past the arrays'
    ends is written."""
    from recir.backend.native_loops import HeightLoop

    params = tree_lstm.init_params(np.random.default_rng(0), hidden=4, vocab=100)
    grad = recir.value_and_grad(tree_lstm.trace_model(params), batching="frontier")
    calls: dict[str, tuple] = {}
    run = HeightLoop.__call__

    def recorded(self, *args):
        calls.setdefault(self.native.name, args)
        return run(self, *args)

    monkeypatch.setattr(HeightLoop, "__call__", recorded)
    grad.batch([tree_inputs(t) for t in trees()[:4]])
    monkeypatch.undo()
    loops = grad.native.loops
    (bounds, inputs, outputs, saved_at, *team), forward = calls["node__post_fwd"], \
        loops["node__post_fwd"]
    kinds = [o.kind for o in forward.outputs]
    assert "table" in kinds and kinds.count("saved") > 4
    # the kept arrays cut to the call's rows, every input and output checked
    total, threads_split_groups = int(bounds[-1]), team[:3]
    cut = [v[:total] if k in forward.kept.owned else v for k, v in enumerate(inputs)]
    short_rows = int(bounds[1]) - 1  # one short of the first height's
    for j in range(len(outputs)):  # some saved values have no rows at some heights
        short = [o[:total].copy() for o in outputs]
        padded = np.full((len(short[j]) + 3, *short[j].shape[1:]), np.nan, np.float32)
        short[j] = padded[:short_rows]
        with pytest.raises(RecirError, match="rows lie outside a frontier table"):
            forward(bounds, cut, short, saved_at.copy(), *threads_split_groups)
        assert np.isnan(padded[short_rows:]).all(), f"wrote past output {j}"
    (bounds, inputs, outputs, saved_at, *team), backward = calls["node__post_bwd"], \
        loops["node__post_bwd"]
    # (height, first row, count): past the end; before the start; a negative
    # count; a range whose end wraps around
    for row, start, count in ((-1, None, 10 ** 6), (0, -1, None), (-1, None, -1),
                              (-1, 2 ** 62, 2 ** 62)):
        moved = saved_at.copy()
        for field, value in enumerate((start, count)):
            if value is not None:
                moved[row, 0, -1, field] = value
        with pytest.raises(RecirError, match="rows lie outside a frontier table"):
            backward(bounds, inputs, outputs, moved, *team)
    backward(bounds, inputs, outputs, saved_at, *team)  # the recorded call still runs


@pytest.mark.parametrize("model", [tree_rnn, tree_lstm], ids=lambda m: m.__name__.split(".")[-1])
def test_the_expansion_finds_each_invocations_tree(model, monkeypatch):
    """Each row's root row, written by the expansion with its row, equals
    pointer jumping over its children (`test_height_groups.tree_of`), also after
    the tables grew and the expansion was repeated."""
    from test_height_groups import tree_of

    _, native, _ = compiled(model)
    found = []
    renumber = NativeSchedule.renumber

    def kept(self, children, stored, levels):
        found.append((self.trees.copy(), [c.copy() for c in children], levels[-1][1]))
        return renumber(self, children, stored, levels)

    monkeypatch.setattr(NativeSchedule, "renumber", kept)
    native.batch(batch_for(model))
    monkeypatch.setattr(NativeExpansion, "first_capacity", lambda self, batch, shared: 1)
    native.batch(batch_for(model))
    assert len(found) == 2
    for rows_tree, children, total in found:
        np.testing.assert_array_equal(rows_tree, tree_of(children, total))
        assert len(set(rows_tree.tolist())) == len(batch_for(model))


@pytest.mark.parametrize("model", [tree_rnn, td_tree_lstm],
                         ids=lambda m: m.__name__.split(".")[-1])
def test_the_native_height_order_is_the_interpreters(model, monkeypatch):
    """The height order the kernel makes (`kernels/height_order.py`, from
    the expansion's heights) against the interpreter's own (`Schedule`:
    heights found from the children, NumPy's stable argsort; by groups of
    trees `test_height_groups.grouped`'s): the same places, children, stored
    rows and bounds, on a batch and a larger one after it (the kept tables
    grown)."""
    from test_height_groups import grouped, tree_of

    from recir.backend.native_loops import row_tile

    checked = []
    renumber = NativeSchedule.renumber

    def compared(self, children, stored, levels):
        renumber(self, children, stored, levels)
        total = levels[-1][1]
        perm, bounds = Schedule.height_order(self, children, levels, total)
        if self.groups is not None:  # by (height, group): NumPy's order, as it was
            height = np.empty(total, np.int64)
            height[perm] = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
            perm, table = grouped(height, np.bincount(height), tree_of(children, total),
                                  self.team_threads(), row_tile())
            np.testing.assert_array_equal(self.groups, table)
        inv = np.empty(total + 1, np.int32)
        inv[perm] = np.arange(total, dtype=np.int32)
        inv[total] = -1
        np.testing.assert_array_equal(self.inv, inv[:total])
        np.testing.assert_array_equal(self.bounds, bounds)
        for got, c in zip(self.children, children, strict=True):
            np.testing.assert_array_equal(got, inv.take(c[perm], mode="wrap"))
        for got, s in zip(self.stored, stored, strict=True):
            np.testing.assert_array_equal(got, s[perm])
        checked.append(total)

    monkeypatch.setattr(NativeSchedule, "renumber", compared)
    _, native, _ = compiled(model)
    native.batch(batch_for(model)[:2])
    native.batch(batch_for(model))
    assert len(checked) == 2 and checked[0] < checked[1]


def test_the_expansion_and_the_order_are_one_native_call(monkeypatch):
    """The height order runs in the expansion's native call (`kernels/
    numbering`), never from Python, on one thread and on a team by groups,
    and the outputs stay the recursive code's; its plan's tables are
    checked once, when made: a table short of the capacity is an error."""
    from recir.backend import native_schedule
    from recir.backend.kernels.height_order_calls import HeightOrder
    from recir.backend.kernels.numbering import numbering_kernel

    calls: list[int] = []
    monkeypatch.setattr(HeightOrder, "run", lambda *args: pytest.fail("ordered from Python"))
    monkeypatch.setattr(native_schedule, "numbering_kernel", lambda folder=None: lambda *args: (
        calls.append(1), numbering_kernel()(*args)))
    traced, native, recursive = compiled(tree_rnn)
    team = recir.compile(traced, batching="frontier", threads=2)
    batch = batch_for(tree_rnn)
    for function in (native, team):
        for got, item in zip(function.batch(batch), batch, strict=True):
            np.testing.assert_allclose(got[0], recursive(*item)[0], rtol=1e-4, atol=1e-5)
    assert len(calls) == 2  # one a batch: the tables had room
    kernel = HeightOrder(1, [])
    rows = np.zeros(8, np.int64)
    inverse, short = np.zeros(9, np.int32), np.zeros(7, np.int32)
    with pytest.raises(RecirError, match="tables do not hold its rows"):
        kernel.kept_plan(8, 4, 0, 8, rows, rows, inverse, [rows], [short], [], [])
    with pytest.raises(RecirError, match="groups do not hold its rows"):
        kernel.kept_plan(8, 4, 2, 8, rows, rows[:7], inverse, [rows], [short], [], [])
    assert kernel.kept_plan(8, 4, 2, 8, rows, rows, inverse, [rows], [np.zeros(8, np.int32)],
                            [], [])[1] == 8  # keys: levels x team
