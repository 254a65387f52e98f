"""`recir_height_policy` (`backend/kernels/height_policy.py`) against the
Python policy it computes: `renumber`'s bounds, `group_table`,
`in_blocks`, `HeightLoop.team_size` and `most_rows`, over random heights
and groups, teams of 1 to 4, costs where the team pays and where it does
not; and whole calls, whose numbering call chooses so and runs the loop
(`kernels/height_call`), against the Python path."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from recir.backend.height_groups import group_table
from recir.backend.kernels import height_order as order
from recir.backend.kernels import height_policy as policy
from recir.backend.native_loops import HeightLoop, most_rows
from recir.backend.native_schedule import in_blocks
from recir.backend.policy import Costs


def fake_loop(threads: int, row_work: int, copied: int, team_s: float) -> SimpleNamespace:
    costs = Costs(unit_s=1e-9, task_s=1e-6, team_s=team_s, share=0.9, warm_team_s=2e-6,
                  frontier_call_s=1e-4, height_s=5e-7, row_s=5e-8, l3_slowdown=2.0)
    return SimpleNamespace(threads=threads, spec=SimpleNamespace(
        costs=costs, row_work=row_work, copied_elements=copied))


def reference(starts: np.ndarray, team: int, fields: dict, by_groups: bool, depths: int,
              loop: SimpleNamespace, backward: SimpleNamespace | None, tile: int, block: int):
    """What `renumber` and `post` choose, in Python."""
    groups = None
    if team < 2:
        bounds = np.unique(starts[:fields["used"] + 1])
    else:
        found = starts[:fields["tallest"] * team + 1]
        bounds = found[::team].copy()
        if fields["grouped"] and by_groups and depths > 1:
            groups = group_table(found, team)
        elif fields["gaps"]:
            bounds = np.unique(bounds)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("recir.backend.native_loops.row_tile", lambda: tile)
        if groups is not None:
            chosen = HeightLoop.team_size(loop, bounds, backward, fields["largest"])
            if chosen[0] > 1:
                return bounds, chosen, max(fields["most"], 1), groups, None
        bounds, pieces = in_blocks(bounds, block)
        chosen = HeightLoop.team_size(loop, bounds, backward)
    if pieces is None:  # the native policy writes a whole height's piece alike
        pieces = np.array([(lo, hi - lo, 0, 1) for lo, hi in zip(
            bounds[:-1].tolist(), bounds[1:].tolist())], np.int64).reshape(-1, 4)
    return bounds, chosen, most_rows(bounds, *chosen, None), None, pieces


def run_policy(starts, team, fields, by_groups, depths, loop, backward, tile, block):
    rows, levels = int(starts[-1]), len(starts)
    plan = np.zeros(order.HEADER, np.int64)
    plan[order.STARTS] = starts.ctypes.data
    for name, field in (("used", order.USED), ("grouped", order.GROUPED),
                        ("largest", order.LARGEST), ("most", order.MOST),
                        ("tallest", order.TALLEST), ("gaps", order.GAPS)):
        plan[field] = fields[name]
    made = policy.HeightPolicy(plan, rows, levels, team, by_groups, tile, block,
                               policy.weights_of(loop, backward))
    made.plan[policy.DEPTHS] = depths
    policy.height_policy_kernel()(made.plan.ctypes.data)
    bounds, table, pieces = made.found()
    chosen, most, grouped = made.choice()
    return bounds, chosen, most, table if grouped else None, table, pieces


def by_height(rng, rows: int, team: int):
    """Starts of random (height, group) keys over dense heights, and the
    order kernel's fields for them."""
    heights = int(rng.integers(1, 12))
    counts = np.sort(rng.integers(1, rows, heights))[::-1]  # fewer rows higher up
    keys = max(team, 1)
    cells = rng.multinomial(1, [1 / keys] * keys, size=int(counts.sum())).argmax(axis=1)
    per = np.zeros((heights, keys), np.int64)
    at = 0
    for h, n in enumerate(counts):
        per[h] = np.bincount(cells[at:at + n], minlength=keys)
        at += n
    starts = np.r_[0, np.cumsum(per.ravel())].astype(np.int64)
    loads = per.sum(axis=0)
    return starts, dict(used=heights * keys if team < 2 else heights, tallest=heights,
                        grouped=int(rng.integers(0, 2)), largest=int(loads.max()),
                        most=int(per.max()), gaps=0)


@pytest.mark.parametrize("seed", range(40))
def test_the_native_policy_is_the_pythons(seed: int) -> None:
    rng = np.random.default_rng(seed)
    team = [0, 2, 3, 4][seed % 4]
    starts, fields = by_height(rng, int(rng.integers(2, 400)), team)
    threads = team if team else [1, 2, 4][seed % 3]  # by groups, the order's team
    loop = fake_loop(threads, int(rng.integers(1, 10**6)), int(rng.integers(0, 10**5)),
                     [1e-6, 5e-5, 1e-2][seed % 3])
    backward = fake_loop(threads, 3, 10**4, 5e-5) if seed % 2 else None
    args = (starts, team, fields, bool(seed % 5), int(rng.integers(1, 4)), loop, backward,
            int(rng.integers(1, 16)), int(rng.integers(1, 300)))
    want_bounds, want_team, want_most, want_groups, want_pieces = reference(*args)
    bounds, chosen, most, groups, table, pieces = run_policy(*args)
    np.testing.assert_array_equal(bounds, want_bounds)
    assert chosen == want_team and most == want_most
    if want_groups is None:
        assert groups is None
        np.testing.assert_array_equal(pieces, want_pieces)
    else:
        np.testing.assert_array_equal(groups, want_groups)
        assert pieces is None
    team, found = args[1], starts[:fields["tallest"] * max(args[1], 1) + 1]
    if team >= 2 and fields["grouped"] and args[3] and args[4] > 1:  # as `renumber` makes it
        np.testing.assert_array_equal(table, group_table(found, team))
    else:
        assert table is None


