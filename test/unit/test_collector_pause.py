"""The garbage collector's pause during compiles (`pipeline.CollectorPause`):
off while any compile runs, back as it was when the last one ends."""

from __future__ import annotations

import gc
import threading

from recir.pipeline import CollectorPause


def test_the_collector_resumes_when_the_last_overlapping_compile_ends():
    pause, inside, release = CollectorPause(), threading.Event(), threading.Event()

    def other_compile() -> None:
        with pause():
            inside.set()
            release.wait(10)

    assert gc.isenabled()
    thread = threading.Thread(target=other_compile)
    thread.start()
    inside.wait(10)
    with pause():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other compile still runs
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off_and_a_failing_compile_resumes_it():
    pause = CollectorPause()
    gc.disable()
    try:
        with pause():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

    @pause()
    def failing() -> None:
        assert not gc.isenabled()
        raise ValueError("bad input")

    try:
        failing()
    except ValueError:
        pass
    assert gc.isenabled()
