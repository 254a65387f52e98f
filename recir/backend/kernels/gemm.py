"""The frontier's matrix products natively: `C (+)= A B`, `A^T B` and `A B^T`.

A BLAS tuned for large products leaves much of a core's FMA rate unused on
a frontier's shapes (few rows, or a weight's gradient summed over few). The
kernels are generated in the llvm dialect by `recir/passes/gemm_kernels.py`
(the same that tmath.matmul lowers to), sized for the host CPU's vector
registers and caches, and compiled once per host (`compiled_gemm.py`):
`recir_gemm_nn(m, n, k, A, lda, B, ldb, C, ldc, accumulate)` computes C
(+)= A B (row-major f32, A m x k, B k x n), `recir_gemm_tn` the same with A
read as a transpose (A[i, p] at i + p lda: dY^T for a weight gradient), and
`recir_sgemm_nt` the forward `x @ W.T` (`smallgemm.py`). No load or store
leaves the arrays. Against the host's BLAS: `python bench/run.py smallgemm`.
"""

from __future__ import annotations

import numpy as np

from recir.backend.array_address import data_address
from recir.backend.kernels.compiled_gemm import kernel

FEW_ROWS = 16  # weight gradients of fewer rows run on one thread (a classifier's)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """a @ b (c += a @ b if `c` is given) for f32 matrices with contiguous
    rows, `a` also a transposed view of one."""
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n), np.float32) if c is None else c
    layout, lda = ("nn", a.strides[0] // 4) if a.strides[1] == 4 else ("tn", a.strides[1] // 4)
    kernel(layout)(m, n, k, data_address(a), lda, data_address(b), b.strides[0] // 4,
                   data_address(out), out.strides[0] // 4, int(c is not None))
    return out


def add_outer_at(g: int, m: int, n: int, dy: int, ldy: int, x: int, ldx: int, k: int,
                 threads: int = 1) -> None:
    """G (m x n, row-major at `g`) += DY^T X over k rows of DY (m floats each,
    `ldy` apart) and of X (n floats, `ldx` apart), all f32 at addresses: the
    tn kernel, on a team of `threads` cut by G's rows (`split.py`)."""
    from recir.backend.kernels import split

    if k <= 0:
        return
    if threads > 1 and m >= FEW_ROWS and split.available():
        fn = split.address(kernel("tn"))
        split.run([[split.NN, fn, hi - lo, n, k, dy + 4 * lo, ldy, x, ldx, g + 4 * lo * n, n, 1]
                   for lo, hi in split.ranges(m, threads, 16)], threads)
        return
    kernel("tn")(m, n, k, dy, ldy, x, ldx, g, n, 1)


def add_outer(acc: np.ndarray, dy: np.ndarray, x: np.ndarray, threads: int = 1) -> None:
    """acc += dy.T @ x for a frontier: dy (n, m), x (n, k), acc (m, k), in
    place (NumPy's `acc += dy.T @ x` writes a temporary as big as the weight
    matrix and reads it back), by the tn kernel reading dy as a transpose
    (`python bench/run.py smallgemm` compares it with OpenBLAS); on
    `threads` > 1 cut by acc's rows across a team (`split.py`)."""
    n, m = dy.shape
    k = x.shape[1]
    if acc.dtype != np.float32 or not acc.flags.c_contiguous or acc.shape != (m, k) or (
            x.shape[0] != n):
        acc += dy.T @ x
        return
    dy = np.ascontiguousarray(dy, np.float32)
    x = np.ascontiguousarray(x, np.float32)
    add_outer_at(acc.ctypes.data, m, k, dy.ctypes.data, m, x.ctypes.data, k, n, threads)


def nn_parts(m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int, c: int, ldc: int,
             accumulate: int, parts: int) -> list[list[int]]:
    """`split.py` records of `recir_gemm_nn` for C (+)= A B (f32 at addresses),
    cut by C's columns into `parts` shares (multiples of 16)."""
    from recir.backend.kernels import split

    fn = split.address(kernel("nn"))
    return [[split.NN, fn, m, hi - lo, k, a, lda, b + 4 * lo, ldb, c + 4 * lo, ldc, accumulate]
            for lo, hi in split.ranges(n, parts, 16)]
