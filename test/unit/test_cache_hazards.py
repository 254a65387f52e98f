"""What users and operators do to the object cache and the compile around
it: fork while LLVM works, start compiles from a folder of their own
modules, change the working folder, fill the disk, share the folder."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from recir.backend import engine, interrupts
from recir.context import make_context
from recir.parsing import parse_module
from recir.pipeline import compile_module

FIB = Path(__file__).parents[2] / "examples" / "ir" / "fib.mlir"


def fib_module():
    return parse_module(make_context(), FIB.read_text(), "fib.mlir")


def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n + 1):
        a, b = b, a + b
    return a


def child_status(pid: int, seconds: float = 30) -> int:
    """The forked child's exit status; a child still running then is
    killed and reported as hung (-1)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


def test_a_child_forked_while_llvm_works_compiles_and_runs(tmp_path, monkeypatch):
    """`multiprocessing`'s fork right after a compile: llvmlite's lock, held
    by the compile's thread at the fork, was never released in the child,
    whose first call then waited forever."""
    made, in_llvm = engine.compile_object, threading.Event()
    interrupts.install()  # (its handler is compiled on this thread)

    def slow(text, *args, **kwargs):  # an LLVM call under way, as emit_object's
        with llvm.ffi.lib._lock:
            in_llvm.set()
            time.sleep(1)
        return made(text, *args, **kwargs)

    monkeypatch.setattr(engine, "compile_object", slow)
    fib = compile_module(fib_module(), "fib", cache_dir=tmp_path)
    assert in_llvm.wait(60)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if fib(20) == (fibonacci(20),) else 3)
    assert child_status(pid) == 0
    assert fib(20) == (fibonacci(20),)


SUM = """
define i64 @total(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %acc = phi i64 [0, %entry], [%sum, %loop]
  %sum = add i64 %acc, %i
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret i64 %sum
}
"""


def test_a_child_forked_during_a_row_emit_compiles_under_the_other_setting():
    """An emit of row code under way on another thread at the fork counted
    in `LSR_GATE` for good in the child: its own emit under the other
    setting waited for it forever."""
    import ctypes

    holding, done = threading.Event(), threading.Event()

    def row_emit() -> None:
        with engine.LSR_GATE.setting(False):
            holding.set()
            done.wait(60)

    thread = threading.Thread(target=row_emit)
    thread.start()
    try:
        assert holding.wait(60)
        pid = os.fork()
        if pid == 0:
            code = engine.Engine(engine.compile_object(SUM, rows=False))
            total = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(code.address("total"))
            os._exit(0 if total(100) == sum(range(100)) else 3)
        assert child_status(pid) == 0
    finally:
        done.set()
        thread.join()


