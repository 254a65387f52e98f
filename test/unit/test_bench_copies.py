"""bench/copies.py: the host's ceiling for N threads, from N one-thread copies at once."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import copies  # noqa: E402


def test_ceiling_is_copies_times_alone_over_together(monkeypatch):
    """Alone and together alternate; the medians of their passes give it."""
    calls = []

    def together(cell, count):
        calls.append(count)
        return [2.0, 2.0, 9.0] if count == 1 else [2.5, 2.5, 2.5, 2.5, 0.1]

    monkeypatch.setattr(copies, "together", together)
    assert copies.ceiling("frontier", "infer", "sst", 150, 25, 4, rounds=2) == 4 * 2.0 / 2.5
    assert calls == [1, 4, 1, 4]


def test_a_copy_that_cannot_start_leaves_the_ceiling_unmeasured(capsys):
    assert copies.ceiling("no-such-kind", "infer", "complete-4", 4, 2, 2, rounds=1) is None
    assert "KeyError: 'no-such-kind'" in capsys.readouterr().out


def test_copies_of_a_real_cell_run_and_time_together():
    """Two children of a small recursive cell, started together: each times
    at least three passes and both report."""
    cell = ["recursive", "infer", "complete-4", "4", "2", "0.05"]
    times = copies.together(cell, 2)
    assert len(times) >= 6 and all(t > 0 for t in times)


def test_a_copy_past_its_time_is_killed_not_waited_for(monkeypatch):
    """A child that has not said it is ready by `TIMEOUT_S` is killed: the
    run goes on without the ceiling instead of hanging."""
    import time

    import pytest

    monkeypatch.setattr(copies, "TIMEOUT_S", 0.2)  # less than a child's imports take
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="did not start: exit -9"):
        copies.together(["recursive", "infer", "complete-4", "4", "2", "0.05"], 2)
    assert time.perf_counter() - start < 30
