"""bench/team_groups.py: the team's groups, and each of its three timings."""

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
    together = team_groups.in_processes(*args, rounds=1, calls=1)
    assert len(together) == 2 and all(r > 0 for r in together)
    text = team_groups.report(found, together, Namespace(
        mode="train", hidden=8, workload="complete-8", batch=4, threads=2))
    assert "2 groups (30 / 30 nodes)" in text and "a process each" in text
    assert "the team of 2 on the batch" in text
