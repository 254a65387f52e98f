"""The spawn tuner against made-up call times, and a fixed budget's results."""

from pathlib import Path

import pytest

import recir
from recir.backend import spawn_tuner
from recir.backend.spawn_tuner import BUDGETS, SpawnTuner
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.parsing import parse_module

FIB = Path(__file__).resolve().parents[2] / "examples/ir/fib.mlir"


def run(tuner: SpawnTuner, seconds_per_unit, calls: int, units: int = 10) -> list[int]:
    """The budgets `tuner` picked over `calls` back-to-back calls timed by
    `seconds_per_unit(budget)` (on a made-up clock)."""
    picked = []
    for _ in range(calls):
        budget = tuner.choose()
        picked.append(budget)
        start = max(tuner.team_end, 1.0)  # back to back after the last team call
        tuner.record(start, start + seconds_per_unit(budget) * units, units)
    return picked


def test_keeps_the_fastest_budget_and_still_tries_the_others():
    tuner = SpawnTuner()
    picked = run(tuner, lambda b: 1.0 + abs(b - 3) * 0.1, 1200)
    later = picked[100:]
    assert BUDGETS[tuner.best] == 3
    assert later.count(3) > 0.95 * len(later)
    assert set(later) == set(BUDGETS)  # every budget measured again now and then
    far = later.count(8)  # 1.5x the best: tried 4x less often
    assert 0 < far < later.count(2)


def test_follows_a_change_of_inputs():
    tuner = SpawnTuner()
    run(tuner, lambda b: 1.0 + b * 0.1, 200)  # balanced trees: one level best
    assert BUDGETS[tuner.best] == 1
    picked = run(tuner, lambda b: 2.0 - b * 0.1, 1500)  # unbalanced: the deepest
    assert picked[-50:].count(8) > 40


def test_one_slow_call_does_not_move_the_choice():
    tuner = SpawnTuner()
    run(tuner, lambda b: 1.0 if b == 2 else 1.2, 200)
    tuner.choose()
    tuner.pick = BUDGETS.index(2)
    tuner.record(tuner.team_end, tuner.team_end + 1000.0, 1)  # a slow spell
    assert BUDGETS[tuner.best] == 2


def test_a_call_after_a_pause_is_not_counted():
    tuner = SpawnTuner()
    run(tuner, lambda b: 1.0 if b == 2 else 1.2, 200)
    before = list(tuner.cost)
    tuner.choose()
    tuner.pick = BUDGETS.index(2)
    tuner.record(tuner.team_end + 0.1, tuner.team_end + 50.0, 10)  # woke the team
    assert tuner.cost == before


def test_starts_from_the_default_and_learns_every_budget_first():
    tuner = SpawnTuner(default=4)
    first = run(tuner, lambda b: 1.0, 2 * len(BUDGETS) + 2)
    # the first call wakes the team, the second warms the default up (neither
    # is counted); from then on every 2nd call tries the next budget
    assert first[:5] == [4, 4, 4, 4, 4]
    assert first[5:14:2] == [6, 8, 1, 2, 3]
    # each budget's first call warms it up: the others' count on the next lap
    assert tuner.unmeasured == len(BUDGETS) - 1
    assert set(run(tuner, lambda b: 1.0, 2 * len(BUDGETS))) == set(BUDGETS)
    assert tuner.unmeasured == 0


def test_calls_that_all_follow_a_pause_still_count():
    """A function called every now and then (fib(35) between other work):
    every call wakes the team, and the tuner still learns."""
    tuner = SpawnTuner()
    clock = 1.0
    for _ in range(300):
        budget = tuner.choose()
        clock += 0.01  # 10 ms of other work
        seconds = 1.0 if budget == 6 else 1.5
        tuner.record(clock, clock + seconds, 1)
        clock += seconds
    assert BUDGETS[tuner.best] == 6


def test_fixed_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv("RECIR_SPAWN_BUDGET", "2")
    tuner = spawn_tuner.tuner(2)
    assert set(run(tuner, lambda b: 1.0, 50)) == {2}
    monkeypatch.setenv("RECIR_SPAWN_BUDGET", "many")
    with pytest.raises(RecirError, match="RECIR_SPAWN_BUDGET must be a number"):
        spawn_tuner.tuner(2)


@pytest.mark.parametrize("budget", ["0", "1", "8", "30"])
def test_every_budget_gives_the_serial_results(monkeypatch, budget):
    monkeypatch.setenv("RECIR_SPAWN_BUDGET", budget)
    module = parse_module(make_context(), FIB.read_text(), str(FIB))
    fib = recir.compile(module, entry="fib", threads=2)
    expected = [1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597, 2584]
    assert [fib(n)[0] for n in range(len(expected))] == expected
    assert fib(25)[0] == 121393
    batch = fib.batch([(n,) for n in range(20, 26)])
    assert [r[0] for r in batch] == [10946, 17711, 28657, 46368, 75025, 121393]
    assert fib.call_tuner.fixed == int(budget)


def test_one_thread_wins_a_close_contest():
    """A team must beat one thread (budget 0) by `ALONE_HANDICAP`."""
    budgets = (0, *BUDGETS)
    tuner = SpawnTuner(budgets)
    run(tuner, lambda b: 1.0 if b == 0 else 0.98, 600)  # a team 2% faster
    assert budgets[tuner.best] == 0
    tuner = SpawnTuner(budgets)
    run(tuner, lambda b: 1.0 if b == 0 else 0.9, 600)  # 10% faster
    assert budgets[tuner.best] != 0


def test_a_budgets_first_call_is_not_counted():
    """A budget's first call sets up its team's contexts (a gradient's tape
    arena: page faults) and would make it look slow for a long time."""
    tuner = SpawnTuner(default=4)
    first_call = set()

    def seconds(budget):
        slow = budget not in first_call
        first_call.add(budget)
        return 3.0 if slow else (1.0 if budget == 2 else 1.1)

    run(tuner, seconds, 200)
    assert BUDGETS[tuner.best] == 2
    assert max(tuner.cost) < 1.2


def test_a_team_that_slept_through_a_one_thread_call_is_not_timed():
    """While one thread is best, a team budget's call that follows a
    one-thread call wakes the team: it is timed on the call after."""
    budgets = (0, *BUDGETS)
    tuner = SpawnTuner(budgets)
    clock, previous = 1.0, 0
    for _ in range(1500):
        budget = tuner.choose()
        seconds = 10.0 if budget == 0 else 8.0 if budget == 2 else 11.0
        if budget and not previous:
            seconds += 5.0  # the team slept through the last call
        tuner.record(clock, clock + seconds, 10)
        clock, previous = clock + seconds, budget
    assert budgets[tuner.best] == 2


def test_calls_at_once_time_one_call_at_a_time():
    """A call that finds another being timed (several Python threads) runs
    the best budget untimed; the tuner is free again after `release`."""
    tuner = SpawnTuner()
    tuner.best = BUDGETS.index(2)
    budget, timed = tuner.claim()
    assert timed
    assert tuner.claim() == (2, False) and tuner.claim() == (2, False)
    tuner.release(False)  # an untimed call's release leaves the timed one's claim
    assert tuner.claim() == (2, False)
    tuner.release(timed)
    assert tuner.claim()[1]
    fixed = SpawnTuner(fixed=3)
    assert fixed.claim() == (3, False) and fixed.claim() == (3, False)
