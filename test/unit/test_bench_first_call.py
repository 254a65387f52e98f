"""bench/first_call.py: each batch's first-call excess over its time later
in a pass, from rotated rounds."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import first_call  # noqa: E402


def test_a_batch_first_in_its_pass_is_compared_with_itself_later():
    calls = {0: [(True, 5.0), (False, 2.0), (False, 2.0), (True, 7.0)],
             1: [(False, 3.0), (True, 3.5), (False, 3.0)]}
    later, extra = first_call.first_call_extra(calls)
    assert later == [2.0, 3.0]
    assert extra == pytest.approx([4.0, 0.5])  # medians 6.0 - 2.0 and 3.5 - 3.0


def test_rotated_rounds_put_every_batch_first_in_turn():
    seen = []
    runs = {1: lambda b: seen.append((1, b)), 2: lambda b: seen.append((2, b))}
    found = first_call.rotated_rounds(runs, ["a", "b", "c"], 3)
    assert [b for t, b in seen[:6]] == ["a", "b", "c", "a", "b", "c"]
    assert [b for t, b in seen[6:9]] == ["b", "c", "a"]
    for t in (1, 2):
        assert [sum(first for first, _ in found[t][k]) for k in range(3)] == [1, 1, 1]


def test_fewer_rounds_than_batches_is_refused_before_any_compile(monkeypatch):
    import argparse

    from bench import batching

    monkeypatch.setattr(batching, "workload", lambda name, batch: ([0] * 100, 10, name))
    monkeypatch.setattr(batching, "recir_frontier", lambda *a: pytest.fail("compiled"))
    args = argparse.Namespace(mode="infer", threads=2, rounds=3, hidden=4)
    with pytest.raises(SystemExit) as stop:
        first_call.run(args)
    assert stop.value.code == "error: --rounds 3: at least 4, the number of batches"
