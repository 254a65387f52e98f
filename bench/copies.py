"""N copies of a one-thread cell at once, over one alone: the host's ceiling for N threads.

A team of N threads runs a batch at best N times as fast as one thread.
A real host gives less: its cores share the L3 cache and memory bandwidth
and may clock lower when all are busy. This measures how much less for one
cell: its one-thread form timed alone, then as N processes started
together (each timing its own calls while the others run theirs), in
alternating rounds; the ceiling is N x (alone / the slowest copy), what N
cores give N independent copies of the work when each must finish, as a
team's threads with even shares must: where the host runs one core slower
while all are busy (a VM whose cores share their physical cores with other
tenants), the slowest copy says what a team waits for, not the copies'
pooled median. An "N threads over 1" ratio near it is at the host's limit;
one well under it is the code's.

    python -m bench.copies --kind frontier --mode train --workload sst --copies 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
READY, GO = "ready", "go"
TIMEOUT_S = 600.0  # a child's build, warm-up and timing


def child(kind: str, mode: str, name: str, hidden: int, batch: int, seconds: float) -> None:
    """Build the cell's one-thread form, say `READY`, wait for `GO`, print
    the seconds of each pass over the trees for `seconds` (at least three
    passes) as JSON, then go on untimed until stdin closes: the other
    copies' timings run beside work to the end."""
    from bench import batching
    from bench.target_scaling import SCALED

    trees, vocab, _ = batching.workload(name, batch)
    run = batching.in_batches(SCALED[kind](batching.make_params(hidden, vocab), mode, 1),
                              trees, batch)
    run()
    print(READY, flush=True)
    if sys.stdin.readline().strip() != GO:
        return
    times, start = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        begun = time.perf_counter()
        run()
        times.append(time.perf_counter() - begun)
    print(json.dumps(times), flush=True)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    while not closed.is_set():
        run()


def together(cell: list[str], copies: int) -> list[list[float]]:
    """Each copy's passes' seconds, over `copies` children of `cell`
    (`child`'s arguments as text) started at once; every child killed after
    `TIMEOUT_S`, a RuntimeError naming what a failed one printed last."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.copies import child; "
            f"child(*sys.argv[1:4], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]))")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # one core each
    procs: list[tuple[subprocess.Popen[str], Any]] = []
    timer = threading.Timer(TIMEOUT_S, lambda: [proc.kill() for proc, _ in procs])
    timer.start()
    try:
        for _ in range(copies):
            errors = tempfile.TemporaryFile("w+")  # read only when a copy fails
            procs.append((subprocess.Popen([sys.executable, "-c", code, *cell], env=env,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=errors, text=True), errors))
        for proc, errors in procs:  # every copy built and warm before any is timed
            if proc.stdout.readline().strip() != READY:
                raise RuntimeError(f"a copy did not start: {last_line(proc, errors)}")
        for proc, _ in procs:
            proc.stdin.write(GO + "\n")
            proc.stdin.flush()
        times = []
        for proc, errors in procs:
            try:
                times.append([float(t) for t in json.loads(proc.stdout.readline())])
            except (ValueError, TypeError):
                raise RuntimeError(f"a copy failed: {last_line(proc, errors)}") from None
    finally:
        timer.cancel()
        for proc, errors in procs:
            proc.stdin.close()
            try:
                proc.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
            errors.close()
    return times


def last_line(proc: subprocess.Popen[str], errors: Any) -> str:
    """What a failed child wrote last to stderr, or how it ended."""
    proc.kill()
    proc.wait()
    errors.seek(0)
    lines = errors.read().strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def ceiling(kind: str, mode: str, name: str, hidden: int, batch: int, copies: int,
            seconds: float = 2.0, rounds: int = 2) -> float | None:
    """N x (median pass alone / the slowest copy's median pass among N),
    alone and together alternating for `rounds` (the median of the rounds'
    slowest copies); None, with the reason printed, where a copy fails."""
    cell = [kind, mode, name, str(hidden), str(batch), str(seconds)]
    alone: list[float] = []
    slowest: list[float] = []
    try:
        for _ in range(rounds):
            alone += together(cell, 1)[0]
            slowest.append(max(map(statistics.median, together(cell, copies))))
    except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as e:
        print(f"copies of {' '.join(cell[:3])}: not measured: {e}", flush=True)
        return None
    return copies * statistics.median(alone) / statistics.median(slowest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=["frontier", "recursive"], default="frontier")
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--workload", default="sst")
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0, help="each copy's timing")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    found = ceiling(args.kind, args.mode, args.workload, args.hidden, args.batch, args.copies,
                    args.seconds, args.rounds)
    print(f"{args.kind} {args.mode} {args.workload} h={args.hidden} b{args.batch}: "
          f"{args.copies} copies at once / one alone: "
          + ("not measured" if found is None else f"{found:.2f}x"))
    return 0 if found is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
