"""The thread count of NumPy's BLAS, set at run time.

The benchmarks time NumPy's BLAS (OpenBLAS in NumPy's wheels) beside
recir's kernels at a given thread count. Its thread count is read from the
environment at load time (`bench/run.py` pins it to 1); `set_threads`
changes it through OpenBLAS's own entry point, found among the loaded
libraries. Without OpenBLAS it does nothing and says so (`available()` is
False).
"""

from __future__ import annotations

import ctypes
from functools import cache

NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
         "openblas_set_num_threads64_", "openblas_set_num_threads")
GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
           "openblas_get_num_threads64_", "openblas_get_num_threads")


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

