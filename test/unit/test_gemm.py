"""The broadcast-and-accumulate kernels (`recir/backend/kernels/gemm.py`) against NumPy."""

import numpy as np
import pytest

from recir.backend.kernels import gemm

SHAPES = [(1, 1, 1), (3, 17, 9), (4, 96, 128), (5, 97, 129), (7, 300, 750), (33, 256, 1280)]


def padded(rng, rows, cols, pad=5):
    """A (rows, cols) view inside a NaN-filled buffer: reading or writing
    next to it would show as NaN in the result or in the padding."""
    buffer = np.full((rows + 2, cols + pad), np.nan, np.float32)
    view = buffer[1:rows + 1, :cols]
    view[...] = rng.standard_normal((rows, cols))
    return buffer, view


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_nn_matches_numpy_and_stays_inside_its_arrays(m, n, k, accumulate):
    rng = np.random.default_rng(m * n + k)
    _, a = padded(rng, m, k)
    _, b = padded(rng, k, n)
    c_buffer, c = padded(rng, m, n)
    want = a.astype(np.float64) @ b + (c if accumulate else 0)
    got = gemm.gemm(a, b, c) if accumulate else gemm.gemm(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    outside = c_buffer.copy()
    outside[1:m + 1, :n] = 0
    assert np.isnan(outside[0]).all() and np.isnan(outside[:, n:]).all()


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_tn_reads_a_transposed_view(m, n, k):
    rng = np.random.default_rng(k)
    dy = rng.standard_normal((k, m)).astype(np.float32)
    _, x = padded(rng, k, n)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    want = acc + dy.T.astype(np.float64) @ x
    np.testing.assert_allclose(gemm.gemm(dy.T, x, acc), want, rtol=1e-4,
                               atol=1e-4 * np.sqrt(k))


def test_a_classifier_gradient_goes_through_the_tn_kernel():
    rng = np.random.default_rng(1)
    dy = rng.standard_normal((994, 5)).astype(np.float32)
    x = rng.standard_normal((994, 256)).astype(np.float32)
    acc = rng.standard_normal((5, 256)).astype(np.float32)
    want = acc + dy.T.astype(np.float64) @ x
    gemm.add_outer(acc, dy, x, threads=2)
    np.testing.assert_allclose(acc, want, rtol=1e-4, atol=1e-3)
