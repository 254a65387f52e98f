"""The frontier's matrix products natively: `C (+)= A B`, `A^T B` and `A B^T`.

A BLAS tuned for large products leaves much of a core's FMA rate unused on
a frontier's shapes (few rows, or a weight's gradient summed over few). The
kernels are generated in the llvm dialect by `recir/passes/gemm_kernels.py`
(the same that tmath.matmul lowers to), sized for the host CPU's vector
registers and caches, and compiled once per host (`compiled_gemm.py`):
`recir_gemm_nn(m, n, k, A, lda, B, ldb, C, ldc, accumulate)` computes C
(+)= A B (row-major f32, A m x k, B k x n), `recir_gemm_tn` the same with A
read as a transpose (A[i, p] at i + p lda: dY^T for a weight gradient), and
`recir_gemm_nt` the forward `x @ W.T` (`gemm(x, w.T)`). No load or store
leaves the arrays. Against the host's BLAS: `python bench/run.py smallgemm`.

On more than one thread each runs in its team form (`team_kernel`:
`recir/passes/row_products.py`'s `recir_gemm_<layout>.team`, the one a
batched function's products over rows call): a libgomp team whose threads
each compute their own block of C's rows or columns, so no two write one
element and one thread count gives the same bits on every call.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from recir.backend import policy
from recir.backend.array_address import data_address
from recir.backend.kernels.compiled_gemm import I64, PTR, kernel

# the kernel's arguments, then the most threads and the least work (multiply-adds) for a team
TEAM = ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64, I64, I64)


@cache
def team_kernel(layout: str, folder: Path | None = None) -> Any:
    """`recir_gemm_<layout>.team(m, n, k, A, lda, B, ldb, C, ldc, accumulate,
    threads, min_work)` as a ctypes function, or None without an OpenMP
    runtime. It calls the kernel itself below `min_work` multiply-adds or
    with fewer than two register tiles of rows or of columns. `folder`: the
    calling function's cache folder (`compiled_gemm`)."""
    from recir.backend.kernels.compiled_gemm import team_engine

    engine = team_engine(folder)
    if engine is None:
        return None
    fn = TEAM(engine.address(f"recir_gemm_{layout}.team"))
    fn.engine = engine  # the engine owns the code
    return fn


def run(layout: str, m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int, c: int,
        ldc: int, accumulate: int, threads: int = 1, min_work: int | None = None,
        folder: Path | None = None) -> None:
    """C (+)= op(A) op(B) (f32 at addresses) by the layout's kernel, or on a
    team of up to `threads` where one pays: `min_work` (None: the machine's
    `team_min_work`, by the costs kept in `folder`; 0 where the caller has
    decided, -1 for never)."""
    if threads > 1:
        least = policy.team_min_work(threads, policy.costs(folder)) if min_work is None \
            else min_work
        team = team_kernel(layout, folder) if least >= 0 else None
        if team is not None:
            team(m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads, least)
            return
    kernel(layout, folder)(m, n, k, a, lda, b, ldb, c, ldc, accumulate)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, threads: int = 1,
         min_work: int | None = None) -> np.ndarray:
    """a @ b (c += a @ b if `c` is given) for f32 matrices with contiguous
    rows, `a` or `b` also a transposed view of one (not both); on up to
    `threads` threads (`run`)."""
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n), np.float32) if c is None else c
    layout, lda = ("nn", a.strides[0] // 4) if a.strides[1] == 4 else ("tn", a.strides[1] // 4)
    ldb = b.strides[0] // 4
    if b.strides[1] != 4:
        if layout != "nn":
            raise ValueError("gemm: a and b cannot both be transposed views")
        layout, ldb = "nt", b.strides[1] // 4
    run(layout, m, n, k, data_address(a), lda, data_address(b), ldb, data_address(out),
        out.strides[0] // 4, int(c is not None), threads, min_work)
    return out


LOGS = ctypes.CFUNCTYPE(None, I64, I64, PTR, I64, PTR, I64, I64, I64, I64)


@cache
def logs_kernel(folder: Path | None = None) -> Any:
    """`recir_gemm_tn.logs` (`gemm_teams.logs_team_function`) as a ctypes
    function, or None without an OpenMP runtime."""
    from recir.backend.kernels.compiled_gemm import team_engine
    from recir.passes.gemm_teams import LOGS as NAME

    engine = team_engine(folder)
    if engine is None:
        return None
    fn = LOGS(engine.address(NAME))
    fn.engine = engine
    return fn


def add_outer_logs(g: int, m: int, n: int, segments: np.ndarray, threads: int,
                   min_work: int, folder: Path | None = None) -> None:
    """G (m x n, row-major at `g`) += DY^T X summed over segments (i64
    rows: DY's address, its row stride, X's, its row stride, rows), on a
    team of up to `threads` that reads and writes G once where it has
    `min_work` multiply-adds (-1: never); without an OpenMP runtime, a tn
    product a segment. `folder`: the calling function's cache folder."""
    team = logs_kernel(folder)
    if team is None:
        for dy, ldy, x, ldx, k in segments.tolist():
            add_outer_at(g, m, n, dy, ldy, x, ldx, k, folder=folder)
        return
    team(m, n, g, n, data_address(segments), len(segments), int(segments[:, 4].sum()),
         threads if min_work >= 0 else 1, max(min_work, 0))


def add_outer_at(g: int, m: int, n: int, dy: int, ldy: int, x: int, ldx: int, k: int,
                 threads: int = 1, min_work: int | None = None,
                 folder: Path | None = None) -> None:
    """G (m x n, row-major at `g`) += DY^T X over k rows of DY (m floats each,
    `ldy` apart) and of X (n floats, `ldx` apart), all f32 at addresses: the
    tn kernel, on a team of up to `threads` where one pays (`run`)."""
    if k > 0:
        run("tn", m, n, k, dy, ldy, x, ldx, g, n, 1, threads, min_work, folder)

