"""bench/recursive_schedule.py: subtree sizes, and schedules small enough to
work out by hand."""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import recursive_schedule  # noqa: E402
from recir.data import make_tree, make_treebank  # noqa: E402


def test_subtree_sizes_count_each_nodes_descendants():
    for tree in make_treebank(5, vocab_size=20, seed=3):
        def size(v):
            if tree.left[v] < 0:
                return 1
            return 1 + size(tree.left[v]) + size(tree.right[v])
        got = recursive_schedule.subtree_sizes(tree.left, tree.right)
        assert got.tolist() == [size(v) for v in range(tree.num_nodes)]


def test_schedules_worked_out_by_hand():
    seven = make_tree("balanced", 4, np.random.default_rng(0), 10)  # 4 leaves, 7 nodes
    length = recursive_schedule.schedule_length
    assert length([seven], 0, 4) == 7  # no spawns: one thread runs it all
    assert length([seven], 1, 2) == 4  # two subtrees of 3 side by side, then the root
    assert length([seven], 2, 4) == 3  # four leaves, two parents, the root
    assert length([seven, seven, seven], 0, 2) == 14  # three trees on two threads
    trees = make_treebank(9, vocab_size=20, seed=5)
    assert length(trees, 3, 1) == sum(t.num_nodes for t in trees)  # one thread: all work
