"""A compile's LLVM half on a thread of its own, waited for at first use.

`compile_module` lowers a module in Python on the caller's thread (every
error of recir's own passes is raised there), then hands the LLVM IR to a
`Deferred`: LLVM optimises and emits it (its parts in child processes,
`llvm_workers`), and the object is stored and loaded, while the caller goes
on. llvmlite's calls release the GIL, so on a second core a user's next
compile (a model's gradient after its inference) or its data loading
overlaps LLVM, which is most of a cold compile's time (`bench/run.py
compile`, `bench/compile_modes.py`). The first call waits for the code and
raises what its compile raised.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")


class Deferred(Generic[T]):
    """`make()` run on a thread started now; `get()` waits for its value or
    raises its error. The thread is not a daemon: the interpreter's exit
    waits for a compile under way rather than stopping it inside LLVM. A
    child forked meanwhile has no such thread: there `get()` runs `make`
    itself."""

    def __init__(self, make: Callable[[], T]):
        self.make, self.parent = make, os.getpid()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.trace: TracebackType | None = None
        self.done = threading.Event()
        threading.Thread(target=self.run, name="recir-llvm", daemon=False).start()

    def run(self) -> None:
        try:
            self.value = self.make()
        except BaseException as error:  # raised to whoever waits
            self.error, self.trace = error, error.__traceback__
        finally:
            self.done.set()
            self.make = None  # type: ignore[assignment]  # (what it held: IR, objects)

    def get(self) -> T:
        if not self.done.is_set() and os.getpid() != self.parent:
            # a forked child: the parent's event may have been held mid-fork
            self.parent, self.done = os.getpid(), threading.Event()
            self.run()
        self.done.wait()
        if self.error is not None:  # from its own traceback: not every earlier wait's too
            raise self.error.with_traceback(self.trace)
        return self.value  # type: ignore[return-value]
