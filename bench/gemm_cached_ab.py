"""A backward's `dY W` (nn) packing W every product, against reading a weight's packed copy.

`python -m bench.gemm_cached_ab [--repeats 20] 8x300x750 25x512x1280 ...`
times each m x n x k product (C = A W, W k x n) by `recir_gemm_nn`, which
packs W's panels on every call (or reads W in place for a tile of rows or
fewer), and by `recir_gemm_nn.cached` with an entry whose copy an earlier
product made (`passes/gemm_cached.py`), as a height loop's later heights
run it, interleaved, keeping each one's best, in CPU time of the thread,
and prints plain / cached. A frontier's backward runs these products at
every height, mostly of few rows: its leaves' and its thin heights'.
"""

from __future__ import annotations

import argparse
import ctypes

import numpy as np

from bench.common import run_script
from bench.gemm_cell import calls_for, seconds
from recir.backend.kernels.compiled_gemm import GEMM, I64, PTR, engine
from recir.passes.gemm_cached import ENTRY

CACHED = ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64, PTR, PTR)
SHAPES = ("1x300x750", "6x300x750", "12x300x750", "32x300x750", "128x300x750",
          "6x512x1280", "25x512x1280", "100x512x1280", "400x512x1280")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shapes", nargs="*", default=SHAPES, help="m x n x k, as 25x512x1280")
    parser.add_argument("--repeats", type=int, default=20)


def run(args: argparse.Namespace) -> int:
    compiled = engine()
    plain = GEMM(compiled.address("recir_gemm_nn"))
    cached = CACHED(compiled.address("recir_gemm_nn.cached"))
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    rng = np.random.default_rng(0)
    print("nn m x n x k: plain us, cached us, plain / cached (best of each, thread CPU)")
    for shape in args.shapes:
        m, n, k = (int(x) for x in shape.split("x"))
        a, w = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
        c, entry = np.zeros((m, n), np.float32), np.zeros(ENTRY, np.int64)
        operands = (m, n, k, a.ctypes.data, k, w.ctypes.data, n, c.ctypes.data, n, 0)
        try:
            contestants = {"plain": lambda: plain(*operands),
                           "cached": lambda: cached(*operands, None, entry.ctypes.data)}
            contestants["cached"]()  # the copy made, as at a loop's first height
            calls = {name: calls_for(fn) for name, fn in contestants.items()}
            best = dict.fromkeys(contestants, float("inf"))
            for _ in range(args.repeats):
                for name, fn in contestants.items():
                    best[name] = min(best[name], seconds(fn, calls[name]))
            np.testing.assert_allclose(c, a.astype(np.float64) @ w, rtol=1e-3,
                                       atol=1e-3 * np.sqrt(k))
        finally:
            free(int(entry[4]) or None)
        print(f"  {shape}: {best['plain'] * 1e6:9.1f} {best['cached'] * 1e6:9.1f} "
              f"{best['plain'] / best['cached']:7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(__doc__, add_arguments, run))
