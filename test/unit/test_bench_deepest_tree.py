"""bench/deepest_tree.py: each batch's deepest tree, and the bound it sets."""

import sys
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import deepest_tree  # noqa: E402


def test_the_deepest_tree_by_a_plain_recursion_then_by_nodes():
    from recir.data import make_treebank

    trees = make_treebank(40, seed=3)

    def height(t, n: int) -> int:
        return 0 if t.left[n] < 0 else 1 + max(height(t, t.left[n]), height(t, t.right[n]))

    tallest = max(height(t, int(t.root)) for t in trees)
    expected = max((t.num_nodes, -k) for k, t in enumerate(trees)
                   if height(t, int(t.root)) == tallest)
    assert deepest_tree.deepest(trees) == -expected[1]
    balanced = make_treebank(3, "balanced", num_leaves=8, seed=1)  # ties: the first
    assert deepest_tree.deepest(balanced) == 0


def test_a_small_run_times_each_batch_and_the_report_divides_them():
    found = deepest_tree.measure("infer", 8, "complete-8", 4, rounds=1, calls=1)
    assert len(found) == 2  # ten trees: two whole batches of four
    for f in found:
        assert f["whole"] > 0 and f["deepest"] > 0 and (f["heights"], f["nodes"]) == (3, 15)
    from bench import target_scaling  # its row beside SST's frontier scaling: the sums

    assert target_scaling.tree_bound("infer", 8, "complete-8", 4) > 1  # four trees over one
    made_up = [{"whole": 4e-3, "deepest": 5e-4, "heights": 16, "nodes": 67},
               {"whole": 3e-3, "deepest": 2.5e-4, "heights": 14, "nodes": 57}]
    text = deepest_tree.report(made_up, Namespace(mode="infer", hidden=150,
                                                  workload="sst", batch=25))
    assert "batch 0: 4000, 500 (16, 67), 8.00" in text
    assert "batch 1: 3000, 250 (14, 57), 12.00" in text
    assert "bounded at 8.00-12.00 (median 10.00)" in text
