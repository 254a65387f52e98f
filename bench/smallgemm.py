"""Few-row products: recir's kernel (`recir/batching/smallgemm.py`) against OpenBLAS.

The forward product `x @ W.T` of a frontier of 1 to 128 rows with a
TreeLSTM's internal-node weight (5h x 2h), h = 150 and 256, both in the same
rounds (median over the rounds, each the mean of a few calls); OpenBLAS at
the given thread count, recir's kernel on one. The weight stays in cache
between calls here, unlike in a frontier run: the in-run gain is smaller.
The rows where the kernel wins are what `kernels.SMALL_ROWS` uses.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import fmt, machine_info, median, print_table, rounds_times, write_json

ROWS = [1, 2, 3, 5, 8, 13, 19, 28, 45, 64, 128]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--hidden", type=int, nargs="+", default=[150, 256])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rows", type=int, nargs="+", default=ROWS)
    parser.add_argument("--repeats", type=int, default=7)


def product(m: int, h: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """(OpenBLAS thunk, recir thunk) for one frontier, results checked equal."""
    from recir.batching import smallgemm

    w = rng.standard_normal((5 * h, 2 * h), dtype=np.float32)
    x = rng.standard_normal((m, 2 * h), dtype=np.float32)
    np.testing.assert_allclose(smallgemm.nt(x, w), x @ w.T, rtol=1e-3, atol=1e-3)
    return (lambda: x @ w.T), (lambda: smallgemm.nt(x, w))


def run(args: argparse.Namespace) -> int:
    from recir.batching import blas

    rng = np.random.default_rng(0)
    results = []
    for threads in args.threads:
        blas.set_threads(threads)
        for h in args.hidden:
            rows = []
            for m in args.rows:
                theirs, ours = product(m, h, rng)
                calls = max(1, 20 // max(1, m // 8))
                times = rounds_times({
                    "openblas": lambda f=theirs: [f() for _ in range(calls)],
                    "recir": lambda f=ours: [f() for _ in range(calls)]}, args.repeats)
                t = {k: median(v) / calls for k, v in times.items()}
                gflops = 2.0 * m * 10 * h * h / 1e9
                results.append({"threads": threads, "hidden": h, "rows": m,
                                "openblas_us": t["openblas"] * 1e6, "recir_us": t["recir"] * 1e6})
                rows.append([str(m), fmt(t["openblas"] * 1e6, 0), fmt(gflops / t["openblas"]),
                             fmt(t["recir"] * 1e6, 0), fmt(gflops / t["recir"]),
                             fmt(t["openblas"] / t["recir"], 2)])
            print_table(f"x @ W.T, W {5 * h}x{2 * h}: OpenBLAS on {threads} thread(s), "
                        "recir on 1", ["rows", "OpenBLAS us", "GF/s", "recir us", "GF/s",
                                       "recir speedup"], rows)
    blas.set_threads(1)
    if args.json:
        write_json(args.json, {"machine": machine_info(), "results": results})
    return 0
