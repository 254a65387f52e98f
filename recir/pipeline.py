"""The lowering pipeline from traced IR to native code, in one readable list.

Each stage is a pass usable as `recir-opt -p <name>`; `lower` stops after a
named stage (as the Toy tutorial's compiler does), `compile` goes all the way
to a callable backed by the object cache.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.transforms.convert_scf_to_cf import ConvertScfToCf

from recir.backend.cache import ObjectCache, cache_key
from recir.backend.runtime import NativeFunction
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import find_entry
from recir.passes.capture_outer_refs import CaptureOuterRefsPass
from recir.passes.convert_recir_to_llvm import ConvertRecirToLlvmPass
from recir.passes.convert_tmath_to_loops import ConvertTmathToLoopsPass
from recir.passes.tmath_fuse_elementwise import TmathFuseElementwisePass

STAGES: tuple[ModulePass, ...] = (
    CaptureOuterRefsPass(),
    TmathFuseElementwisePass(),  # skipped with fuse=False
    ConvertTmathToLoopsPass(),
    ConvertScfToCf(),
    ConvertRecirToLlvmPass(),
)


def lower(module: ModuleOp, until: str | None = None, fuse: bool = True) -> ModuleOp:
    """A lowered copy of `module`, stopping after the pass named `until`."""
    lowered = module.clone()
    ctx = make_context()
    for stage in STAGES:
        if fuse or not isinstance(stage, TmathFuseElementwisePass):
            stage.apply(ctx, lowered)
        if stage.name == until:
            break
    lowered.verify()
    return lowered


def llvm_ir(module: ModuleOp, fuse: bool = True) -> tuple[str, list[str]]:
    """LLVM IR text for `module` and the messages of its run-time checks."""
    from recir.backend.llvm_convert import to_llvm_ir

    lowered = lower(module, fuse=fuse)
    sites = [s.data for s in lowered.attributes.pop("recir.error_sites").data]
    return to_llvm_ir(lowered), sites


def compile_module(module: ModuleOp, entry: str, params: Any = (), *,
                   cache_dir: Path | str | None = None, fuse: bool = True) -> NativeFunction:
    """Native code for `@entry` of `module`, from the object cache when possible."""
    from recir.backend.engine import Engine, compile_object

    signature = find_entry(module, entry).function_type
    cache = ObjectCache(cache_dir)
    key = cache_key(str(module), f"{entry} fuse={fuse}")
    hit = cache.load(key)
    if hit is None:
        start = time.perf_counter()
        ir_text, sites = llvm_ir(module, fuse)
        obj = compile_object(ir_text)
        cache.store(key, obj, {"sites": sites,
                               "seconds": time.perf_counter() - start})
    else:
        obj, sites = hit[0], hit[1]["sites"]
    return NativeFunction(Engine(obj), entry, signature, sites, params)


def compile(model: Any, entry: str | None = None, *,
            cache_dir: Path | str | None = None, fuse: bool = True) -> NativeFunction:
    """Compile a `TracedModel` (weights bound) or a module's `@entry` to native code;
    `fuse=False` keeps one loop per elementwise op."""
    if isinstance(model, ModuleOp):
        if entry is None:
            raise RecirError("error: compiling a module needs the entry function's name")
        return compile_module(model, entry, cache_dir=cache_dir, fuse=fuse)
    return compile_module(model.module, model.entry, list(model.params.values()),
                          cache_dir=cache_dir, fuse=fuse)
