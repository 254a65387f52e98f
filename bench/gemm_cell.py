"""recir's GEMM kernels against NumPy's sgemm at one TreeLSTM batch's products.

`python bench/gemm_cell.py --hidden 256 --leaves 128 --batch 25` lists the
products a level-batched TreeLSTM runs for one batch of complete trees (the
leaves' `x W^T`, each height's `x U^T`; in training also `dY W` and
`dY^T X` for both weights), times each with recir's raw kernels
(`compiled_gemm.kernel`: nn, tn, nt) and with NumPy at the same shapes,
alternating the two, and prints per product and in total (the batch's time,
inference and training) the GFLOP/s and recir's time over NumPy's (the
median of the repeats' ratios: the host is shared, so only a ratio taken
within one repeat is comparable; times are the thread's CPU time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.roof import numpy_product, operands  # noqa: E402

MIN_S = 0.01  # one timing: enough calls of the product to last this long


def products(hidden: int, leaves: int, batch: int) -> list[tuple[str, str, int, int, int]]:
    """(name, layout, m, n, k) of one batch: each height's forward products
    (the leaves' `x W^T` or the nodes' `x U^T`, and the classifier's `h
    W_out^T`, 5 classes; inference) and, for training, each one's dX and dW."""
    h = hidden
    heights = [batch * leaves]
    while heights[-1] // 2 >= batch:
        heights.append(heights[-1] // 2)
    out = []
    for rows in heights:
        name, n, k = ("leaf", 3 * h, h) if rows == heights[0] else (f"node{rows}", 5 * h, 2 * h)
        out += [(f"{name} x W^T", "nt", rows, n, k), (f"{name} h Wo^T", "nt", rows, 5, h)]
    for rows in heights:
        name, n, k = ("leaf", 3 * h, h) if rows == heights[0] else (f"node{rows}", 5 * h, 2 * h)
        out += [(f"{name} dY W", "nn", rows, k, n), (f"{name} dY^T X", "tn", n, k, rows),
                (f"{name} dYo Wo", "nn", rows, h, 5), (f"{name} dYo^T h", "tn", 5, h, rows)]
    return out


def recir_call(layout: str, a: np.ndarray, b: np.ndarray, m: int, n: int, k: int):
    from recir.backend.kernels.compiled_gemm import kernel

    fn = kernel(layout)
    c = np.zeros((m, n), np.float32)
    pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
    lda, ldb = a.shape[1], b.shape[1]
    accumulate = int(layout == "tn")  # as a weight's gradient does
    return lambda: (fn(m, n, k, pa, lda, pb, ldb, pc, n, accumulate), c)  # c outlives it


def seconds(fn, calls: int) -> float:
    """CPU time of this thread per call: on a shared host a wall clock also
    counts the time other jobs hold the core."""
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls


def calls_for(fn) -> int:
    fn()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < MIN_S:
        fn()
        calls += 1
    return max(1, calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--leaves", type=int, default=128)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for name, layout, m, n, k in products(args.hidden, args.leaves, args.batch):
        a, b = operands(layout, m, n, k)
        mine, theirs = recir_call(layout, a, b, m, n, k), numpy_product(layout, a, b)
        calls = (calls_for(mine), calls_for(theirs))
        times = [(seconds(mine, calls[0]), seconds(theirs, calls[1]))
                 for _ in range(args.repeats)]
        rows.append((name, layout, m, n, k, times))
    print(f"{'product':18} {'m x n x k':>16} {'recir':>7} {'numpy':>7} {'ratio':>6}")
    for name, layout, m, n, k, times in rows:
        flops = 2.0 * m * n * k
        mine = statistics.median(t[0] for t in times)
        theirs = statistics.median(t[1] for t in times)
        ratio = statistics.median(t[1] / t[0] for t in times)
        print(f"{name:18} {f'{m}x{n}x{k}':>16} {flops / mine / 1e9:7.1f} "
              f"{flops / theirs / 1e9:7.1f} {ratio:6.2f}")
    for mode, layouts in (("infer", ("nt",)), ("train", ("nt", "nn", "tn"))):
        picked = [r for r in rows if r[1] in layouts]
        flops = sum(2.0 * m * n * k for _, _, m, n, k, _ in picked)
        per = [(sum(r[5][i][0] for r in picked), sum(r[5][i][1] for r in picked))
               for i in range(args.repeats)]
        mine = statistics.median(p[0] for p in per)
        theirs = statistics.median(p[1] for p in per)
        ratio = statistics.median(p[1] / p[0] for p in per)
        print(f"{mode} batch: recir {flops / mine / 1e9:.1f} GFLOP/s, numpy "
              f"{flops / theirs / 1e9:.1f} GFLOP/s, recir at {ratio:.2f} of numpy's rate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
