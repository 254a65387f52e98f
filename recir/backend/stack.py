"""Stack limits for native code, and a big-stack thread for deep recursion.

Generated functions compare their frame address with a limit before running,
so recursion that would overflow returns an error instead of killing Python.
The limit is the calling thread's stack bottom (from `pthread_getattr_np`)
plus a margin for the deepest frame; a call that runs out is retried once on
a thread with a `DEEP_STACK_BYTES` stack (`DEEP_WORKER`). Team calls instead switch the
calling thread onto a stack that deep (`SwitchedStack`, glibc's ucontext):
no hand-over to another thread, and every team is formed by the caller, if
it lives as long as the process (`TeamLeaders` says why and what others do).
"""

from __future__ import annotations

import ctypes
import mmap
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from recir.diagnostics import RecirError
from recir.passes.native_context import DEEP_STACK_BYTES, MARGIN_BYTES

T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.pthread_self.restype = ctypes.c_ulong
_libc.pthread_getattr_np.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
_libc.pthread_attr_getstack.argtypes = [
    ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
_libc.pthread_attr_destroy.argtypes = [ctypes.c_void_p]
_this_thread = threading.local()  # its stack limit once looked up, whether it lasts
# glibc's ucontext functions (musl has none: team calls then hand over to
# the deep-stack worker instead)
SWITCHING = all(hasattr(_libc, name) for name in ("getcontext", "makecontext", "swapcontext"))
if SWITCHING:
    _libc.getcontext.argtypes = [ctypes.c_void_p]
    _libc.swapcontext.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def stack_limit() -> int:
    """The lowest address native code on this thread may use: its stack's
    bottom (`pthread_getattr_np`) plus the margin. Every call asks, so the
    answer is kept in a thread-local attribute, the quickest to read."""
    try:
        return _this_thread.limit
    except AttributeError:
        pass
    attr = ctypes.create_string_buffer(256)  # pthread_attr_t is 56 bytes on glibc
    if _libc.pthread_getattr_np(_libc.pthread_self(), attr) != 0:
        raise OSError("pthread_getattr_np failed")
    low, size = ctypes.c_void_p(), ctypes.c_size_t()
    _libc.pthread_attr_getstack(attr, ctypes.byref(low), ctypes.byref(size))
    _libc.pthread_attr_destroy(attr)
    _this_thread.size = size.value
    _this_thread.limit = (low.value or 0) + MARGIN_BYTES
    return _this_thread.limit


def with_room(work: Callable[[], T]) -> T:
    """work() here, or on the deep-stack worker where this thread's stack is
    under twice the margin (one started with a small `threading.stack_size`):
    native code that checks its frames against `stack_limit` would find no
    room on it. For calls that cannot be retried midway (a frontier call
    adds into its caller's buffers as it goes)."""
    stack_limit()
    return work() if _this_thread.size >= 2 * MARGIN_BYTES else DEEP_WORKER.run(work)


def start_deep_thread(target: Callable[[], None], name: str, daemon: bool = False
                      ) -> threading.Thread:
    """A started thread that runs `target` on a `DEEP_STACK_BYTES` stack."""
    with _stack_size_lock:
        previous = threading.stack_size(DEEP_STACK_BYTES)
        try:
            thread = threading.Thread(target=target, name=name, daemon=daemon)
            thread.start()
        except RuntimeError as error:  # ("can't start new thread")
            raise RecirError(f"error: cannot start another thread ({error}, "
                             f"{threading.active_count()} running): ask for fewer "
                             "threads") from None
        finally:
            threading.stack_size(previous)
    return thread


def run_into(work: Callable[[], object], outcome: dict[str, object]) -> None:
    """work()'s value, or what it raised (for the caller's thread), in `outcome`."""
    try:
        outcome["value"] = work()
    except BaseException as e:
        outcome["error"] = e


def outcome_of(outcome: dict[str, object]) -> Any:
    """What `run_into` kept: its value returned, its exception raised."""
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]


_stack_size_lock = threading.Lock()

