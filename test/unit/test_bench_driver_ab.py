"""bench/driver_ab.py: each way runs the loop where it says, and the hook is undone."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import driver_ab  # noqa: E402
from recir.backend import native_loops, native_schedule, repeat_call  # noqa: E402


def test_each_way_times_both_thread_counts_and_puts_the_policy_back(monkeypatch):
    policy = native_schedule.NativeSchedule.policy
    called = []
    run = native_loops.HeightLoop.__call__
    monkeypatch.setattr(native_loops.HeightLoop, "__call__", lambda self, *args: (
        called.append(native_schedule.NativeSchedule.policy), run(self, *args))[1])
    found = driver_ab.measure("infer", "complete-4", 8, 2, 2, rounds=2)
    assert native_schedule.NativeSchedule.policy is policy
    assert repeat_call.RepeatCall.repeat is driver_ab.REPEAT
    assert set(found) == {(w, t) for w in driver_ab.WAYS for t in (1, 2)}
    assert all(len(v) == 2 and all(0 < s < 1 for s in v) for v in found.values())
    # the loop called from Python in the policy and python ways (every batch,
    # 5 of 2 trees, on each thread count, each round), in the native one only
    # at each function's first calls (its first, and where its scratch grows)
    native = driver_ab.ways()["native"]
    assert sum(way is native for way in called) <= 4
    assert sum(way is not native for way in called) >= 2 * 2 * 5 * 2
    text = driver_ab.report(found).splitlines()
    assert [line.split()[0] for line in text[1:]] == list(driver_ab.WAYS)
    assert float(text[-1].split()[-1]) == 1.0  # python over itself
