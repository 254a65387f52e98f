"""bench/thin_heights.py: the two trees have the same leaves and internal
nodes, their heights are what their shapes give, and a height's cost is the
difference of their times over the difference of their heights."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import thin_heights  # noqa: E402


@pytest.mark.parametrize("heights", [1, 2, 5, 64])
def test_a_caterpillar_and_its_complete_tree_do_the_same_rows(heights):
    long = thin_heights.caterpillar(heights)
    bushy = thin_heights.heap_tree(len(long))
    assert len(long) == 2 * heights - 1
    leaves = [sum(c == (-1, -1) for c in tree) for tree in (long, bushy)]
    assert leaves[0] == leaves[1] == heights
    assert thin_heights.tree_heights(long, len(long) - 1) == heights
    assert thin_heights.tree_heights(bushy, 0) == len(long).bit_length()


def test_a_height_costs_the_time_between_the_trees_over_their_heights():
    found = thin_heights.measure(8, 6, repeats=1)
    assert (found["heights"], found["complete_heights"]) == (6, 4)
    assert found["height_s"] == pytest.approx(
        (found["caterpillar_s"] - found["complete_s"]) / 2)
    assert found["weight_bytes"] == 5 * 8 * 2 * 8 * 4
