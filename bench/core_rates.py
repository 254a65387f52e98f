"""Each core's SGEMM rate, alone and with every core busy: are some slower?

A team that splits a height's rows evenly waits at every barrier for its
slowest thread, so a core that runs slower than the others (a VM's virtual
CPU the host shares, a lower clock under load) costs the whole team. This
runs one process pinned to each allowed core, each timing a one-thread
NumPy SGEMM of a frontier product's shape (400 rows by a 512 x 1280
weight), first each core alone in turn, then all of them at once:

    python -m bench.core_rates [--seconds 1.0]

prints each core's GFLOP/s both ways and their spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPE = (400, 512, 1280)  # rows, k, n: a complete-128 height's product at h=256
CHILD = """
import json, os, sys, time
os.sched_setaffinity(0, {core})
import numpy as np
m, k, n = {shape}
a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
c = a @ b
time.sleep(max(0.0, {start} - time.time()))
count, begin = 0, time.perf_counter()
while time.perf_counter() - begin < {seconds}:
    np.matmul(a, b, out=c)
    count += 1
print(json.dumps(2 * m * k * n * count / (time.perf_counter() - begin) / 1e9))
"""
ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                     "MKL_NUM_THREADS")}


def rates(cores: list[int], seconds: float) -> list[float]:
    """GFLOP/s of one pinned process on each of `cores`, all timed at once."""
    start = time.time() + 1.0 + 0.05 * len(cores)  # after every child's import
    children = [subprocess.Popen(
        [sys.executable, "-c", CHILD.format(core={core}, shape=SHAPE, start=start,
                                            seconds=seconds)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, **ONE_THREAD})
        for core in cores]
    return [json.loads(child.communicate()[0]) for child in children]


def spread(values: list[float]) -> str:
    return (f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f} "
            f"GFLOP/s (least / median / most; most over least {max(values) / min(values):.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    alone = [rates([core], args.seconds / 2)[0] for core in cores]
    together = rates(cores, args.seconds)
    for core, one, all_ in zip(cores, alone, together, strict=True):
        print(f"core {core}: alone {one:.0f}, all busy {all_:.0f} GFLOP/s")
    print(f"alone: {spread(alone)}")
    print(f"all busy: {spread(together)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
