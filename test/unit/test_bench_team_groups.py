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


def test_node_heights_and_row_tiles_against_plain_python():
    """Heights by a plain recursion; a group's row tiles counted by hand."""
    from recir.data.trees import Tree

    # ((a b) ((c d) e)) in post-order, and a lone leaf
    tree = Tree(left=[-1, -1, 0, -1, -1, 3, -1, 5, 2], right=[-1, -1, 1, -1, -1, 4, -1, 6, 7],
                word=[0] * 9, label=[0] * 9)

    def height(n: int) -> int:
        return 0 if tree.left[n] < 0 else 1 + max(height(tree.left[n]), height(tree.right[n]))

    assert team_groups.node_heights(tree).tolist() == [height(n) for n in range(9)]
    leaf = Tree(left=[-1], right=[-1], word=[0], label=[0])
    assert team_groups.node_heights(leaf).tolist() == [0]
    # heights 1: two nodes, 2: one, 3: one, twice over: 4, 2, 2 rows
    assert team_groups.row_tiles([tree], 3) == (3, 3)
    assert team_groups.row_tiles([tree, tree], 3) == (3, 4)
    assert team_groups.row_tiles([tree, tree, leaf], 1) == (3, 8)
    assert team_groups.row_tiles([leaf], 3) == (0, 0)
    assert team_groups.row_tiles([], 3) == (0, 0)  # a group of a team larger than the batch


def test_the_cost_fit_finds_made_up_costs_and_the_report_prints_it():
    tiles, nodes = [19, 17, 16, 14, 18, 15], [67, 65, 63, 57, 70, 72]
    seconds = [1e-6 * (100 + 15.5 * t + 2.0 * n) for t, n in zip(tiles, nodes, strict=True)]
    fixed, tile, node, worst = team_groups.cost_fit(seconds, tiles, nodes)
    assert abs(fixed - 100e-6) < 1e-9 and abs(tile - 15.5e-6) < 1e-10
    assert abs(node - 2e-6) < 1e-10 and worst < 1e-10
    found = {"whole": 4e-3, "groups": seconds, "team": 7e-4, "threads": 1.05,
             "nodes": nodes, "tiles": [(12, t) for t in tiles]}
    text = team_groups.report(found, None, Namespace(
        mode="infer", hidden=150, workload="sst", batch=25, threads=6))
    assert "heights / row tiles: 12/19, 12/17" in text
    assert "a group alone ~ 100 + 15.5 a row tile + 2.00 a node (worst residual 0)" in text
    # groups without trees (a team larger than the batch) are left out of the fit
    found |= {"groups": seconds[:3] + [0.0, 0.0], "nodes": nodes[:3] + [0, 0],
              "tiles": [(12, t) for t in tiles[:3]] + [(0, 0), (0, 0)]}
    text = team_groups.report(found, None, Namespace(
        mode="infer", hidden=150, workload="sst", batch=3, threads=5))
    assert "heights / row tiles: 12/19, 12/17, 12/16, 0/0, 0/0" in text
    assert "a group alone" not in text
