"""The thread count of NumPy's BLAS, set at run time.

The frontier scheduler's NumPy path does its matrix-matrix work through
NumPy's BLAS (OpenBLAS in NumPy's wheels). Its thread count is read from the
environment at load time (`bench/run.py` pins it to 1); `set_threads`
changes it through OpenBLAS's own entry point, found among the loaded
libraries. Without OpenBLAS it does nothing and says so (`available()` is
False). `add_outer` adds a frontier's weight gradient into the accumulator
in place with `gemm.py`'s kernel: NumPy's `acc += dy.T @ x` writes a
temporary as big as the weight matrix and reads it back.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np

NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
         "openblas_set_num_threads64_", "openblas_set_num_threads")
GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
           "openblas_get_num_threads64_", "openblas_get_num_threads")


SGEMMS = (("scipy_cblas_sgemm64_", ctypes.c_int64), ("cblas_sgemm64_", ctypes.c_int64),
          ("scipy_cblas_sgemm", ctypes.c_int), ("cblas_sgemm", ctypes.c_int))
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def openblas_libraries() -> list[ctypes.CDLL]:
    import numpy  # noqa: F401  (loads the BLAS)

    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f
                 if "openblas" in line.lower() and ".so" in line.split()[-1]}
    return [ctypes.CDLL(path) for path in sorted(paths)]


@cache
def library() -> tuple[object, object] | None:
    for lib in openblas_libraries():
        setter = next((getattr(lib, n) for n in NAMES if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            setter.argtypes = [ctypes.c_int]
            return setter, getter
    return None


def available() -> bool:
    return library() is not None


def threads() -> int:
    found = library()
    return int(found[1]()) if found is not None else 1  # type: ignore[operator]


def set_threads(count: int) -> None:
    found = library()
    if found is not None:
        found[0](max(1, int(count)))  # type: ignore[operator]


@cache
def sgemm() -> object | None:
    """CBLAS sgemm of the loaded OpenBLAS (64-bit integers in NumPy's wheels)."""
    for lib in openblas_libraries():
        for name, integer in SGEMMS:
            if hasattr(lib, name):
                fn = getattr(lib, name)
                fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer,
                               integer, ctypes.c_float, ctypes.c_void_p, integer,
                               ctypes.c_void_p, integer, ctypes.c_float, ctypes.c_void_p,
                               integer]
                fn.restype = None
                return fn
    return None


def add_outer(acc: np.ndarray, dy: np.ndarray, x: np.ndarray, threads: int = 1) -> None:
    """acc += dy.T @ x for a frontier: dy (n, m), x (n, k), acc (m, k), by
    `gemm.py`'s kernel reading dy as a transpose (`python bench/run.py
    smallgemm` compares it with OpenBLAS); on `threads` > 1 cut by acc's
    rows across a team (`split.py`)."""
    from recir.batching import gemm

    n, m = dy.shape
    k = x.shape[1]
    if acc.dtype != np.float32 or not acc.flags.c_contiguous or acc.shape != (m, k) or (
            x.shape[0] != n):
        acc += dy.T @ x
        return
    dy = np.ascontiguousarray(dy, np.float32)
    x = np.ascontiguousarray(x, np.float32)
    gemm.add_outer_at(acc.ctypes.data, m, k, dy.ctypes.data, m, x.ctypes.data, k, n, threads)
