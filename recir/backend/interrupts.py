"""Ctrl-C for native calls, at no cost to the generated code.

While a thread is inside a ctypes call, CPython's SIGINT handler only notes
the signal; its Python-level handler runs once the call returns, which a
non-terminating recursion never does. So a C-ABI handler, built here in the
llvm dialect (`handler_module`) and compiled with llvmlite, writes a byte to a pipe and then calls the handler it replaced,
CPython's, which goes on as before (KeyboardInterrupt in the main thread). A
watcher thread reading the pipe stops every running call as a recorded error
stops it: it sets the call's context's `error` to ERROR_INTERRUPT and raises
its `stack_limit` to the top, so the next prologue of every frame fails (the
limit is loaded atomically there, also in the loops LLVM makes of tail
calls: `passes/prologue.py`). The runtime then raises KeyboardInterrupt in
the thread that made the call, whichever it is. The watcher needs the GIL,
which the native call has released.

A call's contexts are registered per thread while it runs (`begin`, `end`),
with the count of Ctrl-Cs arrived so far (`ARRIVED`, which the handler
counts before it writes): a dictionary store, no work in native code. The
watcher stops only the calls that began before the Ctrl-C it reads, so a
call made as soon as CPython's KeyboardInterrupt is caught, before the
watcher has run, is not stopped by that same Ctrl-C. A team entry sets its
contexts up again when it starts, which clears a stop made since the call
began, so the watcher stops the calls that began before a Ctrl-C again every
`RESTOP_S` while they run. A Ctrl-C before a call begins is CPython's alone.

The handler is installed only over CPython's own, while the Python-level
handler is `signal.default_int_handler`: with a handler of the user's,
Ctrl-C leaves native calls alone, as before. It is put back at exit.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

from xdsl.dialects import llvm
from xdsl.dialects.builtin import ModuleOp, i8, i32, i64

from recir.passes.convert_invoke_to_gomp import declare
from recir.passes.llvm_functions import call_pointer, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR
from recir.passes.native_context import ERROR_INTERRUPT

STOPPED = (1 << 64) - 1  # a stack limit no frame is above
SIG_IGN, SA_SIGINFO = 1, 4  # Linux values (SIG_DFL is 0)

# per thread (by `threading.get_ident`), the context or team contexts of its
# running call and the count of Ctrl-Cs arrived when it began
RUNNING: dict[int, tuple[Any, int]] = {}
ARRIVED = ctypes.c_int64(0)  # Ctrl-Cs the handler has counted (only it writes)
RESTOP_S = 1e-3  # how often calls begun before a Ctrl-C are stopped again while they run


class SigAction(ctypes.Structure):
    """glibc's `struct sigaction` (x86-64 and AArch64)."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_lock = threading.Lock()
_installed: dict[str, Any] = {"engines": []}

def handler_module(fd: int, previous: int, counter: int) -> ModuleOp:
    """`recir_on_interrupt(sig, info, context)`: adds one to the i64 at
    address `counter`, writes one byte to the pipe `fd` and calls the
    handler at address `previous` with the same arguments. write(2) is
    async-signal-safe; errno is kept for the interrupted code."""
    function, b, (sig, info, context) = new_function("recir_on_interrupt", [i32, PTR, PTR],
                                                     private=False)
    count = b.value(llvm.IntToPtrOp(b.i64(counter)))
    b.store(b.add(b.load(count, 0, i64), 1), count, 0)
    errno = b.value(llvm.CallOp("__errno_location", return_type=PTR))
    saved = b.load(errno, 0, i32)
    byte = b.alloca(1, i8)
    b.store(b.const(1, i8), byte, 0)
    b.op(llvm.CallOp("write", b.const(fd, i32), byte, b.i64(1), return_type=i64))
    b.store(saved, errno, 0)
    call_pointer(b, b.value(llvm.IntToPtrOp(b.i64(previous))), sig, info, context)
    b.op(llvm.ReturnOp())
    return ModuleOp([declare("__errno_location", [], PTR), declare("write", [i32, PTR, i64], i64),
                     lower_to_llvm(function)])


