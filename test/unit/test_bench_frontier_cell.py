"""bench/frontier_cell.py: counts of turns and repeats below one are refused
by the parser (with none, the roof stayed 0 and its fraction divided by it)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag", ["--rounds", "--repeats"])
def test_no_turns_is_a_usage_error(flag):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "frontier_cell.py"), flag, "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"argument {flag}: expected a positive integer, got '0'" in done.stderr
