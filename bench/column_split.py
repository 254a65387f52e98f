"""What a thread saves when a team shares a product by columns.

A frontier team's thread multiplies its m rows of a height by the whole
weight, x W^T with W 5h x 2h. Shared by columns between two threads, each
would multiply all 2m rows by half of W's rows: the same multiply-adds,
half the weight streamed. This times recir's nt kernel (one thread) both
ways, alternating, and prints their ratio: where it is near 1, the
products do not wait on the weight's stream, and sharing them would only
add its copies and barriers.

    .venv/bin/python -m bench.column_split --hidden 150 256 --rows 2 5 10 20 30 60
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import (fmt, machine_info, median, print_table, rounds_times, run_script,
                          write_json)

ROWS = [2, 5, 10, 20, 30, 60]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--hidden", type=int, nargs="+", default=[150, 256])
    parser.add_argument("--rows", type=int, nargs="+", default=ROWS)
    parser.add_argument("--repeats", type=int, default=7)


def halves(m: int, hidden: int, rng: np.random.Generator) -> dict[str, Any]:
    """Thunks: m rows by all of W, and 2m rows by W's first half of rows,
    each checked against NumPy."""
    from recir.backend.kernels import gemm

    w = rng.standard_normal((5 * hidden, 2 * hidden), dtype=np.float32)
    half = np.ascontiguousarray(w[:5 * hidden // 2])
    x = rng.standard_normal((m, 2 * hidden), dtype=np.float32)
    both = rng.standard_normal((2 * m, 2 * hidden), dtype=np.float32)
    thunks = {"whole": lambda: gemm.gemm(x, w.T), "half": lambda: gemm.gemm(both, half.T)}
    for thunk, want in ((thunks["whole"], x @ w.T), (thunks["half"], both @ half.T)):
        np.testing.assert_allclose(thunk(), want, rtol=1e-3, atol=1e-3)
    return thunks


def measure(hidden: int, rows: list[int], repeats: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(0)
    found = []
    for m in rows:
        thunks = halves(m, hidden, rng)
        calls = max(1, 40 // m)
        times = rounds_times({k: (lambda f=f: [f() for _ in range(calls)])
                              for k, f in thunks.items()}, repeats)
        whole, half = (median(times[k]) / calls for k in ("whole", "half"))
        found.append({"hidden": hidden, "rows": m, "whole_us": whole * 1e6,
                      "half_us": half * 1e6, "half_over_whole": half / whole})
    return found


def run(args: argparse.Namespace) -> int:
    results = []
    for hidden in args.hidden:
        found = measure(hidden, args.rows, args.repeats)
        results += found
        print_table(f"x W^T, W {5 * hidden}x{2 * hidden}: m rows by all of W, 2m rows by half "
                    "(recir's nt kernel, one thread)",
                    ["rows m", "m x W us", "2m x W/2 us", "ratio"],
                    [[str(r["rows"]), fmt(r["whole_us"], 1), fmt(r["half_us"], 1),
                      fmt(r["half_over_whole"], 2)] for r in found])
    if args.json:
        write_json(args.json, {"machine": machine_info(), "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(__doc__, add_arguments, run))
