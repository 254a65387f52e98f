"""The pass lists from traced IR to native code, as `recir-opt -p` strings.

INFERENCE lowers a model; GRADIENT differentiates it (INFERENCE then lowers
the result); `passes_for` adds what a call's options change (fusion off, the
task passes and their spawn budget). Every entry point runs these strings
(`run_passes`): `lower` stops after a named pass, as the Toy tutorial's
compiler does, and `compile` goes on to a callable backed by the object cache.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import (ArrayAttr, DictionaryAttr, ModuleOp,
                                   SymbolRefAttr)
from xdsl.ir import Attribute
from xdsl.passes import PassPipeline
from xdsl.transforms import get_all_passes

from recir.backend import interrupts, settings
from recir.backend.arguments import check_native_signature, whole_number
from recir.backend.cache import ObjectCache, cache_key, located_text, stored_function_type
from recir.backend.background import Deferred
from recir.backend.engine import CollectorPause, collector_paused  # noqa: F401 (re-exported)
from recir.backend.engine import Engine
from recir.backend.llvm_split import split_module
from recir.backend.llvm_workers import compile_parts
from recir.backend.policy import costs, defer_outer_bytes, max_budget, team_min_work
from recir.backend.runtime import NativeFunction
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import find_entry
from recir.passes.work_estimate import larger_share
from recir.passes.work_estimate import work as call_work
from recir.universe import RECIR_PASSES, RECIR_REPLACEMENTS

# Modules whose largest weight gradient fed by outer products is at least
# this size log every outer product and add them by one SGEMM after the call
# (`convert-tmath-to-loops`, defer-outer-bytes): the policy's half of a
# core's L2 (`backend/policy.py`).
DEFER_OUTER_BYTES = defer_outer_bytes()

CLOSE = "capture-outer-refs"
FUSE = "tmath-fuse-elementwise"
TASKS = "invoke-mark-concurrent,invoke-clone-serial"  # threads > 1: {budget=N} added
SPAWN = "convert-invoke-to-gomp"  # threads > 1, after convert-scf-to-cf
INFERENCE = (f"{CLOSE},{FUSE},convert-tmath-to-loops{{defer-outer-bytes={DEFER_OUTER_BYTES}}},"
             "convert-scf-to-cf,convert-recir-to-llvm")
GRADIENT = f"{CLOSE},synthesize-gradients"  # {entry=f loss=-1}: `gradient_passes`
# `batching="frontier"`: the batched form ({inputs=N}: the entry's
# per-tree inputs), the batched functions differentiated (one run per
# function, {entry=f__post wrapper=false}), and lowered as every function is.
FRONTIER = f"{CLOSE},invoke-to-frontier{{{{inputs={{inputs}}}}}}"
FRONTIER_GRADIENT = "synthesize-gradients{{entry={} wrapper=false}}"
FRONTIER_LOWER = (f"{FUSE},convert-tmath-to-loops,convert-scf-to-cf,"
                  "convert-recir-to-llvm{entries=false arith-cf=false}")  # called from Python as they are
# `recir.dataflow`'s token-machine form.
DATAFLOW = f"{CLOSE},lower-invoke-to-call-return"


def passes_for(fuse: bool = True, threads: int = 1, max_depth: int = 0) -> str:
    """INFERENCE for a call's options: without fusion, with the task passes
    (and the spawn budget for `threads`) after it, with a depth bound."""
    passes = INFERENCE if checked_fuse(fuse) else INFERENCE.replace(f"{FUSE},", "")
    if max_depth:
        passes = passes.replace("convert-recir-to-llvm",
                                f"convert-recir-to-llvm{{max-depth={max_depth}}}")
    if threads > 1:
        tasks = f"{TASKS}{{budget={max_budget(threads)}}}"
        passes = passes.replace("convert-tmath-to-loops", f"{tasks},convert-tmath-to-loops")
        passes = passes.replace("convert-scf-to-cf,", f"convert-scf-to-cf,{SPAWN},")
    return passes


def frontier_lower_passes(threads: int, cache_dir: Path | str | None = None) -> str:
    """FRONTIER_LOWER with the products over rows on up to `threads` threads
    where the policy's cost model says a team repays its start."""
    team_work = team_min_work(threads, costs(cache_dir), warm=True)
    if threads < 2 or team_work < 0:
        return FRONTIER_LOWER
    return FRONTIER_LOWER.replace("convert-tmath-to-loops", (
        f"convert-tmath-to-loops{{row-threads={threads} row-team-work={team_work}}}"))


