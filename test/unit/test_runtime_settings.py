"""`recir.configure_runtime`: importing recir leaves the environment alone, and
the OpenMP library recir loads gets the settings (read back from the library)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

import recir
from recir.diagnostics import RecirError

LOAD = """
import ctypes, os, sys
import recir, recir.pipeline
from recir.backend.engine import openmp
from recir.diagnostics import RecirError
assert "OMP_STACKSIZE" not in os.environ and "KMP_BLOCKTIME" not in os.environ
recir.configure_runtime(worker_stack_bytes=64 << 20, block_time_ms=7)
library = openmp()
assert library is not None
assert "OMP_STACKSIZE" not in os.environ and "KMP_BLOCKTIME" not in os.environ
try:
    recir.configure_runtime(block_time_ms=3)
    raise SystemExit("configured after loading")
except RecirError as e:
    assert "already loaded" in str(e)
recir.configure_runtime(block_time_ms=7)  # what it has: fine
if hasattr(library, "kmp_get_stacksize_s"):  # libomp
    library.kmp_get_stacksize_s.restype = ctypes.c_size_t
    print("stack", library.kmp_get_stacksize_s(), "blocktime", library.kmp_get_blocktime())
sys.stdout.flush()
library.omp_display_env(0)  # to stderr
"""


def load(runtime: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_STACKSIZE", "KMP_BLOCKTIME")}
    env["RECIR_OPENMP"] = runtime
    return subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(ctypes.util.find_library("omp") is None, reason="no libomp")
def test_libomp_gets_the_settings_and_the_environment_stays_clean() -> None:
    done = load("libomp.so.5")
    assert done.returncode == 0, done.stderr
    assert f"stack {64 << 20} blocktime 7" in done.stdout


@pytest.mark.skipif(ctypes.util.find_library("gomp") is None, reason="no libgomp")
def test_libgomp_gets_the_stack_size_and_the_environment_stays_clean() -> None:
    done = load("libgomp.so.1")
    assert done.returncode == 0, done.stderr
    assert f"OMP_STACKSIZE = '{64 << 20}'" in done.stderr


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(RecirError, match="unknown runtime setting 'stack'"):
        recir.configure_runtime(stack=1)
    with pytest.raises(RecirError, match="non-negative integer"):
        recir.configure_runtime(block_time_ms=-1)
    with pytest.raises(RecirError, match="non-negative integer, got True"):
        recir.configure_runtime(block_time_ms=True)  # (libomp read KMP_BLOCKTIME=True: 200 ms)
    # a worker stack no mapping can hold: libomp aborted the process (SIGABRT)
    # at the first team, "System unable to allocate necessary resources"
    with pytest.raises(RecirError, match=r"worker_stack_bytes 4611686018427387904 is more "
                                         r"than this machine's memory \(\d+ MiB\)"):
        recir.configure_runtime(worker_stack_bytes=2**62)
