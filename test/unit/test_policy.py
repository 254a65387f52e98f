"""`backend/policy.py`: each choice follows from the cost model, the same for the same inputs."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

import recir
from recir.backend import policy
from recir.backend.policy import Costs
from recir.context import make_context
from recir.data import make_tree
from recir.diagnostics import RecirError
from recir.models import tree_rnn
from recir.parsing import parse_module
from recir.passes.work_estimate import larger_share
from recir.pipeline import run_passes

# one unit 0.025 ns (16 lanes at 2.5 GHz), a task 1 us, a team start 50 us
COSTS = Costs(unit_s=2.5e-11, task_s=1e-6, team_s=50e-6)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"


def test_machine_facts_are_read() -> None:
    facts = policy.machine()
    assert 1 <= facts.cores <= 4096
    assert facts.lanes in (4, 8, 16)
    assert facts.l2_bytes >= 64 << 10 and facts.clock_hz > 1e8
    assert policy.defer_outer_bytes() == facts.l2_bytes // 2


def test_a_team_pays_where_it_takes_less_time_than_one_thread() -> None:
    # one thread: work x 2.5e-11 s; a team of 2: half that x (1 + 1/8), 50 us
    # to start, and half of its one task's 1 us (a budget of 1): from ~4.62M units
    assert not policy.team_pays(4_600_000, 2, COSTS)
    assert policy.team_pays(4_700_000, 2, COSTS)
    # on 8 threads the team would pay from ~2.33M units, but a call splits
    # only from 2.56M (two pieces of 32 task costs): no tasks, no team below
    assert policy.team_pays(2_600_000, 8, COSTS) and not policy.team_pays(2_500_000, 8, COSTS)
    assert policy.team_pays(2_500_000, 8, COSTS, tasks=8)  # a batch's calls are its tasks
    assert not policy.team_pays(10**12, 1, COSTS)
    assert policy.team_pays(None, 2, COSTS)  # unknown work (fib's scalar input): a team
    # where the second thread gets a fifth of a core (a loaded host, `tune`),
    # 2 threads amount to 1.2 cores: one thread's time x 1.125 / 1.2, 50 us
    # and 15 tasks' 12.5 us are below one thread's time from ~40M units
    shared = Costs(COSTS.unit_s, COSTS.task_s, COSTS.team_s, share=0.2)
    assert not policy.team_pays(30_000_000, 2, shared) and policy.team_pays(60_000_000, 2, shared)
    assert not policy.team_pays(10**12, 2, Costs(COSTS.unit_s, COSTS.task_s, 0.0, share=0.0))


def test_the_budget_stops_where_pieces_balance_or_get_too_small() -> None:
    # 2^levels pieces of at most 1/8 of a thread's share: 4 levels on 2 threads, 7 on 16
    assert [policy.max_budget(t) for t in (1, 2, 4, 16)] == [3, 4, 5, 7]
    # a piece carries at least 32 task costs (32 us = 1.28M units)
    assert policy.call_budget(1_280_000, 2, COSTS) == 0
    assert policy.call_budget(1_280_000 * 4, 2, COSTS) == 2
    assert policy.call_budget(10**9, 2, COSTS) == 4
    assert policy.call_budget(None, 16, COSTS) == 7


def test_an_uneven_recursion_spawns_deeper(monkeypatch) -> None:
    """fib's calls do 1/golden ratio and its square of the work: its largest
    piece shrinks by 0.62 a level, not 0.5, so reaching 1/8 of a thread's
    share takes more levels: log(threads x 8) / log(1.618)."""
    fib = load_example("fib")
    share = larger_share(fib)
    assert share == pytest.approx(2 / (1 + math.sqrt(5)))
    closed = load_example("fib")
    run_passes(closed, "capture-outer-refs")
    assert larger_share(closed) == share
    assert [policy.max_budget(t, share) for t in (2, 16)] == [6, 11]
    assert policy.call_budget(None, 2, COSTS, share) == 6
    for even in ("ackermann", "takeuchi", "tree_lstm"):  # no argument less constants in both
        assert larger_share(load_example(even)) == 0.5
    monkeypatch.delenv("RECIR_SPAWN_BUDGET", raising=False)
    native = recir.compile(fib, entry="fib", threads=2)
    assert native.schedule((30,)) == (2, 6)
    assert native(30) == (1346269,)


def load_example(name: str):
    return parse_module(make_context(), (EXAMPLES / f"{name}.mlir").read_text(), name)


def test_a_batch_spawns_only_for_its_largest_calls() -> None:
    alike = [6e6] * 25  # each call 2/25 of a thread's share: the calls balance the team
    assert policy.batch_budget(alike, 25, 2, COSTS) == 0
    one_big = [6e6] * 4 + [1e9]  # the big call is most of the work: split it to the cap
    assert policy.batch_budget(one_big, 5, 2, COSTS) == 4
    # largest x threads / (total / 8) = 2e7 x 2 / (4e7 / 8) = 8: three levels
    assert policy.batch_budget([2e7, 1e7, 1e7], 3, 2, COSTS) == 3
    assert policy.batch_budget(None, 25, 2, COSTS) == 0  # unknown sizes, many calls
    assert policy.batch_budget(None, 2, 2, COSTS) == math.ceil(math.log2(2 / (2 / 8)))


def test_same_inputs_same_choice() -> None:
    works = [float(w) for w in np.random.default_rng(0).integers(1, 10**8, 40)]
    first = [policy.call_budget(w, 2, COSTS) for w in works]
    assert first == [policy.call_budget(w, 2, COSTS) for w in works]
    assert policy.batch_budget(works, 40, 4, COSTS) == policy.batch_budget(works, 40, 4, COSTS)


def test_a_function_schedules_a_call_the_same_way_each_time(monkeypatch) -> None:
    """No state changes between calls: the function's costs and budget are
    fixed at compile time, and the results equal one thread's."""
    monkeypatch.delenv("RECIR_SPAWN_BUDGET", raising=False)
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=150, vocab=100)
    model = tree_rnn.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=2).wait()
    tree = make_tree("balanced", 64, np.random.default_rng(1), 100)
    args = (tree.left, tree.right, tree.word, tree.label, tree.root)
    before = dict(vars(parallel))
    outputs = [parallel(*args) for _ in range(3)]
    assert {k for k, v in vars(parallel).items() if before.get(k) is not v} <= {"last"}
    for h, loss in outputs:
        np.testing.assert_array_equal(h, serial(*args)[0])
        assert loss == serial(*args)[1]