def gradient_passes(entry: str, loss: int = -1) -> str:
    """GRADIENT for `@entry`'s output number `loss`."""
    return f'{GRADIENT}{{entry="{entry}" loss={loss}}}'


def run_passes(module: ModuleOp, passes: str, until: str | None = None,
               timings: dict[str, float] | None = None) -> None:
    """Apply the `recir-opt -p` list `passes` to `module` in place, stopping
    after the pass named `until`; `timings` gets each pass's CPU seconds."""
    available = {**get_all_passes(), **RECIR_PASSES, **RECIR_REPLACEMENTS}
    pipeline = PassPipeline.parse_spec(available, passes)
    ctx = make_context()
    for stage in pipeline.passes:
        start = time.process_time()
        stage.apply(ctx, module)
        if timings is not None:
            timings[stage.name] = time.process_time() - start
        if stage.name == until:
            return


def lower(module: ModuleOp, until: str | None = None, fuse: bool = True,
          threads: int = 1, max_depth: int = 0, entry: str | None = None,
          verify: bool = True, timings: dict[str, float] | None = None) -> ModuleOp:
    """A lowered copy of `module` for `threads` threads, stopping after the
    pass named `until`; `max_depth` > 0 bounds the recursion's depth. With
    `entry`, only the functions it reaches are lowered (a gradient's module
    still holds the model's own entry). `verify=False` skips xDSL's verifier
    at the end (compiling, LLVM's verifier checks the result); `timings` gets
    each stage's seconds."""
    clock = time.process_time
    lowered = module.clone()
    if entry is not None:
        prune_unreachable(lowered, entry)
    run_passes(lowered, passes_for(fuse, threads, max_depth), until, timings)
    if verify:
        start = clock()
        lowered.verify()
        if timings is not None:
            timings["xdsl-verify"] = clock() - start
    return lowered


def symbol_names(attribute: Attribute) -> Iterator[str]:
    if isinstance(attribute, SymbolRefAttr):
        yield attribute.root_reference.data
    elif isinstance(attribute, ArrayAttr):
        for inner in attribute.data:
            yield from symbol_names(inner)
    elif isinstance(attribute, DictionaryAttr):
        for inner in attribute.data.values():
            yield from symbol_names(inner)


def prune_unreachable(module: ModuleOp, entry: str) -> None:
    """Erases the functions that `@entry` does not reach through symbol
    references: lowering, cloning and optimising them is wasted work."""
    functions = {f.sym_name.data: f for f in module.ops if isinstance(f, func.FuncOp)}
    if entry not in functions:
        return
    reached, todo = {entry}, [functions[entry]]
    while todo:
        for op in todo.pop().walk():
            for attribute in (*op.properties.values(), *op.attributes.values()):
                for name in symbol_names(attribute):
                    if name in functions and name not in reached:
                        reached.add(name)
                        todo.append(functions[name])
    for name, function in functions.items():
        if name not in reached:
            module.body.blocks[0].erase_op(function)


def native_ir(module: ModuleOp, entry: str, fuse: bool = True, threads: int = 1,
              timings: dict[str, float] | None = None, max_depth: int = 0
              ) -> tuple[str, list[str], list[int], list[int], list[str]]:
    """LLVM IR text for the functions `@entry` of `module` reaches (options
    as `lower`'s), the messages of its run-time checks, the arguments whose
    buffers each thread has its own copy of, those whose outer products are
    logged (`adjoint.log_reserve`), and the objects its engine loads beside
    it (`gemm_kernels.links`). Verified by LLVM's verifier alone
    (`compile_object`), which checks the same IR again. Python's cycle
    collector pauses meanwhile: the passes make and drop hundreds of
    thousands of linked objects, and each of its full collections walks
    every live one (`bench/run.py compile`)."""
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.passes.gemm_kernels import links

    with collector_paused():
        lowered = lower(module, fuse=fuse, threads=threads, max_depth=max_depth, entry=entry,
                        verify=False, timings=timings)
        sites = [s.data for s in lowered.attributes.pop("recir.error_sites").data]
        copied = lowered.attributes.pop("recir.thread_copies", None)
        slots = [k.value.data for k in copied.data] if copied is not None else []
        logged = lowered.attributes.pop("recir.outer_logs", None)
        logs = [k.value.data for k in logged.data] if logged is not None else []
        start = time.process_time()
        text = to_llvm_ir(lowered)
        if timings is not None:
            timings["llvm-convert"] = time.process_time() - start
        return text, sites, slots, logs, links(lowered)


