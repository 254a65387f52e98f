"""bench/team_groups.py: the team's groups, and each of its four timings."""

import sys
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import team_groups  # noqa: E402
from recir.backend.policy import balanced_groups  # noqa: E402


def test_the_groups_are_the_teams_and_hold_the_batch():
    trees, groups, params = team_groups.cell("infer", 8, "complete-8", 6, 3)
    assert len(trees) == 6 and sorted(map(id, sum(groups, []))) == sorted(map(id, trees))
    found = balanced_groups([t.num_nodes for t in trees], 3)
    assert [[trees.index(t) for t in g] for g in groups] == [
        [k for k, g in enumerate(found) if g == j] for j in range(3)]
    assert params  # the model's weights


def test_a_small_run_times_each_part():
    args = ("train", 8, "complete-8", 4, 2)
    found = team_groups.in_one_process(*args, rounds=1, calls=1)
    assert found["whole"] > 0 and found["team"] > 0 and len(found["groups"]) == 2
    assert all(g > 0 for g in found["groups"]) and found["nodes"] == [30, 30]
    assert found["threads"] > 0
    together = team_groups.in_processes(*args, rounds=1, calls=1)
    assert together > 0
    text = team_groups.report(found, together, Namespace(
        mode="train", hidden=8, workload="complete-8", batch=4, threads=2))
    assert "2 groups (30 / 30 nodes)" in text and "a process each" in text
    assert "a thread each of this process" in text and "the team of 2 on the batch" in text


def test_each_thread_keeps_its_own_seconds_and_clock():
    """`PerThread`: a thread's seconds are its own, wall time unless it asks
    for its CPU time, which a sleep does not add to."""
    import threading
    import time

    spent = team_groups.PerThread()
    spent[0] = 1.0
    seen = {}

    def other() -> None:
        seen["start"] = spent[0]
        spent.local.cpu = True
        before = spent.clock()
        time.sleep(0.05)
        seen["slept"] = spent.clock() - before

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert spent[0] == 1.0 and seen["start"] == 0.0 and seen["slept"] < 0.02
    before = spent.clock()
    time.sleep(0.05)
    assert spent.clock() - before >= 0.05


def test_an_error_on_a_thread_at_once_is_raised_in_the_caller():
    import pytest

    def fails(trees):
        raise ValueError("no such tree")

    with pytest.raises(ValueError, match="no such tree"):
        team_groups.threads_at_once(team_groups.PerThread(), [(fails, [])], 1)