# ucontext_t is 968 bytes on x86-64 and 4560 on AArch64 glibc; both begin with
# uc_flags, uc_link, then uc_stack {ss_sp, ss_flags, ss_size}.
UCONTEXT_BYTES, UC_LINK, SS_SP, SS_FLAGS, SS_SIZE = 8192, 8, 16, 24, 32
PROT_READ_WRITE = mmap.PROT_READ | mmap.PROT_WRITE
# MAP_NORESERVE: Linux x86-64 and AArch64 value where Python (< 3.13) lacks the name
MAP_RESERVE_ONLY = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0x4000)


class SwitchedStack:
    """A `DEEP_STACK_BYTES` stack (reserved, not committed) that this thread's
    native calls run on: `makecontext` + `swapcontext` cost a few
    microseconds, less than handing a call to the deep-stack worker and
    back, and the team a call forms is this thread's libgomp pool.
    ctypes releases the GIL during the switch, as during any native call."""

    def __init__(self) -> None:
        self.low = None  # (`__del__` runs after a failed reservation too)
        low = _libc.mmap(None, DEEP_STACK_BYTES, PROT_READ_WRITE, MAP_RESERVE_ONLY, -1, 0)
        if low in (None, ctypes.c_void_p(-1).value):
            raise MemoryError(f"cannot reserve {DEEP_STACK_BYTES >> 20} MiB of address space "
                              "for a deep stack (a limit such as ulimit -v?)")
        self.low = low
        self.buffer = ctypes.create_string_buffer(2 * UCONTEXT_BYTES + 64)
        base = (ctypes.addressof(self.buffer) + 63) & ~63
        self.caller, self.callee = base, base + UCONTEXT_BYTES
        # the fields makecontext reads, set again after each getcontext
        self.fields = ((ctypes.c_void_p.from_address(self.callee + UC_LINK), self.caller),
                       (ctypes.c_void_p.from_address(self.callee + SS_SP), low),
                       (ctypes.c_int.from_address(self.callee + SS_FLAGS), 0),
                       (ctypes.c_size_t.from_address(self.callee + SS_SIZE), DEEP_STACK_BYTES))
        self.callee_pointer = ctypes.c_void_p(self.callee)

    @property
    def limit(self) -> int:
        return self.low + MARGIN_BYTES

    def call(self, function: int, *args: int) -> None:
        """function(*args) (integer or pointer arguments, at most 6) on this stack."""
        if _libc.getcontext(self.callee) != 0:
            raise OSError(ctypes.get_errno(), "getcontext failed")
        for field, value in self.fields:
            field.value = value
        _libc.makecontext(self.callee_pointer, ctypes.c_void_p(function),
                          ctypes.c_int(len(args)), *map(ctypes.c_uint64, args))
        if _libc.swapcontext(self.caller, self.callee) != 0:
            raise OSError(ctypes.get_errno(), "swapcontext failed")

    def __del__(self, munmap: Any = _libc.munmap) -> None:  # bound: also at exit
        if self.low is not None:
            munmap(self.low, DEEP_STACK_BYTES)


_switched = threading.local()


def switched_stack() -> SwitchedStack:
    """The calling thread's `SwitchedStack`, made at its first use."""
    found = getattr(_switched, "stack", None)
    if found is None:
        found = _switched.stack = SwitchedStack()
    return found


