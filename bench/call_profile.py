"""Where a batched call's CPU goes, by symbol, with Linux `perf`.

    python -m bench.call_profile --mode train --threads 16 --workload complete-128 --hidden 256
    python -m bench.call_profile --batching recursive --threads 16

A child process builds the TreeLSTM, frontier (`batching.recir_frontier`)
or recursive (`--batching recursive`: `batching.recir_recursive`), with `RECIR_PERF_MAP` set (`perf` then names the JIT's kernels and row
functions) and its OpenMP workers asleep once idle (a thread's samples
are the work it did, not its spinning), and calls it on one batch again
and again. `perf record -e cpu-clock` samples it for `--seconds`; the
table gives each symbol's milliseconds of CPU a call: recir's code by
name, the Python interpreter and NumPy as one row, the OpenMP runtime as
one, libc's functions by name, the kernel as one. Two thread counts'
tables side by side show which work grows with the threads (on fewer
cores than threads too: the CPU a call takes, not its wall time).
`--perf` names the perf binary (on a machine without one installed,
carried along with its libraries on `LD_LIBRARY_PATH`).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

RATE = 1000  # samples a second of CPU: each sample a millisecond
SAMPLE = re.compile(r"\s*\S+\s+\d+\s+[\d.]+:\s+\d+\s+cpu-clock\S*:\s+\S+\s+(.*?)\s+\((.*)\)\s*$")


def symbol_of(sym: str, dso: str) -> str:
    """A sample's row: recir's own code by its symbol, the libraries as one
    row each, libc by its function."""
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    if "python" in dso or "numpy" in dso or "openblas" in dso:
        return "Python and NumPy"
    if "libomp" in dso or "libgomp" in dso or "libiomp" in dso:
        return "OpenMP runtime"
    if "kernel" in dso:
        return "the kernel"
    if "libc" in dso:
        return f"libc {sym}"
    return sym


def per_call(lines: Iterable[str], calls: int) -> dict[str, float]:
    """Milliseconds of CPU a call by symbol, from `perf script`'s lines of
    `calls` calls' samples (at `RATE`)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in lines:
        found = SAMPLE.match(line)
        if found:
            counts[symbol_of(*found.groups())] += 1
    scale = 1000 / RATE / max(calls, 1)
    return {sym: n * scale for sym, n in counts.most_common()}


def child(args: argparse.Namespace) -> int:
    """Builds the function, says `ready`, then calls it until told `stop`,
    counting the calls made after `start`."""
    os.environ["OMP_WAIT_POLICY"] = "passive"
    from bench.batching import (keep_freed_memory, make_params, recir_frontier,
                                recir_recursive, workload)
    from recir import configure_runtime

    configure_runtime(block_time_ms=0)
    keep_freed_memory()
    trees, vocab, _ = workload(args.workload, 25)
    build = recir_frontier if args.batching == "frontier" else recir_recursive
    run = build(make_params(args.hidden, vocab), args.mode, args.threads)
    batch = trees[:25]
    for _ in range(3):
        run(batch)
    print("ready", flush=True)
    counted, start = 0, None
    while True:
        if select.select([sys.stdin], [], [], 0)[0]:
            word = sys.stdin.readline().strip()
            if word == "start":
                start = counted
            else:
                print(counted - (start or 0), flush=True)
                return 0
        run(batch)
        counted += 1


def profile(args: argparse.Namespace) -> tuple[dict[str, float], int]:
    """(ms of CPU a call by symbol, calls sampled)."""
    env = dict(os.environ, RECIR_PERF_MAP="1")
    command = [sys.executable, "-m", "bench.call_profile", "--child", *sys.argv[1:]]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=env) as proc, tempfile.TemporaryDirectory() as folder:
        assert proc.stdin is not None and proc.stdout is not None
        while proc.stdout.readline().strip() != "ready":
            if proc.poll() is not None:
                raise SystemExit("the child process ended before its first calls")
        data = os.path.join(folder, "perf.data")
        proc.stdin.write("start\n")
        proc.stdin.flush()
        record = subprocess.run([args.perf, "record", "-F", str(RATE), "-e", "cpu-clock",
                                 "-p", str(proc.pid), "-o", data, "--", "sleep",
                                 str(args.seconds)], capture_output=True, text=True)
        if record.returncode:  # e.g. kernel.perf_event_paranoid forbids sampling
            proc.kill()
            why = (record.stderr.strip().splitlines() or [f"exit {record.returncode}"])[-1]
            raise SystemExit(f"error: perf record failed: {why}")
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        calls = int(proc.stdout.readline())
        script = subprocess.run([args.perf, "script", "-i", data], check=True,
                                capture_output=True, text=True).stdout.splitlines()
    Path(tempfile.gettempdir(), f"perf-{proc.pid}.map").unlink(missing_ok=True)  # the JIT's names
    return per_call(script, calls), calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batching", choices=["frontier", "recursive"], default="frontier")
    parser.add_argument("--workload", default="sst")
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--seconds", type=float, default=8.0, help="sampled")
    parser.add_argument("--rows", type=int, default=25, help="symbols printed")
    parser.add_argument("--perf", default="perf")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if shutil.which(args.perf) is None:
        raise SystemExit(f"error: no perf here ({args.perf!r} not found): install Linux "
                         "perf (Debian: linux-perf) or name it with --perf")
    started = time.perf_counter()
    found, calls = profile(args)
    print(f"{args.batching} {args.mode} h={args.hidden} {args.workload} b25 on {args.threads} thread(s): "
          f"{calls} calls sampled ({time.perf_counter() - started:.0f} s in all); "
          f"ms of CPU a call")
    for sym, ms in list(found.items())[:args.rows]:
        print(f"  {ms:9.3f}  {sym}")
    print(f"  {sum(found.values()):9.3f}  every symbol")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
