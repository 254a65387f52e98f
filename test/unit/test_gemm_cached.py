"""A weight packed once for many products (`recir/passes/gemm_cached.py`):
`recir_gemm_<layout>.cached` against NumPy and against the plain kernel (nn:
the same bits), the same B at several heights (one copy, made at its second
product where the plain kernel packs B), then another B."""

import ctypes

import numpy as np
import pytest

from recir.backend.kernels import compiled_gemm
from recir.passes.gemm_cached import ENTRY

I64, PTR = ctypes.c_int64, ctypes.c_void_p
PLAIN = [I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64]
LIBC = ctypes.CDLL(None)
LIBC.free.argtypes = [PTR]
# (n, k) of B: edge tiles (n past a panel, k past a vector), k over a block of depth
SHAPES = [(1, 1), (17, 9), (97, 129), (750, 300), (300, 750)]
HEIGHTS = [1, 3, 10, 40, 7, 160]  # rows at each height: few (nt's dots) to many


def function(name, extra):
    engine = compiled_gemm.engine()
    fn = ctypes.CFUNCTYPE(None, *PLAIN, *extra)(engine.address(name))
    fn.engine = engine
    return fn


def padded(rng, rows, cols, pad=3):
    """A (rows, cols) view inside a NaN-filled buffer, rows `cols + pad` apart."""
    buffer = np.full((rows + 2, cols + pad), np.nan, np.float32)
    view = buffer[1:rows + 1, :cols]
    view[...] = rng.standard_normal((rows, cols))
    return buffer, view


def args(a, b, c, accumulate):
    return [a.shape[0], c.shape[1], a.shape[1], a.ctypes.data, a.strides[0] // 4,
            b.ctypes.data, b.strides[0] // 4, c.ctypes.data, c.strides[0] // 4, accumulate]


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_one_copy_serves_every_height_with_the_plain_kernels_bits(layout, n, k):
    rng = np.random.default_rng(n * k)
    _, weight = padded(rng, n, k) if layout == "nt" else padded(rng, k, n)
    bias = rng.standard_normal(n).astype(np.float32)
    cached = function(f"recir_gemm_{layout}.cached", [PTR] * (2 if layout == "nt" else 1))
    plain = function(f"recir_gemm_{layout}", [])
    biased = ctypes.CFUNCTYPE(None, *PLAIN[:-1], PTR)(
        compiled_gemm.engine().address("recir_gemm_nt_bias"))
    entry = np.zeros(ENTRY, np.int64)
    copies = set()
    try:
        for height, m in enumerate(HEIGHTS):
            _, a = padded(rng, m, k)
            c_buffer, c = padded(rng, m, n)
            start, accumulate = c.copy(), height % 2
            extra = [bias.ctypes.data if height == 2 and layout == "nt" else None] \
                if layout == "nt" else []
            cached(*args(a, weight, c, accumulate), *extra, entry.ctypes.data)
            product = a.astype(np.float64) @ (weight.T if layout == "nt" else weight)
            want = product + (start if accumulate else 0) + (bias if extra and extra[0] else 0)
            np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
            outside = c_buffer.copy()
            outside[1:m + 1, :n] = 0
            assert np.isnan(outside[0]).all() and np.isnan(outside[:, n:]).all()
            again = start.copy()
            if extra and extra[0]:  # C = A B^T + bias
                biased(*args(a, weight, again, accumulate)[:-1], *extra)
            else:
                plain(*args(a, weight, again, accumulate))
            if layout == "nn":  # the plain kernel's bits (nt's may take dot products)
                np.testing.assert_array_equal(c, again)
            else:
                np.testing.assert_allclose(c, again, rtol=1e-5, atol=1e-5 * np.sqrt(k))
            copies.add(int(entry[4]))
        # a copy only where the plain kernel packs B too: nn's large B at 160
        # rows (a small one it reads in place); nt's 750 x 300 (its other
        # shapes take dot products, which cost less than the copy)
        packs = (n, k) == (750, 300) or (layout == "nn" and n * k >= 750 * 300)
        assert len(copies - {0}) <= 1, "packed more than once"
        assert len(copies - {0}) == 1 or not packs, "never packed"
        if copies - {0}:
            assert list(entry[:4]) == [weight.ctypes.data, weight.strides[0] // 4, n, k]
        _, other = padded(rng, *weight.shape)  # another weight: named, then packed afresh
        _, a = padded(rng, 160, k)  # rows enough for nt to pack rather than take dot products
        for product in range(2):
            c = np.zeros((160, n), np.float32)
            cached(*args(a, other, c, 0), *([None] if layout == "nt" else []),
                   entry.ctypes.data)
            np.testing.assert_allclose(c, a.astype(np.float64) @ (
                other.T if layout == "nt" else other), rtol=1e-4, atol=1e-4 * np.sqrt(k))
            assert entry[0] == other.ctypes.data
            assert entry[4] != 0 or not (product and packs), "its second product did not pack"
            assert entry[4] == 0 or product, "a weight's first product packed"
    finally:
        LIBC.free(int(entry[4]) or None)
