"""Stack limits for native code, and a big-stack thread for deep recursion.

Generated functions compare their frame address with a limit before running,
so recursion that would overflow returns an error instead of killing Python.
The limit is the calling thread's stack bottom (from `pthread_getattr_np`)
plus a margin for the deepest frame; a call that runs out is retried once on
a thread with a `DEEP_STACK_BYTES` stack.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
MARGIN_BYTES = 2 << 20
DEEP_STACK_BYTES = 1 << 30

_libc = ctypes.CDLL(None, use_errno=True)
_libc.pthread_self.restype = ctypes.c_ulong
_libc.pthread_getattr_np.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
_libc.pthread_attr_getstack.argtypes = [
    ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
_libc.pthread_attr_destroy.argtypes = [ctypes.c_void_p]
_bounds: dict[int, tuple[int, int]] = {}


def stack_bounds() -> tuple[int, int]:
    """(lowest address, size) of the calling thread's stack."""
    ident = threading.get_ident()
    if ident not in _bounds:
        attr = ctypes.create_string_buffer(256)  # pthread_attr_t is 56 bytes on glibc
        if _libc.pthread_getattr_np(_libc.pthread_self(), attr) != 0:
            raise OSError("pthread_getattr_np failed")
        low, size = ctypes.c_void_p(), ctypes.c_size_t()
        _libc.pthread_attr_getstack(attr, ctypes.byref(low), ctypes.byref(size))
        _libc.pthread_attr_destroy(attr)
        _bounds[ident] = (low.value or 0, size.value)
    return _bounds[ident]


def stack_limit() -> int:
    low, _ = stack_bounds()
    return low + MARGIN_BYTES


def on_deep_stack(work: Callable[[], T]) -> T:
    """Runs `work()` on a fresh thread with a `DEEP_STACK_BYTES` stack."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as e:  # re-raised on the caller's thread
            outcome["error"] = e
        finally:
            _bounds.pop(threading.get_ident(), None)

    with _stack_size_lock:
        previous = threading.stack_size(DEEP_STACK_BYTES)
        try:
            thread = threading.Thread(target=target, name="recir-deep-stack")
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


_stack_size_lock = threading.Lock()


class DeepStackWorker:
    """One long-lived thread with a `DEEP_STACK_BYTES` stack that runs calls
    handed to it: gradient calls run there from the start, because a retry
    after the backward overflowed would add some gradients twice. A job's
    end is signalled by releasing a lock the caller waits on (~8 us less per
    hand-over than a threading.Event here)."""

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
                with _stack_size_lock:
                    previous = threading.stack_size(DEEP_STACK_BYTES)
                    try:
                        self.thread = threading.Thread(target=self.serve, daemon=True,
                                                       name="recir-deep-worker")
                        self.thread.start()
                    finally:
                        threading.stack_size(previous)
        outcome: dict[str, object] = {}
        done = threading.Lock()
        done.acquire()  # released by the worker when the job is done
        self.jobs.put((work, outcome, done))
        return outcome, done

    @staticmethod
    def wait(job: tuple[dict[str, object], threading.Lock]) -> T:  # type: ignore[type-var]
        outcome, done = job
        done.acquire()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["value"]  # type: ignore[return-value]

    def serve(self) -> None:
        while True:
            work, outcome, done = self.jobs.get()
            try:
                outcome["value"] = work()
            except BaseException as e:  # re-raised on the caller's thread
                outcome["error"] = e
            done.release()


DEEP_WORKER = DeepStackWorker()


class DeepStackPool:
    """`threads` long-lived deep-stack threads that map a function over items:
    the trees of a batch run side by side (ctypes releases the GIL during
    native calls), each on a stack as deep as a single call would get."""

    def __init__(self, threads: int):
        self.workers = [DeepStackWorker() for _ in range(threads)]

    def map(self, work: Callable[[int, object], T], items: list[object]) -> list[T]:
        """work(worker index, item) for every item; worker w takes items w, w+n, ..."""
        n = len(self.workers)
        jobs = [worker.submit(lambda w=w: [work(w, item) for item in items[w::n]])
                for w, worker in enumerate(self.workers)]
        ordered: list[T] = [None] * len(items)  # type: ignore[list-item]
        for w, job in enumerate(jobs):
            ordered[w::n] = DeepStackWorker.wait(job)
        return ordered