def test_fixed_budget_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("RECIR_SPAWN_BUDGET", "2")
    assert policy.fixed_budget() == 2
    for bad in ("many", "\u00b2"):  # ('²' passed str.isdigit; int() raised a ValueError)
        monkeypatch.setenv("RECIR_SPAWN_BUDGET", bad)
        with pytest.raises(RecirError, match="RECIR_SPAWN_BUDGET must be a number"):
            policy.fixed_budget()


def test_a_team_takes_a_share_of_the_work_its_start_and_its_tasks() -> None:
    # 2 threads: 1 ms / 2 x 1.125 + 50 us (2 us warm) + 4 tasks' 1 us / 2
    assert policy.team_seconds(1e-3, 2, COSTS, 4) == pytest.approx(562.5e-6 + 50e-6 + 2e-6)
    assert policy.team_seconds(1e-3, 2, COSTS, 4, warm=True) == pytest.approx(566.5e-6)
    idle = Costs(COSTS.unit_s, COSTS.task_s, COSTS.team_s, share=0.0)  # no second core
    assert policy.team_seconds(1e-3, 2, idle, 0) == pytest.approx(1.125e-3 + 50e-6)


def test_the_gemm_gain_follows_the_register_tile() -> None:
    from recir.passes.gemm_target import host_target

    rows, vectors = host_target().tile
    full = rows * vectors / (rows + vectors) * policy.GEMM_EFFICIENCY
    assert policy.gemm_gain(rows) == pytest.approx(full) == policy.gemm_gain(10 * rows)
    assert policy.gemm_gain(1) == pytest.approx(vectors / (1 + vectors) * policy.GEMM_EFFICIENCY)
    assert policy.gemm_gain(0.5) == policy.gemm_gain(1)  # no fewer than one row filled


