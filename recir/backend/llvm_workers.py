"""A module's parts compiled at once: the first here, each other in a child.

llvmlite takes one process-wide lock around every call into LLVM, so a
second part compiled on another thread would wait for the first. A child
process (this Python, running `llvm_compile.serve` loaded by its path, so
without recir's package) has a lock of its own. Where a child cannot start,
fails, or returns no object, this thread compiles its part too: a child
only ever saves time. A child that crashes (LLVM aborting on the IR) is a
RecirError: the same compile here would end the program.
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

from recir.backend import llvm_compile
from recir.backend.policy import machine
from recir.diagnostics import RecirError

CHILD = ("import importlib.util, sys\n"
         "spec = importlib.util.spec_from_file_location('recir_llvm_compile', sys.argv[1])\n"
         "module = importlib.util.module_from_spec(spec)\n"
         "spec.loader.exec_module(module)\n"
         "sys.exit(module.serve(sys.stdin.buffer, sys.stdout.buffer, int(sys.argv[2]),\n"
         "                      sys.argv[3] == '1'))\n")
ELF = b"\x7fELF"


class Child:
    """A child compiling one part (`rows`: as batched row code, `ROW_CODE`);
    `result()` its object, None where it gave none. `-P`: not the working
    folder first on its path, where a user's `random.py` would be imported
    instead of the standard library's."""

    def __init__(self, text: str, rows: bool):
        self.out: bytes | None = None
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-c", CHILD, llvm_compile.__file__,
             str(llvm_compile.OPT_LEVEL), str(int(rows))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.talking = threading.Thread(target=self.talk, args=(text.encode(),), daemon=True,
                                        name="recir-llvm-child")
        self.talking.start()

    def talk(self, data: bytes) -> None:
        try:
            out, _ = self.process.communicate(data)
        except OSError:  # (a broken pipe: the child is gone)
            self.process.kill()
            self.process.wait()
            return
        if self.process.returncode == 0 and whole_object(out):
            self.out = out

    def result(self) -> bytes | None:
        self.talking.join()
        crashed = -self.process.returncode if self.process.returncode is not None else 0
        if crashed in CRASHES:  # LLVM itself failed: again here, it would take Python down
            raise RecirError(f"error: LLVM crashed compiling a module "
                             f"({signal.Signals(crashed).name} in its child process)")
        return self.out


def whole_object(out: bytes) -> bool:
    """An ELF64 object whose section headers (at its end, as LLVM writes
    them) lie within it: a child's output cut short, loaded, could take the
    process down, and kept in the cache, every later one too."""
    if len(out) < 64 or not out.startswith(ELF) or out[4] != 2:  # (2: 64-bit)
        return False
    (headers,), (size, count) = struct.unpack_from("<Q", out, 0x28), struct.unpack_from(
        "<HH", out, 0x3A)
    return headers + size * count <= len(out)


# the signals of a process that crashed (not one stopped from outside)
CRASHES = frozenset((signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL,
                     signal.SIGFPE))


def compile_parts(texts: Sequence[str], compile_here: Callable[[str], bytes]) -> list[bytes]:
    """Each text's object, in order: the first by `compile_here`, the
    others apart meanwhile (`compile_apart`)."""
    later = [compile_apart(text, compile_here) for text in texts[1:]]
    return [compile_here(texts[0]), *(made() for made in later)]


def compile_apart(text: str, compile_here: Callable[[str], bytes], rows: bool = False
                  ) -> Callable[[], bytes]:
    """Starts `text`'s compile in a child, where this process may use more
    than one core and its executable is a Python; the call returned waits
    for the object (made by `compile_here` where the child gives none)."""
    # (a frozen program's executable is the program: it would start again)
    child = None
    if machine().cores > 1 and sys.executable and not getattr(sys, "frozen", False):
        try:
            child = Child(text, rows)
        except OSError:  # no executable to start: compiled here
            pass
    return lambda: (child.result() if child is not None else None) or compile_here(text)
