"""bench/column_split.py: both products it times are checked against NumPy,
and each row reports the two times and their ratio."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import column_split  # noqa: E402


def test_each_row_times_the_whole_and_the_half_product():
    rows = column_split.measure(8, [1, 3], repeats=1)
    assert [r["rows"] for r in rows] == [1, 3]
    for r in rows:
        assert r["whole_us"] > 0 and r["half_us"] > 0
        assert r["half_over_whole"] == pytest.approx(r["half_us"] / r["whole_us"])


def test_the_half_product_is_checked(monkeypatch):
    from recir.backend.kernels import gemm

    real = gemm.gemm
    monkeypatch.setattr(gemm, "gemm", lambda a, b, *rest, **kw: real(a, b) + 1)
    with pytest.raises(AssertionError):
        column_split.measure(8, [2], repeats=1)