class DeepStackWorker:
    """One long-lived thread with a `DEEP_STACK_BYTES` stack that runs calls
    handed to it: without glibc's ucontext, gradient calls run there from the
    start, because a retry after the backward overflowed would add some
    gradients twice (with it, they start on the caller's switched stack).
    A job's end is signalled by releasing a lock the caller waits on (cheaper per
    hand-over than a threading.Event)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], object], dict[str, object],
                                           threading.Lock]] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def run(self, work: Callable[[], T]) -> T:
        if threading.current_thread() is self.thread:  # already here: waiting would deadlock
            return work()
        return self.wait(self.submit(work))

    def submit(self, work: Callable[[], object]) -> tuple[dict[str, object], threading.Lock]:
        with self.lock:
            if self.thread is None:
                self.thread = start_deep_thread(self.serve, "recir-deep-worker", daemon=True)
        outcome: dict[str, object] = {}
        done = threading.Lock()
        done.acquire()  # released by the worker when the job is done
        self.jobs.put((work, outcome, done))
        return outcome, done

    @staticmethod
    def wait(job: tuple[dict[str, object], threading.Lock]) -> T:  # type: ignore[type-var]
        outcome, done = job
        done.acquire()
        return outcome_of(outcome)

    def serve(self) -> None:
        _this_thread.lasting = True  # (never ends: it may form teams, `TeamLeaders`)
        while True:
            work, outcome, done = self.jobs.get()
            run_into(work, outcome)
            done.release()


DEEP_WORKER = DeepStackWorker()


class DeepStackPool:
    """Long-lived deep-stack threads that map a function over items: the
    trees of a batch run side by side (ctypes releases the GIL during native
    calls), each on a stack as deep as a single call would get. A map on n
    threads takes the first n workers: a worker never ends (`DeepStackWorker`),
    so the pool only grows, to the most threads a map asked for."""

    def __init__(self) -> None:
        self.workers: list[DeepStackWorker] = []
        self.lock = threading.Lock()

    def map(self, work: Callable[[int, object], T], items: list[object], threads: int
            ) -> list[T]:
        """work(worker index, item) for every item on `threads` workers;
        worker w takes items w, w+n, ... Returns or raises only once every
        worker is done: when an item fails (or Ctrl-C stops the wait) the
        others skip their remaining items, and no worker writes into the
        caller's buffers after it has seen the error."""
        with self.lock:
            self.workers += [DeepStackWorker() for _ in range(threads - len(self.workers))]
        n = threads
        failed: list[bool] = []  # (appended to: atomic)

        def share(w: int) -> list[T]:
            done = []
            for item in items[w::n]:
                if failed:
                    break
                try:
                    done.append(work(w, item))
                except BaseException:
                    failed.append(True)
                    raise
            return done

        jobs: list[tuple[dict[str, object], threading.Lock]] = []
        ordered: list[T] = [None] * len(items)  # type: ignore[list-item]
        try:
            for w, worker in enumerate(self.workers[:n]):  # (a thread may fail to start)
                jobs.append(worker.submit(lambda w=w: share(w)))
            for w, job in enumerate(jobs):
                ordered[w::n] = DeepStackWorker.wait(job)
        except BaseException as error:
            failed.append(True)
            outcomes = [outcome for outcome, _ in jobs]
            settle(outcomes)
            # the item's own error, not a worker's short list the wait above got
            raise next((o["error"] for o in outcomes if "error" in o), error) from None
        return ordered


def settle(outcomes: list[dict[str, object]]) -> None:
    """Wait until every job has an outcome (`run_into` sets it when the job
    has finished), polled on the error path only; a second Ctrl-C restarts
    the wait rather than leaving jobs writing behind the caller's back."""
    while True:
        try:
            while not all(outcomes):
                time.sleep(0.001)
            return
        except KeyboardInterrupt:
            continue


def lasting() -> bool:
    """Whether this thread lives as long as the process: the main thread, or
    one of recir's workers."""
    return getattr(_this_thread, "lasting", False) or (
        threading.current_thread() is threading.main_thread())


class TeamLeaders:
    """Long-lived deep-stack threads that start OpenMP teams for threads that
    may end. When a thread that formed teams ends, LLVM's libomp frees the
    memory its task descriptors came from, while its workers may still hold
    some of them (a worker keeps the descriptors it frees for their owner and
    hands them back in batches, `__kmp_fast_free`): their next free writes
    into freed memory (an assertion in kmp_alloc.cpp, bus errors, wrong
    gradients), as soon as Python threads that made team calls come and go.
    So a team call made on a thread that is not `lasting` runs on a leader:
    one per call in flight, taken from `free` and given back (a list's pop
    and append are atomic), and never ending. A hand-over costs tens of
    microseconds, paid only by calls worth a team."""

    def __init__(self) -> None:
        self.free: list[DeepStackWorker] = []

    def run(self, work: Callable[[], T]) -> T:
        """work() here if this thread is `lasting`, else on a free leader."""
        if lasting():
            return work()
        try:
            leader = self.free.pop()
        except IndexError:
            leader = DeepStackWorker()
        try:
            return leader.run(work)
        finally:
            self.free.append(leader)


LEADERS = TeamLeaders()
