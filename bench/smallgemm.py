"""Frontier products: recir's kernels (`gemm.py`) against OpenBLAS.

A TreeLSTM's internal-node weight W (5h x 2h), h = 150 and 256, against a
frontier of 1 to 128 rows: the forward `x @ W.T` (`nt`), the backward
`dY @ W` (`nn`) and the weight gradient `dY.T @ X` over the rows (`tn`,
added into a kept buffer; OpenBLAS writes one with beta 0). OpenBLAS (its
AVX2 kernels in this environment) at the given thread count and recir's
kernel on one, in the same rounds (median over the rounds, each the mean
of a few calls); for `nt` on more than one thread also the kernel's team
form (`gemm.team_kernel`, as a batched function's products over rows run:
each thread of a libgomp team a block of the weight's rows or of x's rows,
on every product with two tiles to share). The weight
stays in cache between calls here, unlike in a frontier run: the in-run
gain is smaller.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bench.common import fmt, machine_info, median, print_table, rounds_times, write_json

ROWS = [1, 2, 3, 5, 8, 13, 19, 28, 45, 64, 128]
PRODUCTS = {"nt": "x @ W.T", "nn": "dY @ W", "tn": "dY.T @ X"}  # forward, backward, gradient


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--hidden", type=int, nargs="+", default=[150, 256])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rows", type=int, nargs="+", default=ROWS)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--products", nargs="+", default=list(PRODUCTS), choices=list(PRODUCTS))


def product(kind: str, m: int, h: int, threads: int, rng: np.random.Generator
            ) -> dict[str, Any]:
    """Thunks for one frontier's product (OpenBLAS on `threads`, recir's
    kernel, for `nt` also its team form on `threads`), results checked equal:
    `nt` the forward x @ W.T, `nn` the backward dY @ W, `tn` the weight
    gradient dY.T @ X over m rows (`gemm.py`)."""
    from recir.backend.kernels import gemm

    w = rng.standard_normal((5 * h, 2 * h), dtype=np.float32)
    x = rng.standard_normal((m, 2 * h), dtype=np.float32)
    dy = rng.standard_normal((m, 5 * h), dtype=np.float32)
    if kind == "nt":
        thunks = {"openblas": lambda: x @ w.T, "recir": lambda: gemm.gemm(x, w.T)}
        if threads > 1 and gemm.team_kernel("nt") is not None:
            thunks["team"] = lambda: gemm.gemm(x, w.T, threads=threads, min_work=0)
    elif kind == "nn":
        thunks = {"openblas": lambda: dy @ w, "recir": lambda: gemm.gemm(dy, w)}
    else:  # into kept buffers: a fresh 2.6 MB result faults its pages in at every call
        g, out = np.zeros((5 * h, 2 * h), np.float32), np.empty((5 * h, 2 * h), np.float32)
        np.testing.assert_allclose(gemm.gemm(dy.T, x, g), dy.T @ x, rtol=1e-3, atol=1e-3)
        return {"openblas": lambda: np.matmul(dy.T, x, out=out),
                "recir": lambda: gemm.gemm(dy.T, x, g)}
    want = thunks["openblas"]()
    for thunk in thunks.values():
        np.testing.assert_allclose(thunk(), want, rtol=1e-3, atol=1e-3)
    return thunks


def timed(thunks: dict[str, Any], calls: int, threads: int, repeats: int
          ) -> dict[str, list[float]]:
    """OpenBLAS and the kernel in the same rounds; the team form in rounds
    of its own with OpenBLAS on one thread and its workers asleep (a spinning
    OpenBLAS worker holds the second core, which a frontier run never meets:
    it keeps OpenBLAS on one thread)."""
    from recir.backend.kernels import blas

    def many(f: Any) -> Any:
        return lambda: [f() for _ in range(calls)]

    blas.set_threads(threads)
    times = rounds_times({k: many(f) for k, f in thunks.items() if k != "team"}, repeats)
    if "team" in thunks:
        blas.set_threads(1)
        time.sleep(0.3)  # past OpenBLAS's spin timeout
        times.update(rounds_times({"team": many(thunks["team"])}, repeats))
    return times


def run(args: argparse.Namespace) -> int:
    from recir.backend.kernels import blas

    rng = np.random.default_rng(0)
    results = []
    for kind, threads, h in ((k, t, h) for k in args.products for t in args.threads
                             for h in args.hidden):
        rows = []
        for m in args.rows:
            thunks = product(kind, m, h, threads, rng)
            calls = max(1, 20 // max(1, m // 8))
            times = timed(thunks, calls, threads, args.repeats)
            t = {k: median(v) / calls for k, v in times.items()}
            gflops = 2.0 * m * 10 * h * h / 1e9
            results.append({"product": kind, "threads": threads, "hidden": h, "rows": m,
                            **{f"{k}_us": v * 1e6 for k, v in t.items()}})
            row = [str(m)]
            for k in thunks:
                row += [fmt(t[k] * 1e6, 0), fmt(gflops / t[k])]
            rows.append(row + [fmt(t["openblas"] / t[k], 2) for k in thunks
                               if k != "openblas"])
        names = [k for k in thunks if k != "openblas"]
        print_table(f"{PRODUCTS[kind]}, W {5 * h}x{2 * h}: OpenBLAS on {threads} thread(s), "
                    f"recir on 1{', team on ' + str(threads) if 'team' in names else ''}",
                    ["rows"] + [c for k in thunks for c in (f"{k} us", "GF/s")]
                    + [f"{k} speedup" for k in names], rows)
    blas.set_threads(1)
    if args.json:
        write_json(args.json, {"machine": machine_info(), "results": results})
    return 0