@pytest.mark.parametrize(("lanes", "from_l2"), [(16, 2.0), (8, 1.0), (4, 1.0)])
def test_weights_stream_at_l2s_rate_and_l3s_beyond(monkeypatch, lanes, from_l2) -> None:
    """A vector of 16 lanes (64 bytes) a cycle is twice the 32 bytes L2
    gives; 8 or 4 lanes are not; the part of the weights beyond L2's size,
    `l3_slowdown` times that: a little over L2 costs little more, many
    times its size nearly `l3_slowdown` times."""
    l2 = 1 << 20
    monkeypatch.setattr(policy, "machine", lambda: policy.Machine(2, l2, lanes, 2e9))
    assert COSTS.l3_slowdown == 2
    assert policy.stream_factor(4, COSTS) == policy.stream_factor(l2, COSTS) == from_l2
    assert policy.stream_factor(l2 + l2 // 8, COSTS) == pytest.approx(from_l2 * (1 + 1 / 9))
    assert policy.stream_factor(2 * l2, COSTS) == from_l2 * 1.5  # half of them from L3
    assert policy.stream_factor(4 * l2, COSTS) == from_l2 * 1.75
    assert policy.stream_factor(1000 * l2, COSTS) == pytest.approx(from_l2 * 2, rel=1e-3)
    measured = Costs(COSTS.unit_s, COSTS.task_s, COSTS.team_s, l3_slowdown=3.5)
    assert policy.stream_factor(2 * l2, measured) == from_l2 * 2.25


def test_tuned_costs_are_kept_in_the_cache_dir(tmp_path) -> None:
    assert policy.costs(tmp_path).team_s == policy.DEFAULT_TEAM_S
    kept = policy.save_tuned(task_s=2e-6, team_s=30e-6, share=0.5, cache_dir=tmp_path)
    assert (kept.task_s, kept.team_s, kept.share) == (2e-6, 30e-6, 0.5)
    assert policy.costs(tmp_path) == kept
    assert kept.frontier_call_s == policy.DEFAULT_FRONTIER_CALL_S  # not measured: stated
    kept = policy.save_tuned(2e-6, 30e-6, 0.5, tmp_path, frontier_call_s=1e-4, row_s=2e-8)
    assert (kept.frontier_call_s, kept.height_s, kept.row_s) == (
        1e-4, policy.DEFAULT_HEIGHT_S, 2e-8)
    with pytest.raises(RecirError, match="unknown costs"):
        policy.save_tuned(2e-6, 30e-6, 0.5, tmp_path, call_s=1.0)
    policy.tuned_path(tmp_path).write_text("not json")
    assert policy.costs(tmp_path).team_s == policy.DEFAULT_TEAM_S
    # a negative or NaN cost (an edited file) made `auto`'s choice divide by zero or
    # round NaN: such a file is as unreadable as one that is not JSON
    for bad in ('{"task_s": -1, "team_s": -1, "share": -1}',
                '{"task_s": 2e-6, "team_s": NaN, "share": 0.5}',
                '{"task_s": 2e-6, "team_s": 3e-5, "share": 0.5, "row_s": -1e-9}',
                # a threaded call divided by task_s: ZeroDivisionError, OverflowError
                '{"task_s": 0, "team_s": 3e-5, "share": 0.5}',
                '{"task_s": 5e-324, "team_s": 3e-5, "share": 0.5}'):
        policy.tuned_path(tmp_path).write_text(bad)
        assert policy.costs(tmp_path) == policy.Costs(
            policy.costs(tmp_path).unit_s, policy.DEFAULT_TASK_S, policy.DEFAULT_TEAM_S)


def test_tunes_fib_gives_each_thread_of_a_large_team_enough_work() -> None:
    """On many cores fib(30) is over before a team's sleeping workers wake:
    `tune` grows n until each thread's share of fib's time is `SHARE_S`."""
    from recir.tuning import FIB_N, SHARE_S, fib_size

    def seconds(n: int) -> float:  # fib(30) in a millisecond
        return 1e-3 * 1.618 ** (n - FIB_N)

    for threads in (1, 2, 16, 64):
        n, alone = fib_size(seconds, threads)
        assert alone == seconds(n) and (n - FIB_N) % 2 == 0 and n <= FIB_N + 10
        assert alone >= threads * SHARE_S or n == FIB_N + 10
        assert n == FIB_N or seconds(n - 2) < threads * SHARE_S
    assert fib_size(seconds, 16)[0] == 38 and fib_size(seconds, 64)[0] == FIB_N + 10


def test_a_batch_spawns_its_largest_calls_first() -> None:
    """The largest first, ties in batch order; unknown works: batch order.
    On 2 threads, [1, 1, 2] in batch order ends at 3 (the 2 starts last),
    largest first at 2."""
    assert policy.spawn_order([1.0, 1.0, 2.0], 3) == [2, 0, 1]
    assert policy.spawn_order([3.0, 5.0, 3.0, 1.0, 5.0], 5) == [1, 4, 0, 2, 3]
    assert policy.spawn_order(None, 3) == [0, 1, 2]


def test_balanced_groups_are_within_four_thirds_of_the_best_split() -> None:
    """Against every split of small random batches (Graham's bound), the
    same on every call, and with more groups than items each its own."""
    rng = np.random.default_rng(4)
    for _ in range(40):
        sizes = rng.integers(1, 50, int(rng.integers(1, 8))).tolist()
        groups = int(rng.integers(1, 4))
        found = policy.balanced_groups(sizes, groups)
        assert found == policy.balanced_groups(sizes, groups)
        largest = max(sum(s for s, g in zip(sizes, found) if g == k) for k in range(groups))
        best = min(max(sum(s for s, g in zip(sizes, split) if g == k) for k in range(groups))
                   for split in itertools.product(range(groups), repeat=len(sizes)))
        assert largest <= 4 / 3 * best
    assert sorted(policy.balanced_groups([3.0, 1.0, 2.0], 5)) == [0, 1, 2]


def lpt_largest(sizes: list[int], groups: int) -> int:
    """Plain LPT's largest group: the largest item first, each to the least."""
    loads = [0] * groups
    for size in sorted(sizes, reverse=True):
        loads[loads.index(min(loads))] += size
    return max(loads)


def test_swaps_bring_lpts_groups_closer() -> None:
    """LPT gives [5, 3, 3] and [5, 4]; one swap makes both 10. On random
    batches of odd node counts (a binary tree's), never a larger group than
    LPT's, and often a smaller one."""
    found = policy.balanced_groups([5, 5, 4, 3, 3], 2)
    assert [sum(s for s, g in zip([5, 5, 4, 3, 3], found) if g == k) for k in (0, 1)] == [10, 10]
    rng = np.random.default_rng(7)
    closer = 0
    for _ in range(60):
        sizes = (2 * rng.integers(2, 51, int(rng.integers(2, 30))) - 1).tolist()
        groups = int(rng.integers(2, 5))
        found = policy.balanced_groups(sizes, groups)
        loads = [sum(s for s, g in zip(sizes, found) if g == k) for k in range(groups)]
        assert max(loads) <= lpt_largest(sizes, groups)
        closer += max(loads) < lpt_largest(sizes, groups)
    assert closer >= 10


def test_tune_reads_a_teams_share_off_its_quiet_rounds() -> None:
    """Rounds another process slowed (here three of five, which their
    median would take for the team's pace) leave the share measured on
    the quiet ones: 10 ms alone, 5.5 ms on 2 threads."""
    from recir.tuning import share_and_task

    few = 5
    with_few = [30e-3, 5.5e-3, 30e-3, 30e-3, 5.6e-3]
    tasks = 2 ** (few + 7) - 2 ** (few + 1)
    with_many = [t + tasks * 1e-7 for t in (40e-3, 5.5e-3, 40e-3, 40e-3, 6e-3)]
    share, task_s = share_and_task(10e-3, with_few, with_many, 2, few)
    assert share == pytest.approx(10 / 5.5 - 1)
    assert task_s == pytest.approx(1e-7 * 10 / 5.5)
    # a team that never beats one thread: no share, however its rounds vary
    assert share_and_task(10e-3, [12e-3, 11e-3], [12e-3, 11e-3], 16, few)[0] == 0.0


def test_tune_measures_and_keeps_the_costs(tmp_path) -> None:
    measured = recir.tune(tmp_path)
    assert 0.0 <= measured.share <= 1.0
    assert 0 < measured.task_s < 1e-3 and 0 < measured.team_s < 0.1
    # a tiny tree model's frontier calls: tens of us to a few ms, a height
    # and a row far less
    assert 1e-6 < measured.frontier_call_s < 0.1
    assert 0 <= measured.height_s < 1e-3
    assert 0 <= measured.row_s < 1e-4
    assert 1 <= measured.l3_slowdown < 100
    assert policy.costs(tmp_path) == measured