def stop(held: Any, error: int) -> None:
    """Stops the call running on `held` (a context, or a team's contexts)
    with `error`, unless it has recorded one already."""
    for ctx in getattr(held, "views", (held,)):
        if not ctx.error:
            ctx.error = error
        ctx.stack_limit = STOPPED


def begin(held: Any) -> int:
    """Registers `held` (a context, or a team's) as this thread's running
    call, what Ctrl-C stops; the key for `end`."""
    key = threading.get_ident()
    RUNNING[key] = (held, ARRIVED.value)
    return key


def end(key: int) -> None:
    RUNNING.pop(key, None)


def watch(fd: int) -> None:
    """Stops every running call each time the handler writes to `fd`, and
    again while any that began before it still runs (its team entry may
    have set its contexts up after the stop)."""
    while True:
        try:
            if not os.read(fd, 64):
                return
        except OSError:
            return
        arrived = ARRIVED.value  # (at least the one read: counted before written)
        while began := [held for held, seen in list(RUNNING.values()) if seen < arrived]:
            for held in began:
                stop(held, ERROR_INTERRUPT)
            time.sleep(RESTOP_S)


def current() -> SigAction:
    found = SigAction()
    if _libc.sigaction(signal.SIGINT, None, ctypes.byref(found)) != 0:
        raise OSError(ctypes.get_errno(), "sigaction failed")
    return found


def install() -> bool:
    """Chains the handler in front of CPython's SIGINT handler (once; again
    if Python has put its own back since); whether it is in. Where that
    fails, Ctrl-C waits for native calls as before: compiling goes on."""
    if not sys.platform.startswith("linux"):  # (glibc's sigaction and errno)
        return False
    try:
        return chain()
    except (OSError, RuntimeError, KeyError):
        return False


def chain() -> bool:
    from recir.backend.engine import Engine, compile_object
    from recir.backend.llvm_convert import to_llvm_ir

    with _lock:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        now = current()
        if "address" in _installed and now.handler == _installed["address"]:
            return True
        if now.handler in (None, SIG_IGN):  # default action or ignored: nothing to chain
            return False
        if "pipe" not in _installed:
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)  # a full pipe drops the byte
            _installed["pipe"] = (read_end, write_end)
            threading.Thread(target=watch, args=(read_end,), daemon=True,
                             name="recir-interrupts").start()
        engine = Engine(compile_object(to_llvm_ir(handler_module(
            _installed["pipe"][1], now.handler, ctypes.addressof(ARRIVED)))))
        ours = SigAction()
        ours.handler = engine.address("recir_on_interrupt")
        ctypes.memmove(ours.mask, now.mask, ctypes.sizeof(ours.mask))
        ours.flags = now.flags | SA_SIGINFO
        if _libc.sigaction(signal.SIGINT, ctypes.byref(ours), None) != 0:
            return False
        _installed["engines"].append(engine)  # kept: a signal may be running one
        _installed.update(address=ours.handler, previous=now)
        return True


@atexit.register
def uninstall() -> None:
    """Puts CPython's handler back where ours is still the one in place."""
    with _lock:
        previous = _installed.get("previous")
        ours = _installed.get("address")
        if isinstance(previous, SigAction) and ours and current().handler == ours:
            _libc.sigaction(signal.SIGINT, ctypes.byref(previous), None)
        _installed.pop("address", None)


def forked() -> None:
    """In a forked child: the pipe is the parent's and has no watcher here,
    so CPython's handler goes back until the child's next `install`."""
    global _lock
    _lock = threading.Lock()  # (another thread may have held it at the fork)
    uninstall()
    for fd in _installed.pop("pipe", ()):
        os.close(fd)
    RUNNING.clear()


os.register_at_fork(after_in_child=forked)