def compile_module(module: ModuleOp, entry: str, params: Any = (), *,
                   cache_dir: Path | str | None = None, fuse: bool = True,
                   threads: int | None = 1, max_depth: int | None = None,
                   timings: dict[str, float] | None = None, derive: str = "") -> NativeFunction:
    """Native code for `@entry` of `module`, from the object cache when
    possible. With `derive`, a pass list, the code is that of a copy of
    `module` after those passes (a gradient's synthesis): the entry is keyed
    by `module` and the passes, what determines the derived IR, so a hit
    neither runs them nor prints their larger result, and takes the entry's
    signature and work estimates from the cached metadata. A compile
    returns once its IR is lowered, LLVM's half still under way
    (`background.Deferred`: the first call waits for it); `timings` gets
    the CPU seconds of each step (`bench/run.py compile`), those compiles
    wholly on this thread."""
    clock, times = time.process_time, {} if timings is None else timings
    start = clock()
    # a derived module's entry is made by `derive`
    if not derive:
        check_native_signature(find_entry(module, entry))
    signature = None if derive else find_entry(module, entry).function_type
    cache = ObjectCache(cache_dir)
    threads = resolve_threads(threads)
    depth = checked_max_depth(max_depth)
    # the lowering is the pass list with its options, after `derive`'s
    lowering = passes_for(fuse, threads, depth)
    key = cache_key(located_text(module), f"{entry} {lowering}" + (
        f" derived by {derive}" if derive else ""))
    times["cache-key"], start = clock() - start, clock()
    under_way = UNDER_WAY.get((cache.directory, key))
    hit = None if under_way else cache.load(key, META_FIELDS)
    if hit is not None and sum(hit[1]["parts"]) != len(hit[0]):
        hit = None  # (parts that do not add up to its object: compiled again)
    if derive and (hit or under_way):
        signature = stored_function_type((hit or under_way)[1]["signature"])
    times["cache-load"] = clock() - start
    if under_way:  # the same compile, its LLVM half still under way: shared
        engine, meta = under_way
    elif hit is None or signature is None:  # (an unreadable signature: compile again)
        engine, meta = compiled_module(module, entry, fuse, threads, depth, derive,
                                       cache, key, times, timings is not None)
        signature = stored_function_type(meta["signature"]) if derive else signature
    else:
        obj, meta = hit
        engine = loaded(obj, meta, times, cache.directory)
    # a derived module is not at hand; the module itself is as cheap
    work, share = ((meta["work"], meta["share"]) if derive
                   else (call_work(module), larger_share(module)))
    start = clock()
    native = NativeFunction(engine, entry, signature, meta["sites"], params, threads,
                            meta["copied"], work, meta["logged"], share, cache.directory)
    native.max_depth = depth
    times["native-function"] = clock() - start
    return native


def compiled_module(module: ModuleOp, entry: str, fuse: bool, threads: int, depth: int,
                    derive: str, cache: ObjectCache, key: str, times: dict[str, float],
                    here: bool) -> tuple[Engine | Deferred[Engine], dict[str, Any]]:
    """`compile_module`'s engine (its LLVM half on a thread of its own,
    in parts at once, unless `here`; known meanwhile to later compiles of
    the same key: `UNDER_WAY`) and the cache entry's metadata (with each
    part's bytes in the stored object and the functions a part exports)."""
    from recir.backend.engine import compile_object  # (looked up at each compile)

    clock, wall = time.process_time, time.perf_counter()
    if derive:
        start, module = clock(), module.clone()
        run_passes(module, derive)
        times["derive"] = clock() - start
    meta: dict[str, Any] = {"signature": str(find_entry(module, entry).function_type),
                            "work": call_work(module), "share": larger_share(module)}
    ir_text, meta["sites"], meta["copied"], meta["logged"], meta["links"] = native_ir(
        module, entry, fuse, threads, times, depth)

    def compiled() -> Engine:
        # parts at once in child processes, where a module has more than one
        # large function and LLVM's half is not being timed (`llvm_split`)
        texts, meta["exports"] = ([ir_text], []) if here else split_module(ir_text, key[:16])
        try:
            objects = compile_parts(texts, lambda text: compile_object(text, times))
            objects = [*objects[1:], objects[0]]  # the parts first: the rest calls them
            meta["parts"] = list(map(len, objects))
            start = clock()
            cache.store(key, b"".join(objects), {**meta, "seconds": time.perf_counter() - wall})
            times["cache-store"] = clock() - start
        finally:
            with UNDER_WAY_LOCK:
                UNDER_WAY.pop((cache.directory, key), None)
        return loaded(b"".join(objects), meta, times, cache.directory)

    if here:
        return compiled(), meta
    interrupts.install()  # (its handler's compile would wait behind LLVM's lock)
    with UNDER_WAY_LOCK:  # known before its thread can finish
        UNDER_WAY[(cache.directory, key)] = found = Deferred(compiled), meta
    return found


