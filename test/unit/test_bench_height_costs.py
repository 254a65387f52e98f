"""bench/height_costs.py: its fit of a height's and a row's cost, and the
time it prices a team's groups at."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import height_costs  # noqa: E402


def test_the_fit_finds_the_costs_the_times_were_made_of():
    rng = np.random.default_rng(4)
    heights = rng.integers(10, 30, 12)
    leaves, internal = rng.integers(300, 600, 12), rng.integers(300, 600, 12)
    seconds = 40e-6 * heights + 1.5e-6 * (leaves + 3.3 * internal)
    fixed, per_row, rms = height_costs.fit(heights, leaves, internal, seconds, 3.3)
    assert fixed == pytest.approx(40e-6) and per_row == pytest.approx(1.5e-6)
    assert rms < 1e-12


def test_a_team_pays_a_heights_fixed_cost_on_each_thread_with_rows_there():
    groups = [[4, 2, 1], [6, 1, 0]]  # thread 1 has no rows at height 2
    # thread 0: 3 heights, 4 leaf rows and 3 internal; thread 1: 2 heights, 6 and 1
    assert height_costs.team_seconds(groups, 10.0, 1.0, 2.0) == max(
        3 * 10 + 4 + 2 * 3, 2 * 10 + 6 + 2 * 1)
    # shared: each height's fixed cost once, its rows split evenly
    assert height_costs.team_seconds(groups, 10.0, 1.0, 2.0, shared=True) == pytest.approx(
        3 * 10 + (10 + 2 * 3 + 2 * 1) / 2)


def test_the_report_gives_how_far_the_largest_group_is_over_the_mean():
    found = [{1: 3e-3, 2: 2e-3, "groups": [[4, 2, 1], [6, 1, 0]]},  # 7 and 7 rows
             {1: 5e-3, 2: 3e-3, "groups": [[8, 2], [4, 2]]},  # 10 and 6: 25% over
             {1: 4e-3, 2: 2e-3, "groups": None}]  # not by groups: left out
    line = height_costs.report(found, 2, 2.0).splitlines()[-1]
    assert line == "the largest group's rows over the mean: median 12.5%, most 25.0%"
