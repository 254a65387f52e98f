"""bench/native_scaling.py: the waits it drops chunks by, and its timing of
the native height loops put back after the compile."""

import ctypes
import hashlib
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

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
    """A height loop made while timing adds its calls' seconds, an
    expansion made then and a height loop made after the undo do not."""
    calls = []

    def entry(ctx, plan):
        time.sleep(0.002)
        calls.append(plan)

    native_entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(entry)
    address = ctypes.cast(native_entry, ctypes.c_void_p).value
    native = SimpleNamespace(name="f", engine=SimpleNamespace(address=lambda name: address),
                             inputs=[], outputs=[], kinds=[])
    heights_spec = SimpleNamespace(inputs=[], outputs=[], threads=1)
    made = native_loops.NativeLoop.__init__
    spent = [0.0]
    undo = native_scaling.timed_loops(spent)
    try:
        heights = native_loops.HeightLoop(native, heights_spec)
        expansion = native_loops.NativeExpansion(
            native, SimpleNamespace(inputs=[], moving=0, sites=0))
    finally:
        undo()
    assert native_loops.NativeLoop.__init__ is made
    expansion.function(None, 1)
    assert spent == [0.0]
    heights.function(None, 2)
    assert spent[0] >= 0.002
    before = spent[0]
    native_loops.HeightLoop(native, heights_spec).function(None, 3)
    assert spent[0] == before and calls == [1, 2, 3]


def test_report_gives_each_ratio():
    found = {"mode": "infer", "hidden": 150, "workload": "sst", "batch": 25, "dropped": 3,
             "kept": {1: 20, 2: 17},
             "medians": {1: {"native": 2e-3, "wall": 2.5e-3}, 2: {"native": 1e-3,
                                                               "wall": 1.6e-3}}}
    line = native_scaling.report(found)
    assert "native 1t 2000 us, 2t 1000 us, 2t/1t 2.000x" in line
    assert "1.562x" in line and "kept 20+17, dropped 3" in line


def test_report_names_the_thread_count_timed_against_one():
    found = {"mode": "train", "hidden": 256, "workload": "complete-128", "batch": 25,
             "dropped": 0, "kept": {1: 4, 16: 3},
             "medians": {1: {"native": 8e-3, "wall": 9e-3}, 16: {"native": 1e-3,
                                                               "wall": 2e-3}}}
    line = native_scaling.report(found)
    assert "native 1t 8000 us, 16t 1000 us, 16t/1t 8.000x" in line
    assert "9000 / 2000 us, 4.500x" in line and "kept 4+3, dropped 0" in line


def test_work_split_is_the_callers_cpu_and_the_others():
    before = {1: 100, 2: 1_000, 3: 5_000}
    after = {1: 2_000_100, 2: 501_000, 3: 5_000, 4: 250_000}  # thread 4 started between
    own, others = native_scaling.work_split(before, after, caller=1)
    assert own == pytest.approx(2e-3)
    assert others == pytest.approx(0.75e-3)


def test_workers_spread_leaves_out_the_caller_and_threads_that_did_not_work():
    before = {1: 0, 2: 0, 3: 0, 4: 0, 5: 0}
    # the caller (1), three workers, and another pool's thread that barely ran (5)
    after = {1: 9_000_000, 2: 3_000_000, 3: 4_000_000, 4: 6_000_000, 5: 100_000}
    assert native_scaling.workers_spread(before, after, caller=1) == pytest.approx(
        (3e-3, 4e-3, 6e-3))
    assert all(v != v for v in native_scaling.workers_spread(before, {1: 5}, caller=1))


def test_report_gives_the_workers_spread_with_the_work():
    found = {"mode": "infer", "hidden": 150, "workload": "sst", "batch": 25, "dropped": 0,
             "kept": {1: 2, 4: 2}, "work": True,
             "medians": {1: {"native": 4e-3, "wall": 5e-3, "caller_cpu": 5e-3,
                             "others_cpu": 0.0},
                         4: {"native": 1e-3, "wall": 2e-3, "caller_cpu": 2e-3,
                             "others_cpu": 4.5e-3, "least": 1e-3, "median": 1.5e-3,
                             "most": 2e-3}}}
    text = native_scaling.report(found)
    assert "4t 6500 us (1.300x the work)" in text
    assert "least 1000, median 1500, most 2000 us" in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_thread_cpu_counts_a_busy_threads_work_not_a_sleeping_ones():
    data = bytes(8 << 20)
    caller = threading.get_native_id()
    hashed, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: ([hashlib.sha256(data) for _ in range(8)],
                                              hashed.set(), done.wait()))
    before = native_scaling.thread_cpu_ns()
    worker.start()
    hashed.wait()  # the caller asleep meanwhile: no CPU
    after = native_scaling.thread_cpu_ns()  # the worker still alive: its time still there
    done.set()
    worker.join()
    own, others = native_scaling.work_split(before, after, caller)
    assert others > 0.005  # hashing 64 MB takes milliseconds
    assert own < others


def test_a_measure_times_the_height_loops_of_both_thread_counts(tmp_path, monkeypatch):
    """End to end on small trees: every kept chunk's native loops took
    time (the loops are made at the first call, while the timing is on)
    and less than the call."""
    monkeypatch.setenv("RECIR_CACHE_DIR", str(tmp_path))
    found = native_scaling.measure("infer", 8, "complete-4", 2, native_scaling.CHUNK,
                                   waited=float("inf"))
    for medians in found["medians"].values():
        assert 0 < medians["native"] < medians["wall"]


def test_calls_can_go_through_several_batches_in_turn(tmp_path, monkeypatch):
    """`batches`: each call takes the next batch (rows land on other
    threads than the last call's, as in a training loop); asking for more
    batches than the workload holds says so."""
    monkeypatch.setenv("RECIR_CACHE_DIR", str(tmp_path))
    seen = []
    made = native_scaling.recir_frontier

    def recording(params, mode, threads):
        run = made(params, mode, threads)
        return lambda trees: (seen.append(tuple(id(t) for t in trees)), run(trees))[1]

    monkeypatch.setattr(native_scaling, "recir_frontier", recording)
    found = native_scaling.measure("infer", 8, "complete-4", 2, native_scaling.CHUNK,
                                   waited=float("inf"), batches=3)
    assert found["batches"] == 3 and len(set(seen)) == 3
    assert "(3 batches in turn)" in native_scaling.report(found)
    with pytest.raises(SystemExit, match="fewer than 6 batches of 2"):
        native_scaling.measure("infer", 8, "complete-4", 2, 1, waited=1.0, batches=6)
