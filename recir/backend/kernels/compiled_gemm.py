"""The matrix kernels of `recir/passes/gemm_kernels.py`, compiled for the host.

An object per layout (`recir_gemm_nt_bias` is nt's) in one engine, and one for
their team forms, built and compiled on first use and only on an object cache
miss (the key is the host's sizes, `gemm_target.Target`, and the
generator's code, which the cache's compiler digest covers): a warm start
neither builds the xDSL functions nor runs LLVM. A module that calls the
kernels only declares them (`gemm_kernels.declare_in`), and its engine
loads these objects beside it (`link`), so LLVM compiles them once per
host rather than once per module. Each function that needs them names its
cache folder (`folder`), which they come from and are kept in (None: no
function's, as the runtime's direct calls).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

I64, PTR = ctypes.c_int64, ctypes.c_void_p
GEMM = ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64)
PROTOTYPES = {"nn": GEMM, "tn": GEMM, "nt": GEMM,
              "nt_bias": ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, PTR)}


@cache
def engine(folder: Path | None = None) -> Any:
    """Every layout's kernel for the host in one engine, an object a layout
    (built only on a cache miss: the key is the host's sizes and the
    generator's code; LLVM compiles one while the next is built). LLVM's
    default loop passes, unlike row code (`engine.ROW_CODE`): without the
    unroller and loop strength reduction the one-time compile is cheaper,
    but the nt kernel at the frontier's shapes (tens to thousands of rows
    times a few hundred to a thousand) runs measurably slower (alternating
    A/B of both objects side by side in one process)."""
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.passes.gemm_kernels import LAYOUTS, gemm_module
    from recir.passes.gemm_target import host_target

    target = host_target()
    return cached_engine(repr(target), "recir_gemm", *(
        lambda layout=layout: to_llvm_ir(gemm_module([layout], target=target))
        for layout in LAYOUTS), cache_dir=folder)


@cache
def team_engine(folder: Path | None = None) -> Any:
    """The kernels' team forms for the host (`gemm_teams.team_module`),
    calling into `engine`'s kernels; None without an OpenMP runtime."""
    from recir.backend.engine import cached_engine, openmp
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.passes.gemm_kernels import KERNELS, LAYOUTS
    from recir.passes.gemm_target import host_target
    from recir.passes.gemm_teams import team_module

    if openmp() is None:
        return None
    link([KERNELS], folder)
    target = host_target()
    return cached_engine(repr(target), "recir_gemm_teams", lambda: to_llvm_ir(team_module(
        LAYOUTS, target)), cache_dir=folder)


def link(links: Sequence[str], folder: Path | None = None) -> None:
    """Makes the functions a module's `gemm_kernels.LINKS` name resolvable
    by every engine loaded after: each is the address of its code in
    `engine` or `team_engine`, in LLVM's process-wide symbol table; their
    objects from and kept in `folder`, the module's cache folder."""
    import llvmlite.binding as llvm

    from recir.diagnostics import RecirError
    from recir.passes.gemm_kernels import KERNELS, LAYOUTS, TEAMS, entry_names
    from recir.passes.gemm_teams import team_name

    for kind in links:
        if kind == KERNELS:
            found, names = engine(folder), entry_names()
        elif kind == TEAMS:
            found, names = team_engine(folder), [team_name(layout) for layout in LAYOUTS]
            if found is None:
                raise RecirError("error: code compiled for a team needs an OpenMP runtime")
        else:
            raise RecirError(f"error: no compiled kernels named '{kind}'")
        if kind in _linked:
            continue
        for name in names:
            llvm.add_symbol(name, found.address(name))
        _linked.add(kind)


_linked: set[str] = set()  # what `link` has made resolvable in this process


@cache
def kernel(layout: str, folder: Path | None = None) -> Any:
    """`recir_gemm_<layout>` ("nn", "tn", "nt", or "nt_bias" in nt's module)
    as a ctypes function; compiled on first use."""
    compiled = engine(folder)
    fn = PROTOTYPES[layout](compiled.address(f"recir_gemm_{layout}"))
    fn.engine = compiled  # the engine owns the code
    return fn
