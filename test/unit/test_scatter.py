"""The frontier's embedding-gradient kernel (`recir/batching/scatter.py`)
against `np.add.at`."""

from __future__ import annotations

import numpy as np
import pytest

from recir.batching import scatter


def test_scatter_add_rows_matches_add_at_with_repeats():
    rng = np.random.default_rng(7)
    table = rng.standard_normal((50, 13), dtype=np.float32)
    index = rng.integers(0, 50, 200).astype(np.int32)  # many repeats
    rows = rng.standard_normal((200, 13), dtype=np.float32)
    expected = table.copy()
    np.add.at(expected, index, rows)
    scatter.add_rows(table, index, rows)
    np.testing.assert_array_equal(table, expected)  # same order of additions
    with pytest.raises(IndexError):
        scatter.add_rows(table, np.array([3, 50]), rows[:2])
