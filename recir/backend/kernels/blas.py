"""The thread count of NumPy's BLAS, set at run time.

The benchmarks time NumPy's BLAS (OpenBLAS in NumPy's wheels) beside
recir's kernels at a given thread count. Its thread count is read from the
environment at load time (`bench/run.py` pins it to 1); `set_threads`
changes it through OpenBLAS's own entry point, found among the loaded
libraries. Without OpenBLAS it does nothing.
"""

from __future__ import annotations

import ctypes
from functools import cache

NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
         "openblas_set_num_threads64_", "openblas_set_num_threads")


def openblas_libraries() -> list[ctypes.CDLL]:
    import numpy  # noqa: F401  (loads the BLAS)

    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f
                 if "openblas" in line.lower() and ".so" in line.split()[-1]}
    return [ctypes.CDLL(path) for path in sorted(paths)]


@cache
def setter() -> object | None:
    """OpenBLAS's `openblas_set_num_threads` (by any of its names), if loaded."""
    for lib in openblas_libraries():
        found = next((getattr(lib, n) for n in NAMES if hasattr(lib, n)), None)
        if found is not None:
            found.argtypes = [ctypes.c_int]
            return found
    return None


def set_threads(count: int) -> None:
    found = setter()
    if found is not None:
        found(max(1, int(count)))  # type: ignore[operator]
