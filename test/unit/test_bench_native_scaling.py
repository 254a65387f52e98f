"""bench/native_scaling.py: the waits it drops chunks by, and its timing of
the native height loops put back after the compile."""

import hashlib
import os
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import native_scaling  # noqa: E402
from recir.backend import native_loops  # noqa: E402


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_waits_grow_while_threads_outnumber_the_cores():
    before = native_scaling.waited_ns()
    assert before is not None and before >= 0
    data = bytes(8 << 20)  # hashlib lets go of the GIL: the threads run at once
    busy = [threading.Thread(target=lambda: [hashlib.sha256(data) for _ in range(4)])
            for _ in range(2 * (os.cpu_count() or 1) + 2)]
    for t in busy:
        t.start()
    for t in busy:
        t.join()
    after = native_scaling.waited_ns()
    assert after is not None and after - before > 1_000_000  # over a millisecond runnable


def test_timing_wraps_height_loops_only_and_is_undone():
    made = native_loops.NativeLoop.__init__
    spent = [0.0]
    undo = native_scaling.timed_loops(spent)
    assert native_loops.NativeLoop.__init__ is not made
    undo()
    assert native_loops.NativeLoop.__init__ is made


def test_report_gives_each_ratio():
    found = {"mode": "infer", "hidden": 150, "workload": "sst", "batch": 25, "dropped": 3,
             "kept": {1: 20, 2: 17},
             "medians": {1: {"native": 2e-3, "wall": 2.5e-3}, 2: {"native": 1e-3,
                                                               "wall": 1.6e-3}}}
    line = native_scaling.report(found)
    assert "native 1t 2000 us, 2t 1000 us, 2t/1t 2.000x" in line
    assert "1.562x" in line and "kept 20+17, dropped 3" in line
