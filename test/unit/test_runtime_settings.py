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
    # a worker's stack checks keep 2 MiB below the deepest frame: on a smaller
    # stack every call on a team failed as an overflow ("a team worker's 0 KiB")
    for small in (0, (2 << 20) - 1):
        with pytest.raises(RecirError, match=rf"worker_stack_bytes {small} is less than "
                                             r"the 2 MiB the stack checks keep"):
            recir.configure_runtime(worker_stack_bytes=small)


LIMITED = """
import resource, sys
import numpy as np, recir
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import tree_rnn
params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=50)
model = tree_rnn.trace_model(params)
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + (1536 << 20), resource.RLIM_INFINITY))
try:
    recir.compile(model, threads=4, cache_dir=sys.argv[1])
    raise SystemExit("compiled")
except RecirError as e:
    print(e)
tree = make_treebank(1, "linear", num_leaves=30000, vocab_size=50, seed=1)[0]  # (deep: switched)
args = (tree.left, tree.right, tree.word, tree.label, tree.root)
resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))
try:
    recir.compile(model, threads=1, cache_dir=sys.argv[1])(*args)
    raise SystemExit("ran")
except MemoryError as e:
    print("MemoryError:", e)
"""


def test_a_team_whose_worker_stacks_cannot_be_reserved_is_refused(tmp_path) -> None:
    """Under an address-space limit (`ulimit -v`) libomp aborted the process
    ("OMP: Error #34") when it could not start a worker; the deep stack's
    failed reservation raised OSError and printed a `__del__` traceback."""
    done = subprocess.run([sys.executable, "-c", LIMITED, str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("error: this process cannot reserve 3072 MiB for the stacks of 3 "
                        "OpenMP worker(s) (1024 MiB each: an address-space limit?): ask for "
                        "fewer threads, or give the workers smaller stacks: "
                        "recir.configure_runtime(worker_stack_bytes=...)"), done.stdout
    assert lines[1] == ("MemoryError: cannot reserve 1024 MiB of address space for a deep "
                        "stack (a limit such as ulimit -v?)"), done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr
