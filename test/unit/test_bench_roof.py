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


class FakeClocks:
    """time's clocks for `wait_quiet`: each sleep of a window advances the
    wall clock by it and the process's CPU clock by `busy[k]` of it (the
    other threads' use over window k), 0 after the list."""

    def __init__(self, busy: list[float]):
        self.busy, self.windows, self.wall, self.cpu = busy, 0, 0.0, 0.0

    def sleep(self, seconds: float) -> None:
        share = self.busy[self.windows] if self.windows < len(self.busy) else 0.0
        self.wall += seconds
        self.cpu += share * seconds
        self.windows += 1


def test_wait_quiet_waits_until_a_window_without_other_threads_busy(monkeypatch):
    from bench import common

    for busy, quiet, windows in (([], True, 1),  # quiet at once: one window
                                 ([1.0, 0.9, 0.5], True, 4),  # a pool spinning down
                                 ([0.2], True, 1),  # under a quarter of a core: quiet
                                 ([1.0] * 1000, False, 4)):  # never: gives up at max_s
        clocks = FakeClocks(busy)
        monkeypatch.setattr(common.time, "sleep", clocks.sleep)
        monkeypatch.setattr(common.time, "perf_counter", lambda c=clocks: c.wall)
        monkeypatch.setattr(common.time, "process_time", lambda c=clocks: c.cpu)
        assert common.wait_quiet(window_s=0.25, max_s=1.0) is quiet
        assert clocks.windows == windows, busy[:4]
