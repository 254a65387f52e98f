"""Machine code from llvmlite: an MCJIT engine to run it.

`Engine` loads object files (fresh from `llvm_compile.compile_object`,
re-exported here, or from the on-disk cache, so a warm start skips LLVM
entirely), an MCJIT engine each, each with its own TargetMachine: llvmlite
crashes if one outlives its engine.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import llvmlite.binding as llvm

from recir.backend import perf_map
from recir.backend.cache import ObjectCache, cache_key
from recir.backend.llvm_compile import (  # noqa: F401 (re-exported)
    FUNCTION_ALIGNMENT, LSR_GATE, OPT_LEVEL, CodegenSetting, aligned_functions,
    compile_object, host_cpu, optimize, target_machine)
from recir.backend.settings import openmp_environment
from recir.diagnostics import RecirError

T = TypeVar("T")


class Engine:
    """Object files' functions, one MCJIT engine per object (an engine
    given the matrix kernels' objects one after another runs bad code)."""

    def __init__(self, *objects: bytes, exports: Sequence[str] = ()):
        """`exports`: functions of the objects that later ones call
        (`llvm_split`), resolvable once their object is loaded."""
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
        with _exporting:  # another engine's export of a name must not come between
            for engine, obj in zip(self.engines, objects, strict=True):
                engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
                engine.finalize_object()
                for name in exports:
                    address = engine.get_function_address(name)
                    if address:
                        llvm.add_symbol(name, address)
        if perf_map.enabled():  # `perf report` names the code
            perf_map.write(zip(self.engines, objects, strict=True))

    def lookup(self, name: str) -> int:
        """The address of `name`'s code, 0 where the objects have none."""
        return next(filter(None, (e.get_function_address(name) for e in self.engines)), 0)

    def address(self, name: str) -> int:
        address = self.lookup(name)
        if not address:
            raise KeyError(f"no native function named {name}")
        return address


# held while an engine loads its objects: LLVM's symbol table is the
# process's, and two engines of one module (two cache folders) export the
# same names, each of which must resolve its own object's
_exporting = threading.Lock()


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


def cached_engine(description: str, entry: str, *make_irs: Callable[[], str],
                  cache_dir: Path | str | None = None) -> Engine:
    """The engine of the modules that `make_irs` give as LLVM IR text, each
    an object of its own, keyed by `description` (the IR itself, or what
    determines it: a warm start then neither builds nor compiles them) and
    `entry`; one per process. `cache_dir`: the cache folder of the function
    it serves, which its objects come from and are kept in, made already
    or not (a user who names a folder finds all a call compiled there);
    None: no function's, the default folder where the engine is made."""
    key = cache_key(description, entry)
    cache = ObjectCache(cache_dir)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            _objects[key] = cached_objects(description, entry, make_irs, cache)
            engine = _engines[key] = Engine(*(obj for _, obj in _objects[key]))
        elif cache_dir is not None and (cache.directory, key) not in _kept:
            for part, obj in _objects.get(key, ()):  # made from another folder
                if cache.load(part) is None:
                    cache.store(part, obj, {})
        else:
            return engine
        _kept.add((cache.directory, key))
        return engine


def cached_objects(description: str, entry: str, make_irs: Sequence[Callable[[], str]],
                   objects: ObjectCache) -> list[tuple[str, bytes]]:
    """`cached_engine`'s object files, each with its key: from the on-disk
    cache, else built (the cyclic collector paused) and compiled, LLVM
    compiling one while the next is built, and stored there."""

    def compiled(key: str, text: str) -> bytes:
        obj = compile_object(text)
        objects.store(key, obj, {})
        return obj

    pending: list[Future[bytes]] = []
    keys = [cache_key(description, f"{entry} part {k} of {len(make_irs)}")
            for k in range(len(make_irs))]
    with collector_paused(), llvm_thread() as compiling:
        for key, make_ir in zip(keys, make_irs, strict=True):
            hit = objects.load(key)
            pending.append(compiling.submit(compiled, key, make_ir()) if hit is None
                           else ready(hit[0]))
        return [(key, made.result()) for key, made in zip(keys, pending, strict=True)]


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
_objects: dict[str, list[tuple[str, bytes]]] = {}  # their objects, by the same key
_kept: set[tuple[Path, str]] = set()  # (folder, key): the engine's objects are there
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
