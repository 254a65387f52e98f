"""The lowering pipeline from traced IR to native code, in one readable list.

Each stage is a pass usable as `recir-opt -p <name>`; `lower` stops after a
named stage (as the Toy tutorial's compiler does), `compile` goes all the way
to a callable backed by the object cache.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass
from xdsl.transforms.convert_scf_to_cf import ConvertScfToCf

from recir.backend.cache import ObjectCache, cache_key
from recir.backend.runtime import NativeFunction
from recir.backend.policy import defer_outer_bytes, max_budget
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.dialects import tmath
from recir.interpreter import find_entry
from recir.passes.capture_outer_refs import CaptureOuterRefsPass
from recir.passes.convert_recir_to_llvm import ConvertRecirToLlvmPass
from recir.passes.convert_tmath_to_loops import ConvertTmathToLoopsPass
from recir.passes.invoke_clone_serial import InvokeCloneSerialPass
from recir.passes.invoke_mark_concurrent import InvokeMarkConcurrentPass
from recir.passes.tmath_fuse_elementwise import TmathFuseElementwisePass

STAGES: tuple[ModulePass, ...] = (
    CaptureOuterRefsPass(),
    TmathFuseElementwisePass(),  # skipped with fuse=False
    InvokeMarkConcurrentPass(),  # these two only with threads > 1
    InvokeCloneSerialPass(),
    ConvertTmathToLoopsPass(),  # with policy.defer_outer_bytes()
    ConvertScfToCf(),
    ConvertRecirToLlvmPass(),
)


def lower(module: ModuleOp, until: str | None = None, fuse: bool = True,
          threads: int = 1) -> ModuleOp:
    """A lowered copy of `module` for `threads` threads, stopping after the
    pass named `until`."""
    lowered = module.clone()
    ctx = make_context()
    skip = (() if fuse else (TmathFuseElementwisePass,)) + (
        () if threads > 1 else (InvokeMarkConcurrentPass, InvokeCloneSerialPass))
    for stage in STAGES:
        if isinstance(stage, InvokeCloneSerialPass):
            stage = InvokeCloneSerialPass(budget=max_budget(threads))
        elif isinstance(stage, ConvertTmathToLoopsPass):
            stage = ConvertTmathToLoopsPass(defer_outer_bytes=defer_outer_bytes())
        if not isinstance(stage, skip):
            stage.apply(ctx, lowered)
        if stage.name == until:
            break
    lowered.verify()
    return lowered


MATRIX_OPS = ("tmath.matvec", "adjoint.vecmat", "adjoint.accumulate_outer")


def call_work(module: ModuleOp) -> int:
    """A rough count of the multiply-adds of one call of each function of
    `module`, summed (both branches of an `scf.if` counted): its matrix
    products by matrix size, every other tensor op by result size, one per
    scalar op. Times the input's size it tells a team call from one too small
    to gain from a second thread (`policy.team_pays`)."""
    def elements(v: Any) -> int:  # a dynamic dimension counts as 1
        return math.prod(max(d, 1) for d in tmath.shape_of(v)) if isinstance(
            v.type, TensorType) else 1

    work = 0
    for op in module.walk():
        if op.name in MATRIX_OPS:
            work += max(elements(v) for v in op.operands)
        elif op.results:
            work += sum(elements(r) for r in op.results)
    return work


def llvm_ir(module: ModuleOp, fuse: bool = True, threads: int = 1
            ) -> tuple[str, list[str], list[int], list[int]]:
    """LLVM IR text for `module`, the messages of its run-time checks, the
    arguments whose buffers each thread has its own copy of, and those whose
    outer products are logged (`adjoint.log_reserve`)."""
    from recir.backend.llvm_convert import to_llvm_ir

    lowered = lower(module, fuse=fuse, threads=threads)
    sites = [s.data for s in lowered.attributes.pop("recir.error_sites").data]
    copied = lowered.attributes.pop("recir.thread_copies", None)
    slots = [k.value.data for k in copied.data] if copied is not None else []
    logged = lowered.attributes.pop("recir.outer_logs", None)
    logs = [k.value.data for k in logged.data] if logged is not None else []
    return to_llvm_ir(lowered), sites, slots, logs


def compile_module(module: ModuleOp, entry: str, params: Any = (), *,
                   cache_dir: Path | str | None = None, fuse: bool = True,
                   threads: int | None = 1) -> NativeFunction:
    """Native code for `@entry` of `module`, from the object cache when possible."""
    from recir.backend.engine import Engine, compile_object

    signature = find_entry(module, entry).function_type
    cache = ObjectCache(cache_dir)
    threads = resolve_threads(threads)
    budget = max_budget(threads) if threads > 1 else 0
    # the lowering depends on whether there are tasks and, if so, on the budget
    key = cache_key(str(module), f"{entry} fuse={fuse} tasks={threads > 1} "
                                 f"spawn_budget={budget} defer_outer={defer_outer_bytes()}")
    hit = cache.load(key)
    if hit is None:
        start = time.perf_counter()
        ir_text, sites, copied, logged = llvm_ir(module, fuse, threads)
        obj = compile_object(ir_text)
        cache.store(key, obj, {"sites": sites, "copied": copied, "logged": logged,
                               "seconds": time.perf_counter() - start})
    else:
        obj, sites = hit[0], hit[1]["sites"]
        copied, logged = hit[1].get("copied", []), hit[1].get("logged", [])
    return NativeFunction(Engine(obj), entry, signature, sites, params, threads, copied,
                          call_work(module), logged)


def resolve_threads(threads: int | None) -> int:
    """An explicit count, else $RECIR_NUM_THREADS, else every core; 1 where
    no OpenMP runtime is found (with a warning)."""
    import os
    import warnings

    from recir.backend.engine import openmp

    count = threads or int(os.environ.get("RECIR_NUM_THREADS", 0)) or os.cpu_count() or 1
    if count > 1 and openmp() is None:
        warnings.warn("no OpenMP runtime (libomp.so.5, libgomp.so.1 or $RECIR_OPENMP) "
                      "found: running serially", stacklevel=3)
        return 1
    return count


def compile(model: Any, entry: str | None = None, *,
            cache_dir: Path | str | None = None, fuse: bool = True,
            threads: int | None = None) -> NativeFunction:
    """Compile a `TracedModel` (weights bound) or a module's `@entry` to native code;
    `fuse=False` keeps one loop per elementwise op; `threads` > 1 (None: all
    cores or $RECIR_NUM_THREADS) runs independent invokes as tasks."""
    if isinstance(model, ModuleOp):
        if entry is None:
            raise RecirError("error: compiling a module needs the entry function's name")
        return compile_module(model, entry, cache_dir=cache_dir, fuse=fuse, threads=threads)
    return compile_module(model.module, model.entry, list(model.params.values()),
                          cache_dir=cache_dir, fuse=fuse, threads=threads)
