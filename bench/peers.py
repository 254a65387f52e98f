"""Which BLAS and OpenMP each peer runs on, so a ratio can be read against its machine.

NumPy's wheels bring OpenBLAS, which picks its kernels (Haswell, SkylakeX,
Zen...) from the host at load time unless `OPENBLAS_CORETYPE` forces one;
PyTorch's CPU wheels link MKL (and oneDNN), which pick theirs from the CPU
vendor and `MKL_*` settings. A ratio against a peer measured on other
kernels says little, so every run records: the kernels and thread counts of
the loaded BLAS and OpenMP libraries (threadpoolctl, where installed; else
OpenBLAS's own `get_corename`), NumPy's build configuration, PyTorch's
(`torch.__config__.show()`), and every `OPENBLAS_*`, `MKL_*`, `OMP_*`,
`KMP_*` and `GOMP_*` variable.
"""

from __future__ import annotations

import os
from typing import Any

PREFIXES = ("OPENBLAS_", "MKL_", "OMP_", "KMP_", "GOMP_")
CORENAMES = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
             "openblas_get_corename64_", "openblas_get_corename")


def blas_settings() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(PREFIXES)}


def numpy_config() -> dict[str, Any]:
    import numpy as np

    try:
        deps = np.show_config(mode="dicts").get("Build Dependencies", {})
    except TypeError:  # numpy < 1.26 prints only
        return {}
    return {k: {f: v.get(f) for f in ("name", "version", "openblas configuration")}
            for k, v in deps.items() if k in ("blas", "lapack")}


def openblas_cores() -> list[str]:
    """OpenBLAS's kernel name from the libraries in this process, without threadpoolctl."""
    import ctypes

    from recir.batching.blas import openblas_libraries

    names = []
    for lib in openblas_libraries():
        fn = next((getattr(lib, n) for n in CORENAMES if hasattr(lib, n)), None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            names.append(fn().decode())
    return names


def loaded_libraries() -> list[dict[str, Any]]:
    """threadpoolctl's view: one entry per BLAS / OpenMP library loaded."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"internal_api": "openblas", "architecture": core,
                 "note": "threadpoolctl not installed"} for core in openblas_cores()]
    keep = ("internal_api", "prefix", "version", "architecture", "num_threads", "filepath",
            "threading_layer")
    return [{k: v for k, v in lib.items() if k in keep} for lib in threadpool_info()]


def torch_config() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"skipped": "torch not installed"}
    return {"version": torch.__version__, "show": torch.__config__.show(),
            "parallel_info": torch.__config__.parallel_info(),
            "mkl": torch.backends.mkl.is_available(),
            "mkldnn": torch.backends.mkldnn.is_available()}


def blas_report() -> dict[str, Any]:
    """Everything above, with torch imported first so its libraries are listed."""
    torch = torch_config()
    return {"env": blas_settings(), "numpy": numpy_config(), "torch": torch,
            "libraries": loaded_libraries()}


def summary(report: dict[str, Any]) -> str:
    """One line per library: what it is, its kernels and threads."""
    lines = []
    for lib in report["libraries"]:
        name = os.path.basename(lib.get("filepath", "")) or lib.get("internal_api", "?")
        lines.append(f"  {lib.get('internal_api', '?')} {lib.get('version') or ''} "
                     f"({name}): kernels {lib.get('architecture') or '-'}, "
                     f"{lib.get('num_threads', '-')} threads")
    capability = next((line.strip() for line in report["torch"].get("show", "").splitlines()
                       if "CPU capability" in line), None)
    if capability:
        lines.append(f"  torch: {capability}")
    env = report["env"]
    lines.append("  BLAS/OpenMP settings: " + (", ".join(f"{k}={v}" for k, v in env.items())
                                               or "none"))
    return "\n".join(lines)
