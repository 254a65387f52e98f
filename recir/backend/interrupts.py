"""Ctrl-C for native calls: a flag that every generated prologue reads.

While a thread is inside a ctypes call, CPython's SIGINT handler only notes
the signal; its Python-level handler runs once the call returns, which a
non-terminating recursion never does. So a C-ABI handler, compiled here with
llvmlite, sets `recir_interrupt` (an i32 that generated code reads at each
function entry: `convert-recir-to-llvm`) and then calls the handler it
replaced, CPython's, which goes on as before (KeyboardInterrupt in the main
thread). A call that sees the flag returns an error, and the runtime clears
the flag and raises KeyboardInterrupt in the thread that made the call,
whichever it is; any other call running then stops too.

The handler is installed only over CPython's own, while the Python-level
handler is `signal.default_int_handler`: with a handler of the user's,
Ctrl-C leaves native calls alone, as before. It is put back at exit. A flag
set while no call was running is cleared when the next call starts.
"""

from __future__ import annotations

import atexit
import ctypes
import signal
import threading

import llvmlite.binding as llvm

SYMBOL = "recir_interrupt"
FLAG = ctypes.c_int32(0)  # for the life of the process: generated code holds its address
llvm.add_symbol(SYMBOL, ctypes.addressof(FLAG))

SIG_IGN, SA_SIGINFO = 1, 4  # Linux values (SIG_DFL is 0)


class SigAction(ctypes.Structure):
    """glibc's `struct sigaction` (x86-64 and AArch64)."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_lock = threading.Lock()
_installed: dict[str, object] = {}  # "engine", "address", "previous"

HANDLER_IR = """
@recir_interrupt = external global i32
define void @recir_on_interrupt(i32 %sig, ptr %info, ptr %context) {{
  store atomic volatile i32 1, ptr @recir_interrupt monotonic, align 4
  call void inttoptr (i64 {previous} to ptr)(i32 %sig, ptr %info, ptr %context)
  ret void
}}
"""


def pending() -> bool:
    return bool(FLAG.value)


def clear() -> None:
    FLAG.value = 0


def clear_stale() -> None:
    """Clears a flag left by a Ctrl-C that came while no call ran (or after
    the interrupted call's caller had already raised)."""
    if FLAG.value:
        FLAG.value = 0


def current() -> SigAction:
    found = SigAction()
    if _libc.sigaction(signal.SIGINT, None, ctypes.byref(found)) != 0:
        raise OSError(ctypes.get_errno(), "sigaction failed")
    return found


def install() -> bool:
    """Chains the flag-setting handler in front of CPython's SIGINT handler
    (once; again if Python has since put its own back); whether it is in."""
    from recir.backend.engine import Engine, compile_object

    with _lock:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        now = current()
        if now.handler == _installed.get("address"):
            return True
        if now.handler in (None, SIG_IGN):  # default action or ignored: nothing to chain
            return False
        engine = Engine(compile_object(HANDLER_IR.format(previous=now.handler)))
        ours = SigAction()
        ours.handler = engine.address("recir_on_interrupt")
        ctypes.memmove(ours.mask, now.mask, ctypes.sizeof(ours.mask))
        ours.flags = now.flags | SA_SIGINFO
        if _libc.sigaction(signal.SIGINT, ctypes.byref(ours), None) != 0:
            return False
        # the engines of earlier installs stay: a signal may be running one
        _installed.setdefault("engines", []).append(engine)  # type: ignore[union-attr]
        _installed.update(address=ours.handler, previous=now)
        return True


@atexit.register
def uninstall() -> None:
    """Puts CPython's handler back where ours is still the one in place."""
    with _lock:
        previous = _installed.get("previous")
        if isinstance(previous, SigAction) and current().handler == _installed["address"]:
            _libc.sigaction(signal.SIGINT, ctypes.byref(previous), None)
        _installed.pop("address", None)