def test_heights_with_no_rows_are_left_out() -> None:
    starts = np.array([0, 4, 4, 9, 9, 9, 12], np.int64)
    fields = dict(used=6, tallest=0, grouped=0, largest=0, most=0, gaps=0)
    loop = fake_loop(1, 1, 0, 1e-6)
    bounds, chosen, most, groups, _, _ = run_policy(starts, 0, fields, True, 2, loop, None, 4,
                                                    100)
    np.testing.assert_array_equal(bounds, [0, 4, 9, 12])
    assert chosen == (1, 0) and most == 5 and groups is None


@pytest.mark.parametrize("threads, by_groups, mode, free", [
    (1, True, "infer", False), (2, True, "infer", False), (2, True, "infer", True),
    (2, False, "infer", True), (2, True, "train", True), (2, False, "train", True)])
def test_a_call_runs_its_loop_as_the_python_policy_chooses(threads, by_groups, mode, free,
                                                           monkeypatch, tmp_path):
    """From its second call a frontier function's numbering call chooses its
    height loop's bounds, team, groups and most rows (`NativeSchedule.
    policy`) and runs the loop (`kernels/height_call`), never called from
    Python then: for the same batch the choices are what the Python policy
    chooses, and the outputs and gradients are what its loop gives; teams
    refused by the default costs and taken where they are free
    (`free_teams`), by groups and by rows."""
    from test_frontier_threads import free_teams, inputs
    from test_repeat_call import schedule_only

    import recir
    from recir.backend import native_schedule
    from recir.data.synthetic import make_treebank
    from recir.models import tree_rnn

    monkeypatch.setattr(native_schedule, "BY_GROUPS", by_groups)
    schedule_only(monkeypatch)  # every call through the schedule, whose choices this records
    params = tree_rnn.init_params(np.random.default_rng(4), hidden=8, vocab=12)
    traced = tree_rnn.trace_model(params)
    trees = inputs(make_treebank(12, seed=3, vocab_size=12))
    function = (recir.compile if mode == "infer" else recir.value_and_grad)(
        traced, batching="frontier", threads=threads,
        cache_dir=free_teams(tmp_path) if free else None)
    schedule = native_schedule.NativeSchedule
    choices: list[tuple] = []
    post = schedule.post
    monkeypatch.setattr(schedule, "post", lambda self, *args: (post(self, *args), choices.append((
        self.bounds.tolist(), self.team, None if self.team_groups is None else
        self.team_groups.tolist(), self.most, self.saved_at.tolist())))[0])
    loops: list[str] = []
    run = HeightLoop.__call__
    monkeypatch.setattr(HeightLoop, "__call__", lambda self, *args: loops.append(
        self.native.name) or run(self, *args))

    def batch() -> list:
        grads = {k: np.zeros_like(v) for k, v in params.items()}
        found = function.batch(trees) if mode == "infer" else function.batch(trees, grads)[0]
        return [found, grads]

    function.batch(trees[:5])
    assert len(loops) == (1 if mode == "infer" else 2)
    batch()  # more rows: its scratch may be short, then its loop runs from Python
    loops.clear()
    native = [batch() for _ in range(2)]
    assert loops == []  # the `_bwd` too follows in the numbering call
    monkeypatch.setattr(schedule, "policy", lambda self, *args: (None, None))
    python = batch()
    assert choices[1] == choices[2] == choices[3] == choices[4]
    for got, want in zip(native[0][0], python[0], strict=True):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    # a team's embedding rows are added under locks in the order the threads
    # come (`test_frontier_threads`): float32 sums reordered, a few ulps apart
    for name, grad in python[1].items():
        for found in (native[0][1][name], native[1][1][name]):
            np.testing.assert_allclose(found, grad, rtol=1e-5,
                                       atol=2e-6 * max(1, np.abs(grad).max()))


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_ctrl_c_stops_the_loop_the_numbering_call_runs(mode, monkeypatch):
    """While the numbering call runs the height loop (and a gradient's
    `_bwd` after it), Ctrl-C's watcher (`interrupts`) holds the loops'
    contexts, on one thread and the team's, beside the expansion's: a stop
    reaches the loops as it did when Python called them."""
    import threading

    import recir
    from recir.backend import interrupts, native_schedule
    from recir.data.synthetic import make_treebank
    from recir.models import tree_rnn
    from test_frontier_threads import inputs

    params = tree_rnn.init_params(np.random.default_rng(4), hidden=8, vocab=12)
    traced = tree_rnn.trace_model(params)
    function = recir.compile(traced, batching="frontier", threads=2) if mode == "infer" else (
        recir.value_and_grad(traced, batching="frontier", threads=2))
    trees = inputs(make_treebank(6, seed=3, vocab_size=12))
    function.batch(trees)
    held: list = []
    number = native_schedule.numbering_kernel()
    monkeypatch.setattr(native_schedule, "numbering_kernel", lambda folder=None: lambda *args: (
        held.append(interrupts.RUNNING[threading.get_ident()][0]), number(*args)))
    function.batch(trees)
    loops = function.native.loops
    names = ["node__post"] if mode == "infer" else ["node__post_fwd", "node__post_bwd"]
    views = {id(ctx) for ctx in held[-1].views}
    for contexts in (*(loops[name].teams[t] for name in names for t in (1, 2)),
                     loops["node__expand"].teams[1]):
        assert {id(ctx) for ctx in contexts.views} <= views
