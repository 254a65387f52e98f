"""The matrix kernels of `recir/passes/gemm_kernels.py`, compiled for the host.

One module per layout (`recir_sgemm_nt` is nt's), built and compiled on its
first use and only on an object cache miss (the key is the host's sizes,
`gemm_target.Target`, and the generator's code, which the cache's compiler
digest covers): a warm start neither builds the xDSL functions nor runs LLVM.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

I64, PTR = ctypes.c_int64, ctypes.c_void_p
PROTOTYPES = {"nn": ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64),
              "tn": ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64),
              "nt": ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64),
              "sgemm_nt": ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64),
              "nt_bias": ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, PTR)}
NAMES = {"sgemm_nt": "recir_sgemm_nt", "nt_bias": "recir_gemm_nt_bias"}  # in nt's module


@cache
def engine(layout: str) -> Any:
    """The compiled kernel of `layout` for the host (built only on a cache
    miss: the key is the host's sizes and the generator's code)."""
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.passes.gemm_kernels import gemm_module
    from recir.passes.gemm_target import host_target

    target = host_target()
    return cached_engine(repr(target), f"recir_gemm_{layout}", lambda: to_llvm_ir(gemm_module(
        [layout], target=target)))


@cache
def kernel(layout: str) -> Any:
    """`recir_gemm_<layout>` ("nn", "tn", "nt"), `recir_sgemm_nt`
    ("sgemm_nt") or `recir_gemm_nt_bias` ("nt_bias") as a ctypes function;
    compiled on first use."""
    name = NAMES.get(layout, f"recir_gemm_{layout}")
    compiled = engine("nt" if layout in NAMES else layout)
    fn = PROTOTYPES[layout](compiled.address(name))
    fn.engine = compiled  # the engine owns the code
    return fn
