"""bench/roof.py, peers.py, batching_report.py and openmp.py: the products the
roof times compute what NumPy computes, and the tables read their rows right."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import batching_report, openmp, peers, roof  # noqa: E402


def test_shapes_are_the_frontier_products():
    got = roof.shapes(256, [25, 400])
    assert got[0] == ("leaf x W^T", "nt", 800, 768, 256)
    assert ("node x U^T", "nt", 25, 1280, 512) in got
    assert ("node dY U", "nn", 400, 512, 1280) in got
    assert ("node dY^T X", "tn", 1280, 512, 400) in got


@pytest.mark.parametrize("layout", ["nt", "nn", "tn"])
@pytest.mark.parametrize("threads", [1, 2])
def test_recir_products_match_numpy(layout, threads):
    m, n, k = 37, 40, 53  # no multiple of a tile or a vector
    a, b = roof.operands(layout, m, n, k)
    want = roof.numpy_product(layout, a, b)().astype(np.float64)
    got = roof.recir_product(layout, a, b, threads)()  # tn: the first call's sum
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_torch_products_match_numpy():
    pytest.importorskip("torch")
    for layout in ("nt", "nn", "tn"):
        a, b = roof.operands(layout, 9, 11, 13)
        np.testing.assert_allclose(roof.torch_product(layout, a, b)().numpy(),
                                   roof.numpy_product(layout, a, b)(), rtol=1e-5, atol=1e-5)


def test_rate_is_flops_over_time():
    assert 0 < roof.rate(lambda: None, 1.0, 2) < float("inf")


def test_roof_is_the_best_rate_of_any_library():
    rows = [{"gflops": {"numpy": 50.0, "recir": 70.0}}, {"gflops": {"numpy": 90.0}}]
    assert roof.roof_of(rows) == {"numpy": 90.0, "recir": 70.0, "roof": 90.0}
    assert roof.ratio_to_peer({"gflops": {"numpy": 50.0, "torch": 80.0, "recir": 40.0}}) == 0.5


def test_auto_over_best():
    row = {"trees_per_s": {"recir-frontier": 100.0, "recir-recursive": 80.0,
                           "torch-level": 500.0}, "auto": "recursive*"}
    assert batching_report.auto_over_best(row) == (80.0, 0.8, "frontier")
    assert batching_report.auto_over_best({"trees_per_s": {}, "auto": "frontier"}) == (
        None, None, None)


def test_blas_settings_keep_only_blas_and_openmp_variables(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("KMP_BLOCKTIME", "1")
    monkeypatch.setenv("NOT_BLAS", "x")
    got = peers.blas_settings()
    assert got["OPENBLAS_CORETYPE"] == "Haswell" and got["KMP_BLOCKTIME"] == "1"
    assert "NOT_BLAS" not in got
    assert all(k.startswith(peers.PREFIXES) for k in got)


def test_openblas_kernel_is_named():
    cores = peers.openblas_cores()
    assert all(isinstance(c, str) and c for c in cores)


def test_speedups_over_one_thread():
    assert openmp.speedups({"1": 10.0, "2": 5.0, "4": 4.0}) == {"1": 1.0, "2": 2.0, "4": 2.5}
    assert openmp.speedups({"2": 5.0}) == {}
    assert openmp.default_runtimes()[:2] == ["libgomp.so.1", "libomp.so.5"]
    assert os.path.basename(openmp.default_runtimes()[2]) == "libiomp5.so"


def spinning(seconds: float | None) -> tuple[object, object]:
    """A thread that busy-waits for `seconds` (None: until told to stop), as a
    pool's worker does after a call; the thread and its stop event."""
    import threading
    import time

    stop = threading.Event()
    end = None if seconds is None else time.perf_counter() + seconds

    def spin() -> None:
        while not stop.is_set() and (end is None or time.perf_counter() < end):
            pass

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    return thread, stop


def test_wait_quiet_waits_for_a_spinning_thread():
    import time

    from bench.common import wait_quiet

    thread, _ = spinning(0.3)
    start = time.perf_counter()
    assert wait_quiet(max_s=5.0)
    assert time.perf_counter() - start >= 0.25  # not before the spinning ended
    thread.join()
    start = time.perf_counter()
    assert wait_quiet(max_s=5.0)  # quiet already: one window
    assert time.perf_counter() - start < 0.5


def test_wait_quiet_gives_up_after_max_s():
    from bench.common import wait_quiet

    thread, stop = spinning(None)
    try:
        assert not wait_quiet(max_s=0.1)
    finally:
        stop.set()
        thread.join()
