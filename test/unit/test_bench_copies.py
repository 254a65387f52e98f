"""bench/copies.py: the host's ceiling for N threads, from N one-thread copies at once."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import copies  # noqa: E402


def test_ceiling_is_copies_times_alone_over_the_slowest_copy(monkeypatch):
    """Alone and together alternate; the median pass alone over the median
    of the rounds' slowest copies (each copy's median pass) gives it: a
    team with even shares waits for its slowest thread."""
    calls = []
    rounds = iter([[[2.5, 2.5, 0.1], [3.0, 3.0, 9.0], [2.5, 2.0, 2.5], [2.0, 2.0, 2.0]],
                   [[2.5, 2.5, 2.5], [3.5, 3.5, 0.1], [2.0, 2.0, 2.0], [2.0, 2.5, 2.5]]])

    def together(cell, count):
        calls.append(count)
        return [[2.0, 2.0, 9.0]] if count == 1 else next(rounds)

    monkeypatch.setattr(copies, "together", together)
    assert copies.ceiling("frontier", "infer", "sst", 150, 25, 4, rounds=2) == pytest.approx(
        4 * 2.0 / 3.25)
    assert calls == [1, 4, 1, 4]


def test_a_copy_that_cannot_start_leaves_the_ceiling_unmeasured(capsys):
    assert copies.ceiling("no-such-kind", "infer", "complete-4", 4, 2, 2, rounds=1) is None
    assert "KeyError: 'no-such-kind'" in capsys.readouterr().out


def test_copies_of_a_real_cell_run_and_time_together():
    """Two children of a small recursive cell, started together: each times
    at least three passes and both report."""
    cell = ["recursive", "infer", "complete-4", "4", "2", "0.05"]
    times = copies.together(cell, 2)
    assert len(times) == 2 and all(len(each) >= 3 and min(each) > 0 for each in times)


def test_a_copy_past_its_time_is_killed_not_waited_for(monkeypatch):
    """A child that has not said it is ready by `TIMEOUT_S` is killed: the
    run goes on without the ceiling instead of hanging."""
    import time

    monkeypatch.setattr(copies, "TIMEOUT_S", 0.2)  # less than a child's imports take
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="did not start: exit -9"):
        copies.together(["recursive", "infer", "complete-4", "4", "2", "0.05"], 2)
    assert time.perf_counter() - start < 30
