"""A module's parts compiled at once: the first here, each other in a child.

llvmlite takes one process-wide lock around every call into LLVM, so a
second part compiled on another thread would wait for the first. A child
process (this Python, running `llvm_compile.serve` loaded by its path, so
without recir's package) has a lock of its own. Where a child cannot start,
fails, returns no object, or has none after `CHILD_SECONDS` (it hangs: it
is killed), this thread compiles its part too: a child only ever saves
time; where this process's executable is not a Python (an application
embedding one), none starts. A child that crashes (LLVM aborting on the
IR) is a RecirError: the same compile here would end the program.
"""

from __future__ import annotations

import os
import re
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
# A part compiles in well under a second (`llvm_split.PART_LINES`); a child
# with no object after this long is stuck (or not compiling at all), and the
# part is compiled here instead: a compile that slow merely takes longer.
CHILD_SECONDS = 60.0


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
            out, _ = self.process.communicate(data, timeout=CHILD_SECONDS)
        except (OSError, subprocess.TimeoutExpired):  # (a broken pipe: gone; or stuck)
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
    child = None
    if machine().cores > 1 and runs_python(sys.executable):
        try:
            child = Child(text, rows)
        except OSError:  # no executable to start: compiled here
            pass
    return lambda: (child.result() if child is not None else None) or compile_here(text)


def runs_python(executable: str) -> bool:
    """Whether `executable`, this process's, starts a Python that runs the
    child's code: not where it is empty, the program itself (a frozen one
    would start again), or an application embedding Python (named for
    itself, it would take the child's arguments as its own)."""
    return bool(executable) and not getattr(sys, "frozen", False) and bool(
        PYTHON.match(os.path.basename(executable))) and os.access(executable, os.X_OK)


PYTHON = re.compile(r"(python|pypy)", re.I)  # python3.12, pythonw.exe, pypy3
