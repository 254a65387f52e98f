"""One frontier cell's native time a call, two checkouts alternating in fresh processes.

`python -m bench.cell_ab --base CHECKOUT [--mode infer] [--workload
complete-128] [--hidden 256] [--pairs 6] [--calls 30]` runs the cell (batch
25, one thread) in a process of each checkout in turn, `pairs` times, each
with an object cache of its own (kept between its pairs), and prints each
process's median native seconds a call (the numbering call, which runs the
expansion and the height loops: `RepeatCall.made`) in CPU time of the
calling thread, then each pair's ratio here / base and their median. A
kernel change shows in the cell beside `bench/gemm_ab.py`'s products; on a
shared host only a ratio within one pair compares.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import run_script

HERE = Path(__file__).resolve().parent.parent
CELL = r'''
import os, statistics, sys, time
sys.path.insert(0, os.environ["CELL_ROOT"])
from bench.batching import keep_freed_memory, make_params, recir_frontier, workload
from recir.backend import repeat_call
keep_freed_memory()
mode, name, hidden, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
trees, vocab, _ = workload(name, 25)
run, batch, spent = recir_frontier(make_params(hidden, vocab), mode, 1), trees[:25], []
made = repeat_call.RepeatCall.made
def timed(self):
    start = time.thread_time()
    try:
        return made(self)
    finally:
        spent.append(time.thread_time() - start)
repeat_call.RepeatCall.made = timed
for _ in range(3):
    run(batch)
spent.clear()
for _ in range(calls):
    run(batch)
print(statistics.median(spent) if spent else float("nan"))
'''


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", required=True, help="the other checkout's root")
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--workload", default="complete-128")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--calls", type=int, default=30)


def cell_seconds(root: Path, cache: str, args: argparse.Namespace) -> float:
    """The cell's median native seconds a call in a fresh process of `root`."""
    env = dict(os.environ, CELL_ROOT=str(root), RECIR_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", CELL, args.mode, args.workload,
                           str(args.hidden), str(args.calls)], env=env, cwd=root,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    roots = {"base": Path(args.base).resolve(), "here": HERE}
    found: dict[str, list[float]] = {name: [] for name in roots}
    with tempfile.TemporaryDirectory(prefix="recir-cell-ab-") as scratch:
        for _ in range(args.pairs):
            for name, root in roots.items():
                found[name].append(cell_seconds(root, f"{scratch}/{name}", args))
    return found


def run(args: argparse.Namespace) -> int:
    found = measure(args)
    ratios = [h / b for h, b in zip(found["here"], found["base"], strict=True)]
    print(f"{args.workload} h={args.hidden} b25 1t {args.mode}, native ms a call "
          f"(thread CPU), here / base in each pair:")
    for k, (b, h, r) in enumerate(zip(found["base"], found["here"], ratios, strict=True)):
        print(f"  pair {k + 1}: base {b * 1e3:.2f}  here {h * 1e3:.2f}  {r:.3f}")
    print(f"median here / base {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(__doc__, add_arguments, run))