# compiles whose LLVM half is under way, by cache directory and key
UNDER_WAY: dict[tuple[Path, str], tuple[Deferred[Engine], dict[str, Any]]] = {}
UNDER_WAY_LOCK = threading.Lock()


def loaded(obj: bytes, meta: dict[str, Any], times: dict[str, float],
           folder: Path | None = None) -> Engine:
    """An engine of `obj` (its parts one after another), the kernels it
    calls resolvable first (from and kept in `folder`, its cache folder)."""
    from recir.backend.kernels.compiled_gemm import link

    start = time.process_time()
    link(meta["links"], folder)
    ends = pairwise(accumulate(meta["parts"], initial=0))
    engine = Engine(*(obj[begin:end] for begin, end in ends), exports=meta["exports"])
    times["load-object"] = time.process_time() - start
    return engine


# what a cache entry of `compile_module` holds besides the object
META_FIELDS = {"sites": list[str], "copied": list[int], "logged": list[int],
               "links": list[str], "signature": str, "work": int, "share": float,
               "parts": list[int], "exports": list[str]}


def checked_fuse(fuse: Any) -> bool:
    """`fuse` once it is a bool (a string such as "no" read as true)."""
    if not isinstance(fuse, bool):
        raise RecirError(f"error: fuse must be True or False, got {fuse!r}")
    return fuse


def checked_max_depth(max_depth: int | None) -> int:
    """0 for none; the code counts depth per thread in an unsigned 64-bit word."""
    if max_depth is None:
        return 0
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not (
            0 < max_depth < 1 << 63):
        raise RecirError(f"error: max_depth must be a positive integer, got {max_depth!r}")
    return max_depth


def resolve_threads(threads: int | None) -> int:
    """An explicit count, else $RECIR_NUM_THREADS, else every core; 1 where
    no OpenMP runtime is found (with a warning)."""
    import os
    import warnings

    from recir.backend.engine import openmp

    if threads is not None and (whole_number(threads) or 0) < 1:
        raise RecirError(f"error: threads must be a positive integer, got {threads!r}")
    configured = os.environ.get("RECIR_NUM_THREADS", "").strip()
    if configured and not (configured.isdecimal() and int(configured) >= 1):
        raise RecirError("error: RECIR_NUM_THREADS must be a positive integer, got "
                         f"'{configured}'")
    count = whole_number(threads) or int(configured or 0) or os.cpu_count() or 1
    if count > 1 and openmp() is None:
        named = os.environ.get("RECIR_OPENMP")
        warnings.warn(f"RECIR_OPENMP='{named}' does not load as an OpenMP runtime with the "
                      "GOMP ABI: running serially" if named else "no OpenMP runtime "
                      "(libomp.so.5, libiomp5.so or libgomp.so.1) found: running serially",
                      stacklevel=outside_recir())
        return 1
    settings.check_worker_room(count)
    return count


def outside_recir() -> int:
    """The stack level, from its caller, of the first frame outside the
    package: where a warning points (the user's line)."""
    package = str(Path(__file__).resolve().parent)
    frame, level = sys._getframe(1), 1  # pyright: ignore[reportPrivateUsage]
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def compile(model: Any, entry: str | None = None, *,
            cache_dir: Path | str | None = None, fuse: bool = True,
            threads: int | None = None, max_depth: int | None = None) -> NativeFunction:
    """Compile a `TracedModel` (weights bound) or a module's `@entry` to native code;
    `fuse=False` keeps one loop per elementwise op; `threads` > 1 (None: all
    cores or $RECIR_NUM_THREADS) runs independent invokes as tasks;
    `max_depth` makes calls nested deeper than that on one thread a
    RecirError (in a team, a thread waiting for tasks runs others on top of
    its stack, and they count), at the cost of a counter per call and of the
    loops LLVM makes of tail calls. Each call takes `timeout=` seconds."""
    if isinstance(model, ModuleOp):
        if entry is None:
            raise RecirError("error: compiling a module needs the entry function's name")
        return compile_module(model, entry, cache_dir=cache_dir, fuse=fuse, threads=threads,
                              max_depth=max_depth)
    return compile_module(model.module, model.entry, list(model.params.values()),
                          cache_dir=cache_dir, fuse=fuse, threads=threads,
                          max_depth=max_depth)