def test_a_compile_child_ignores_modules_in_the_working_folder(tmp_path, monkeypatch):
    """`python -c` puts the working folder first on the child's path: a
    user's `random.py` there (a module `llvm_compile` imports through
    `tempfile`) ran in the child, which then gave no object."""
    import ctypes
    from types import SimpleNamespace

    from recir.backend import llvm_workers

    (tmp_path / "random.py").write_text(
        "import pathlib\npathlib.Path('user code ran').write_text('')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(llvm_workers, "machine", lambda: SimpleNamespace(cores=2))
    here: list[str] = []
    made = llvm_workers.compile_apart(SUM, lambda text: here.append(text) or
                                      engine.compile_object(text))
    code = engine.Engine(made())
    total = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(code.address("total"))
    assert total(10) == sum(range(10))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["random.py"] and here == []


def test_a_relative_cache_folder_is_where_the_compile_began(tmp_path, monkeypatch):
    """LLVM's half stores the entry on its own thread, after the program
    may have changed its working folder: the entry went to a `cache`
    folder below the new one, where the next run does not look."""
    gate, made = threading.Event(), engine.compile_object
    interrupts.install()
    monkeypatch.setattr(engine, "compile_object",
                        lambda *args, **kwargs: gate.wait(60) and made(*args, **kwargs))
    (tmp_path / "run").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    fib = compile_module(fib_module(), "fib", cache_dir="cache")
    os.chdir(tmp_path / "elsewhere")
    gate.set()
    assert fib(10) == (fibonacci(10),)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert sorted(p.suffix for p in (tmp_path / "run" / "cache").iterdir()) == [".json", ".o"]


def full_disk(monkeypatch, folder: Path, failing: int) -> None:
    """The `failing`-th file written into `folder` (from 1) meets a full
    disk halfway through its data."""
    import errno

    real, count = os.fdopen, [0]

    class Full:
        def __init__(self, file):
            self.file = file

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data: bytes) -> int:
            self.file.write(data[: len(data) // 2])
            self.file.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fdopen(fd, *args, **kwargs):
        file = real(fd, *args, **kwargs)
        if Path(os.readlink(f"/proc/self/fd/{fd}")).parent != folder:
            return file
        count[0] += 1
        return Full(file) if count[0] == failing else file

    monkeypatch.setattr(os, "fdopen", fdopen)


def test_a_full_disk_leaves_no_half_entry(tmp_path, monkeypatch):
    """The object written and its metadata refused (ENOSPC): the object
    stayed, half an entry that no load takes and that holds the disk's
    space. The compile itself goes on from memory."""
    from recir.backend.cache import ObjectCache

    full_disk(monkeypatch, tmp_path, failing=2)  # the entry's `.json`
    fib = compile_module(fib_module(), "fib", cache_dir=tmp_path).wait()
    assert fib(15) == (fibonacci(15),) and list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    full_disk(monkeypatch, tmp_path, failing=1)  # the entry's `.o`
    ObjectCache(tmp_path).store("0" * 64, b"object", {})
    assert list(tmp_path.iterdir()) == []


def test_entries_take_the_umask_as_other_files_do(tmp_path):
    """A folder a group shares (`RECIR_CACHE_DIR`): entries were always
    0600, so each member could read only their own, compiled the others'
    again and replaced them, and no one's were reused."""
    from recir.backend.cache import ObjectCache

    before = os.umask(0o002)
    try:
        ObjectCache(tmp_path).store("0" * 64, b"object", {"sites": []})
        (tmp_path / "reference").write_bytes(b"")  # what `open` makes
    finally:
        os.umask(before)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()}
    assert modes == {"0" * 64 + ".o": "0o664", "0" * 64 + ".json": "0o664",
                     "reference": "0o664"}
    assert ObjectCache(tmp_path).load("0" * 64) == (b"object", {"sites": []})


def test_a_failed_compile_raised_again_keeps_no_earlier_call():
    """Each wait raised the one stored error, whose traceback grew by the
    waiting call's frames every time: a program that retried kept every
    failed call's frames and what they held (its inputs) alive."""
    import gc
    import traceback
    import weakref

    from recir.backend.background import Deferred

    def failing() -> None:
        raise RuntimeError("LLVM said no")

    class Inputs:
        pass

    deferred = Deferred(failing)

    def call(inputs: Inputs) -> None:
        deferred.get()

    lengths, kept = [], []
    for _ in range(3):
        inputs = Inputs()
        kept.append(weakref.ref(inputs))
        try:
            call(inputs)
        except RuntimeError as error:
            lengths.append(len(traceback.extract_tb(error.__traceback__)))
        del inputs
    gc.collect()
    assert lengths[0] == lengths[1] == lengths[2]
    assert [ref() is None for ref in kept[:-1]] == [True, True]


def test_kept_costs_that_cannot_be_read_are_the_defaults(tmp_path):
    """Every compile reads the kept costs: a folder in the file's place
    (or a folder it cannot read) raised OSError from every compile."""
    from recir.backend import policy
    from recir.diagnostics import RecirError

    defaults = policy.costs(tmp_path / "none")
    policy.tuned_path(tmp_path).mkdir()  # IsADirectoryError on reading it
    assert policy.costs(tmp_path) == defaults == policy.Costs(
        defaults.unit_s, policy.DEFAULT_TASK_S, policy.DEFAULT_TEAM_S)
    (tmp_path / "file").write_text("")  # a file where the folder should be
    where = re.escape(repr(str(tmp_path / "file")))
    with pytest.raises(RecirError, match=f"^error: cache_dir names {where}, which is a "):
        policy.save_tuned(1e-6, 40e-6, 1.0, tmp_path / "file")


def test_a_child_object_cut_short_is_compiled_here(monkeypatch):
    """A child that exits 0 with an object cut short: its output was taken
    (and kept in the cache) for starting with ELF's magic."""
    from recir.backend import llvm_compile, llvm_workers
    from recir.backend.policy import machine

    whole = llvm_compile.compile_object("define i32 @f() {\n  ret i32 1\n}\n")
    assert llvm_workers.whole_object(whole)
    assert not any(llvm_workers.whole_object(whole[:n]) for n in (4, 64, len(whole) - 1))
    if machine().cores < 2:
        pytest.skip("a child compiles only where there is a second core")
    monkeypatch.setattr(llvm_workers, "CHILD", "import sys; sys.stdin.buffer.read(); "
                        f"sys.stdout.buffer.write({whole[:200]!r})")
    assert llvm_workers.compile_apart("text", lambda text: whole)() == whole


def test_the_clock_is_the_fixed_one_where_cpufreq_gives_it(tmp_path):
    """/proc/cpuinfo's `cpu MHz` is the current clock where cores scale theirs:
    the kept costs' file name and the policy moved with it between processes."""
    from recir.backend import policy

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 1203.5\n"
                                           "processor\t: 1\ncpu MHz\t\t: 3400.0\n")
    assert policy.clock_hz(tmp_path) == 1203.5e6  # (a VM's: its nominal clock)
    (tmp_path / policy.CPUFREQ).parent.mkdir(parents=True)
    (tmp_path / policy.CPUFREQ).write_text("3900000\n")
    assert policy.clock_hz(tmp_path) == 3.9e9
    assert policy.clock_hz(tmp_path / "none") == policy.DEFAULT_CLOCK_HZ


@pytest.mark.parametrize("kept", ['{"task_s": 1e400, "team_s": 1e-5, "share": 0.5}',
                                  '{"task_s": 1e-6, "team_s": 1e308, "share": 0.5}',
                                  "[" * 100_000])
def test_kept_costs_out_of_all_reason_are_the_defaults(tmp_path, kept):
    """An integer too large for a float, a cost that is inf once doubled,
    JSON nested past the parser: each raised from every compile (Overflow-,
    RecursionError) instead of taking the defaults."""
    from recir.backend import policy

    defaults = policy.costs(tmp_path / "none")
    policy.tuned_path(tmp_path).write_text(kept.replace("1e400", "1" + "0" * 400))
    assert policy.costs(tmp_path) == defaults
    assert policy.team_min_work(2, policy.costs(tmp_path)) == policy.team_min_work(2, defaults)
