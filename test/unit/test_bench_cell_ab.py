"""bench/cell_ab.py: each pair times the cell in a process of each
checkout, and a checkout that cannot run the cell fails the run."""

import argparse
import math
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import cell_ab  # noqa: E402


def tiny(base: Path) -> argparse.Namespace:
    return argparse.Namespace(base=str(base), mode="infer", workload="complete-32", hidden=8,
                              pairs=2, calls=2)


def test_each_pair_times_both_checkouts():
    found = cell_ab.measure(tiny(cell_ab.HERE))
    assert set(found) == {"base", "here"}
    for seconds in found.values():
        assert len(seconds) == 2
        assert all(math.isfinite(s) and s > 0 for s in seconds)


def test_a_checkout_without_the_cell_fails(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        cell_ab.measure(tiny(tmp_path))
