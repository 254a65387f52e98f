"""LLVM IR to machine code with llvmlite, and an MCJIT engine to run it.

`compile_object` optimizes at O3 with the loop and SLP vectorizers for the
host CPU and emits an object file; `Engine` loads such objects (fresh or
from the on-disk cache, so a warm start skips LLVM entirely), an MCJIT
engine each, each with its own TargetMachine: llvmlite crashes if one
outlives its engine.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import llvmlite.binding as llvm

from recir.backend.cache import ObjectCache, cache_key
from recir.backend.settings import openmp_environment
from recir.diagnostics import RecirError

T = TypeVar("T")


@functools.cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def host_cpu() -> tuple[str, str]:
    """The host CPU's name and features, asked once: LLVM reads them from
    the CPU again on every query, which costs a third of making an engine."""
    _initialize()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def target_machine() -> llvm.TargetMachine:
    _initialize()
    target = llvm.Target.from_default_triple()
    cpu, features = host_cpu()
    return target.create_target_machine(
        cpu=cpu,
        features=features,
        opt=3,
        reloc="pic",
        codemodel="jitdefault",
    )


# LLVM's optimisation pipeline for generated code (`bench/run.py compile`
# times the levels on the same IR).
OPT_LEVEL = 3


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine, level: int = 3,
             unrolling: bool = True, slp: bool = True) -> None:
    options = llvm.create_pipeline_tuning_options(speed_level=level)
    options.loop_vectorization = True
    options.slp_vectorization = slp
    options.loop_unrolling = unrolling
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)


# Every function starts on a cache line, the x86 decoders' and uop cache's
# window: a function's code then meets those windows the same way whatever
# was emitted before it. A recursive function's serial clone ran 11% slower
# than the same machine code compiled alone (fib(35)) only by where it fell.
FUNCTION_ALIGNMENT = 64


def aligned_functions(ir_text: str) -> str:
    """`ir_text` with `align FUNCTION_ALIGNMENT` on each definition
    (llvmlite's IR builder has no alignment for functions): at the end of
    its header, before a `{` there. A quoted name is read whole: llvmlite
    escapes its quotes but not its newlines, so a header may span lines.
    (LLVM takes no `align` after function metadata or a personality, which
    llvmlite writes last: the code sets neither, and LLVM would name the line.)"""
    return DEFINITION.sub(rf"\1 align {FUNCTION_ALIGNMENT}\2", ir_text)


DEFINITION = re.compile(r'^(define (?:"[^"]*"|[^"\n])*?)(\s*\{)?$', re.M)


def compile_object(ir_text: str, timings: dict[str, float] | None = None,
                   level: int | None = None, rows: bool = False) -> bytes:
    """An object file of `ir_text` optimised at `level` (default OPT_LEVEL);
    `timings` gets the CPU seconds of each step (parse, verify, optimize,
    codegen). `rows`: the module is batched code over rows, compiled
    without the loop unroller, the SLP vectorizer and loop strength
    reduction (`ROW_CODE`)."""
    clock, times = time.process_time, {}
    start = clock()
    machine = target_machine()
    module = llvm.parse_assembly(aligned_functions(ir_text))
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    times["llvm-parse"], start = clock() - start, clock()
    module.verify()
    times["llvm-verify"], start = clock() - start, clock()
    optimize(module, machine, OPT_LEVEL if level is None else level, unrolling=not rows,
             slp=not rows)
    times["llvm-optimize"], start = clock() - start, clock()
    with LSR_GATE.setting(not rows):
        obj = machine.emit_object(module)
    times["llvm-codegen"] = clock() - start
    if timings is not None:
        timings.update(times)
    return obj


class CodegenSetting:
    """A codegen option that LLVM holds process-wide (`llvm.set_option`
    sets a command-line flag), chosen per object: emits under one setting
    overlap one another, and one under the other setting waits for them to
    finish, so a compile on another thread never runs under a flag that was
    not its own. `flag` names one of LLVM's `disable-...` options."""

    def __init__(self, flag: str):
        self.flag = flag
        self.changed = threading.Condition()
        self.current = True  # LLVM's default: the pass runs
        self.active = 0  # emits running under `current`

    @contextlib.contextmanager
    def setting(self, enabled: bool) -> Iterator[None]:
        with self.changed:
            while self.active and self.current != enabled:
                self.changed.wait()
            if self.current != enabled:
                _initialize()
                llvm.set_option("", f"-{self.flag}={'false' if enabled else 'true'}")
                self.current = enabled
            self.active += 1
        try:
            yield
        finally:
            with self.changed:
                self.active -= 1
                if not self.active:
                    self.changed.notify_all()


# ROW_CODE: batched code over rows (`rows=True`) skips three passes.
# Its functions hold many row loops, each vectorized and interleaved, with
# epilogue and scalar forms and runtime alias checks between its row
# buffers. The trip count of a row loop is the row width, a constant: the
# full unroller then copies each vectorized body a few times over, doubling
# the code the rest of the pipeline and codegen work through for a few loop
# branches saved per row. Its straight-line code is the loops' setup, which
# the SLP vectorizer finds nothing worth packing in, yet it searches the long
# blocks of a fused loop's scalar form and alias checks, which grow with the
# product of the loop's outputs and inputs (a TreeLSTM `_fwd`'s cell loop
# writes eight rows and reads seven; `bench/run.py compile` times it).
# Loop strength reduction's search over the addressing formulas of a loop's
# induction-variable uses grows faster than linearly with them; such
# functions spend most of their codegen there, while the loops step their
# rows with unit or constant strides that x86 addressing modes cover anyway.
# The code runs as fast either way (`bench/run.py batching` cells and
# TreeRNN, RNTN and TreeLSTM batches, alternated in one process).
LSR_GATE = CodegenSetting("disable-lsr")


class Engine:
    """Object files' functions, one MCJIT engine per object (an engine
    given the matrix kernels' objects one after another runs bad code)."""

    def __init__(self, *objects: bytes):
        # code that calls OpenMP finds it bound by address (`load_openmp`):
        # loaded first, else its calls would jump to address 0 (the objects
        # are read only until a runtime is loaded)
        if not (_openmp and _openmp[0]) and any(
                name.encode() in obj for obj in objects for name in OPENMP_SYMBOLS) and \
                openmp() is None:
            raise RecirError("error: compiled code calls OpenMP, and no OpenMP runtime "
                             "(libomp.so.5, libgomp.so.1 or $RECIR_OPENMP) loads")
        self.machines = [target_machine() for _ in objects]
        self.engines = [llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
                        for machine in self.machines]
        for engine, obj in zip(self.engines, objects, strict=True):
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            engine.finalize_object()

    def lookup(self, name: str) -> int:
        """The address of `name`'s code, 0 where the objects have none."""
        return next(filter(None, (e.get_function_address(name) for e in self.engines)), 0)

    def address(self, name: str) -> int:
        address = self.lookup(name)
        if not address:
            raise KeyError(f"no native function named {name}")
        return address


class CollectorPause:
    """Python's cyclic garbage collector off while compiles build and lower
    IR, on again when the last one on any thread ends (unless it was off
    before the first); `with collector_paused():`, or `@collector_paused()`
    on a function (`pipeline` re-exports it; `cached_objects`' builds, the
    matrix kernels' among them, run under it too). A module's IR is tens of
    thousands of linked objects, each allocation counting towards a
    collection that traverses them all, and all of them stay reachable until
    the compile ends: collections during it free nothing and cost a tenth of
    the compile."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.compiles = 0
        self.was_enabled = False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self.lock:
            if not self.compiles:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.compiles += 1
        try:
            yield
        finally:
            with self.lock:
                self.compiles -= 1
                if not self.compiles and self.was_enabled:
                    gc.enable()


collector_paused = CollectorPause()


def cached_engine(description: str, entry: str, *make_irs: Callable[[], str]) -> Engine:
    """The engine of the modules that `make_irs` give as LLVM IR text, each
    an object of its own, keyed by `description` (the IR itself, or what
    determines it: a warm start then neither builds nor compiles them) and
    `entry`; one per process."""
    key = cache_key(description, entry)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = Engine(*cached_objects(description, entry, make_irs))
        return engine


def cached_objects(description: str, entry: str, make_irs: Sequence[Callable[[], str]]
                   ) -> list[bytes]:
    """`cached_engine`'s object files: from the on-disk cache, else built
    (the cyclic collector paused) and compiled, LLVM compiling one while
    the next is built, and stored there."""
    objects = ObjectCache()

    def compiled(key: str, text: str) -> bytes:
        obj = compile_object(text)
        objects.store(key, obj, {})
        return obj

    pending: list[Future[bytes]] = []
    with collector_paused(), llvm_thread() as compiling:
        for k, make_ir in enumerate(make_irs):
            key = cache_key(description, f"{entry} part {k} of {len(make_irs)}")
            hit = objects.load(key)
            pending.append(compiling.submit(compiled, key, make_ir()) if hit is None
                           else ready(hit[0]))
        return [made.result() for made in pending]


@contextlib.contextmanager
def llvm_thread() -> Iterator[ThreadPoolExecutor]:
    """A compile's thread for LLVM, which runs one module while the caller
    builds the next: llvmlite's calls release the GIL (taking a lock of
    their own), so the Python and LLVM halves of a compile overlap where
    there is a second core. One per compile, not per process: a forked
    child would inherit a pool whose thread it does not have. On an error
    the modules still queued are dropped."""
    with ThreadPoolExecutor(1, "recir-llvm") as compiling:
        try:
            yield compiling
        except BaseException:
            compiling.shutdown(cancel_futures=True)
            raise


def ready(value: T) -> Future[T]:
    """A future already holding `value` (an object the cache had)."""
    made: Future[T] = Future()
    made.set_result(value)
    return made


_engines: dict[str, Engine] = {}  # `cached_engine`'s, by cache key
# one engine per key for the process: callers keep addresses into its code, so
# a second engine made by a thread racing another's first use (and then
# dropped) would leave them pointing into freed code
_engines_lock = threading.Lock()


# What generated code calls in the OpenMP runtime (the GOMP ABI).
OPENMP_SYMBOLS = ("GOMP_parallel", "GOMP_single_start", "GOMP_task", "GOMP_taskwait",
                  "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads")
_openmp: list[ctypes.CDLL | None] = []

# Tried in order unless $RECIR_OPENMP names one. LLVM's libomp first: its
# taskwait runs any queued task where libgomp's runs only the waiting task's
# children, so fib(35) on 2 threads gains more over 1 (`python bench/run.py
# parallel`, docs/benchmarks.md). Then Intel's libiomp5 (the same runtime's
# code), which `pip install intel-openmp` (recir's `openmp` extra) puts in
# the environment's lib/. libgomp, on every Linux machine, where neither is.
OPENMP_LIBRARIES = ("libomp.so.5", "libiomp5.so", "libgomp.so.1")


def openmp_libraries() -> tuple[str, ...]:
    """OPENMP_LIBRARIES, the intel-openmp wheel's by its path where installed."""
    wheel = os.path.join(sys.prefix, "lib", "libiomp5.so")
    return tuple(wheel if name == "libiomp5.so" and os.path.exists(wheel) else name
                 for name in OPENMP_LIBRARIES)


def openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime (the first of `openmp_libraries` found, or the library
    with the GOMP ABI that `$RECIR_OPENMP` names), loaded once, None if
    missing. Its task API is bound into generated code by address: an
    imported library may have brought another OpenMP runtime into the process
    first, and a task must ask the runtime that formed its team for its
    thread number."""
    if not _openmp:
        _openmp.append(load_openmp())
    return _openmp[0]


def load_openmp() -> ctypes.CDLL | None:
    names = [os.environ["RECIR_OPENMP"]] if os.environ.get("RECIR_OPENMP") else \
        openmp_libraries()
    for name in names:
        try:
            with openmp_environment():  # `recir.configure_runtime`'s settings
                library = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
                library.omp_get_max_threads()  # libomp reads its settings now
            for symbol in OPENMP_SYMBOLS:
                llvm.add_symbol(symbol, ctypes.cast(getattr(library, symbol),
                                                    ctypes.c_void_p).value)
        except (OSError, AttributeError):
            continue
        library.GOMP_parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                                          ctypes.c_uint]
        return library
    return None


@functools.cache
def openmp_entry() -> int:
    """The address of the runtime's GOMP_parallel (teams are started with it
    from a switched stack, `stack.SwitchedStack.call`)."""
    library = openmp()
    assert library is not None
    return ctypes.cast(library.GOMP_parallel, ctypes.c_void_p).value
