"""bench/call_profile.py: `perf script`'s samples as milliseconds of CPU a
call by symbol, and (where perf can sample this process) a whole run."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import call_profile  # noqa: E402

LINES = [  # as `perf script` prints cpu-clock samples
    "  python 14317 68835.227844:    1000000 cpu-clock:      7f035559494f "
    "recir_gemm_nt.given+0x294f (perf-14317.map)",
    "  python 14317 68835.228842:    1000000 cpu-clock:      7f035559484f "
    "recir_gemm_nt.given+0x284f (perf-14317.map)",
    "  python 14318 68835.228842:    1000000 cpu-clock:      7f035559484f "
    "node__post.rows6.rows+0x10 (perf-14317.map)",
    "  python 14317 68836.227018:    1000000 cpu-clock:  ffffffff813b0840 "
    "sched_balance_update_blocked_averages+0x5e0 ([kernel.kallsyms])",
    "  python 14317 68835.255841:    1000000 cpu-clock:      7f0356ab5c44 "
    "_int_malloc+0x8e4 (/usr/lib/x86_64-linux-gnu/libc.so.6)",
    "  python 14317 68835.255841:    1000000 cpu-clock:      55d0c3b1a2f0 "
    "_PyEval_EvalFrameDefault+0x40 (/usr/bin/python3.11)",
    "  python 14319 68835.255841:    1000000 cpu-clock:      7f0356ab5c44 "
    "__kmp_wait_4+0x20 (/opt/lib/libomp.so.5)",
    "a line that is not a sample",
]


def test_samples_become_milliseconds_a_call_by_symbol():
    found = call_profile.per_call(LINES, calls=2)  # a sample is 1 ms of CPU
    assert found == {"recir_gemm_nt.given": 1.0, "node__post.rows6.rows": 0.5,
                     "the kernel": 0.5, "libc _int_malloc": 0.5, "Python and NumPy": 0.5,
                     "OpenMP runtime": 0.5}
    assert list(found)[0] == "recir_gemm_nt.given"  # the largest first


def perf_samples() -> bool:
    """Whether perf is here and may sample this user's processes."""
    perf = shutil.which("perf")
    return perf is not None and subprocess.run(
        [perf, "stat", "-e", "cpu-clock", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not perf_samples(), reason="no perf that may sample here")
@pytest.mark.parametrize("batching", ["frontier", "recursive"])
def test_a_run_names_the_jit_code_and_adds_up_to_a_calls_cpu(batching):
    command = ["--workload", "complete-8", "--hidden", "16", "--seconds", "1", "--rows", "1000",
               "--batching", batching]
    out = subprocess.run([sys.executable, "-m", "bench.call_profile", *command], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith(batching) and "calls sampled" in out[0]
    rows = {line.split(None, 1)[1]: float(line.split()[0]) for line in out[1:]}
    assert any(name.startswith(("node", "recir_")) for name in rows)  # the model, the kernels
    total = rows.pop("every symbol")  # each row rounded to a microsecond
    assert total == pytest.approx(sum(rows.values()), abs=5e-4 * (len(rows) + 1))


def test_without_perf_it_says_so_and_starts_nothing():
    done = subprocess.run([sys.executable, "-m", "bench.call_profile", "--perf",
                           "/nonexistent/perf"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("error: no perf here ('/nonexistent/perf' not found): install "
                           "Linux perf (Debian: linux-perf) or name it with --perf\n")


def test_a_perf_that_cannot_record_is_named_not_a_traceback():
    # `false` stands for a perf that the kernel forbids to sample
    done = subprocess.run([sys.executable, "-m", "bench.call_profile", "--perf", "false",
                           "--workload", "complete-8", "--hidden", "4"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: perf record failed: exit 1\n"
