"""The forward product of a frontier's rows with a weight matrix, natively.

A frontier high in a batch's trees has few rows (at h=256, batch 25, most of
an SST batch's heights have 1-30). OpenBLAS packs the whole weight for
every SGEMM, a cost such small products do not repay. `nt(x, w)` is the
forward product `x @ w.T` (x: m rows of k, w: n rows of k, row-major f32)
as dot products along k (`recir/passes/gemm_kernels.py`'s nt kernel, from
`gemm.py`'s compiled kernels): tiles of x's rows by w's rows, one vector
accumulator a pair, w's tile in L1 while x's rows pass. How it compares with
the host's BLAS: `python bench/run.py smallgemm` (results in
docs/benchmarks.md). The backward products are `gemm.py`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recir.backend.array_address import data_address
from recir.backend.kernels.compiled_gemm import kernel as compiled


def kernel() -> Any:
    """`recir_sgemm_nt(m, n, k, X, ldx, W, ldw, Y, ldy)` as a ctypes function."""
    return compiled("sgemm_nt")


def fits(x: np.ndarray, w: np.ndarray) -> bool:
    """Whether `nt` takes these: f32 matrices with contiguous rows."""
    return (x.dtype == np.float32 and w.dtype == np.float32 and x.ndim == 2 and w.ndim == 2
            and x.strides[1] == 4 and w.strides[1] == 4 and x.shape[1] == w.shape[1]
            and x.strides[0] % 4 == 0 and w.strides[0] % 4 == 0)


def nt(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T for x (m, k), w (n, k) that `fits`."""
    m, k = x.shape
    n = w.shape[0]
    y = np.empty((m, n), np.float32)
    kernel()(m, n, k, data_address(x), x.strides[0] // 4, data_address(w), w.strides[0] // 4,
             data_address(y), n)
    return y
