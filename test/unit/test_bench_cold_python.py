"""bench/cold_python.py: the segments of a frontier call's Python it times."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import cold_python  # noqa: E402
from recir.backend import frontier_inputs, native_loops, native_schedule  # noqa: E402
from recir.backend.kernels import height_call  # noqa: E402


def test_a_gradient_calls_segments_between_its_native_phases():
    """Each segment between two native phases of a gradient's call, in the
    call's order; every hook on a class is undone."""
    hooked = [(frontier_inputs.InputLayout, "__call__"), (native_loops.HeightLoop, "__init__"),
              (native_schedule, "numbering_kernel"), (height_call.HeightCall, "__init__")]
    before = [getattr(cls, name) for cls, name in hooked]
    found = cold_python.measure("train", [0, 1], calls=3, threads=1)
    assert [getattr(cls, name) for cls, name in hooked] == before
    for segments in found.values():
        # both loops in the numbering call (`kernels/height_call`)
        assert list(segments) == ["start -> layout", "layout -> number", "number -> end"]
        assert all(0 <= s < 1 for s in segments.values())
    text = cold_python.report(found, "train").splitlines()
    assert text[1].split() == ["segment", "0", "MiB", "1", "MiB"]
    assert text[-1].split()[0] == "total" and len(text) == 2 + 3 + 1


def test_below_zero_the_loops_themselves_run_and_name_their_column():
    """`--sweep -1`: the numbering call runs the real loops (what a user's
    call pays), after a sweep that put a function in their place."""
    found = cold_python.measure("infer", [0, -1], calls=3, threads=1)
    assert list(found) == [0, -1]
    for segments in found.values():
        assert list(segments) == ["start -> layout", "layout -> number", "number -> end"]
    assert cold_python.report(found, "infer").splitlines()[1].split() == [
        "segment", "0", "MiB", "loops"]


def test_loops_alone_run_the_real_loops():
    """`--sweep -1` as the only (or first) size: a gradient's numbering call
    runs the real loops from the first timed call (its loop objects are made
    after the hooks), so the losses are a plain call's. (That a size of 0
    MiB then computes nothing held in most runs of the whole suite but not
    all, so it is not asserted here.)"""
    import numpy as np

    from bench.batching import make_params, recir_frontier, workload

    trees, vocab, _ = workload("sst", 25)
    last = trees[50:75]  # the batch of the last of 3 timed calls (after 4 to warm up)
    expected = recir_frontier(make_params(150, vocab), "train", 1)(last)
    found: list = []
    cold_python.measure("train", [-1], calls=3, threads=1, results=found)
    assert np.allclose(found[0], expected, rtol=1e-5, atol=1e-6)
