"""Products split across threads (`recir/backend/kernels/split.py`): the
cuts, and each kind of part against float64 NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from recir.backend.kernels import split

pytestmark = pytest.mark.skipif(not split.available(), reason="needs libgomp and CBLAS")


def rel(got, expected) -> float:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-30))


@pytest.mark.parametrize("total,parts,step", [(10, 2, 1), (7, 3, 1), (2, 4, 1), (100, 3, 16),
                                              (5, 2, 3), (1, 2, 3), (48, 2, 16)])
def test_ranges_cover_the_work_in_order(total, parts, step):
    cuts = split.ranges(total, parts, step)
    assert cuts[0][0] == 0 and cuts[-1][1] == total and len(cuts) <= parts
    assert all(hi > lo for lo, hi in cuts)
    assert all(a[1] == b[0] and b[0] % step == 0 for a, b in zip(cuts, cuts[1:]))


@pytest.mark.parametrize("trans_a", [split.NO_TRANS, split.TRANS])
@pytest.mark.parametrize("trans_b", [split.NO_TRANS, split.TRANS])
@pytest.mark.parametrize("by_rows", [True, False])
@pytest.mark.parametrize("threads", [2, 3])
def test_sgemm_parts_match_numpy(trans_a, trans_b, by_rows, threads):
    rng = np.random.default_rng(threads)
    m, n, k = 37, 41, 19
    a = rng.standard_normal((k, m) if trans_a == split.TRANS else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if trans_b == split.TRANS else (k, n), dtype=np.float32)
    c = rng.standard_normal((m, n), dtype=np.float32)
    op_a = a.T if trans_a == split.TRANS else a
    op_b = b.T if trans_b == split.TRANS else b
    expected = op_a.astype(np.float64) @ op_b.astype(np.float64) + c
    split.sgemm(trans_a, trans_b, m, n, k, a.ctypes.data, a.shape[1], b.ctypes.data,
                b.shape[1], 1.0, c.ctypes.data, n, threads, by_rows)
    assert rel(c, expected) <= 1e-5


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("shape", [(1, 40, 33), (5, 7, 8), (70, 100, 21)])
def test_product_nt_matches_numpy(small, shape):
    m, n, k = shape
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, k + 3), dtype=np.float32)[:, 2:k + 2]  # row-strided view
    w = rng.standard_normal((n, k), dtype=np.float32)
    y = split.product_nt(x, w, 2, small)
    assert rel(y, x.astype(np.float64) @ w.T.astype(np.float64)) <= 1e-5


def test_every_part_runs_whatever_the_team_size():
    """More parts than threads: threads claim parts until none is left."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 16), dtype=np.float32)
    w = rng.standard_normal((30, 16), dtype=np.float32)
    y = np.full((9, 30), np.nan, np.float32)
    fn = split.address(__import__("recir.backend.kernels.smallgemm", fromlist=["kernel"]).kernel())
    parts = [[split.NT, fn, 9, hi - lo, 16, x.ctypes.data, 16, w.ctypes.data + 4 * lo * 16,
              16, y.ctypes.data + 4 * lo, 30] for lo, hi in split.ranges(30, 10)]
    split.run(parts, 2)
    assert rel(y, x.astype(np.float64) @ w.T) <= 1e-5

