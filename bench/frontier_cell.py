"""One TreeLSTM batch through recir's frontier form, in CPU time, against the SGEMM roof.

`python bench/frontier_cell.py --hidden 256 --leaves 128 --batch 25` runs
`bench/batching.py`'s `recir-frontier` contestant (inference, training)
on one batch of complete trees, on one thread, and prints trees/s, the
cell's matrix-product GFLOP/s (`batching.cell_flops`; training three times
inference's) and its fraction of the roof: NumPy's best sgemm rate at a
2048^3 product and at the widest node product, timed in the same process.
Every time is this process's CPU time (the best of the repeats): on a host
shared with other jobs a wall clock also counts the time they hold the
core, so only these figures compare across runs and checkouts. The roof
and the cell are timed in turns (`--rounds`), each figure the best of all
its turns, so that a host whose speed drifts during the run moves both.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402


def best_seconds(fn, repeats: int, calls: int = 1) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best


def roof(hidden: int, rows: int, repeats: int) -> float:
    """NumPy's best sgemm GFLOP/s at the big square and the widest node product."""
    rng = np.random.default_rng(0)
    rates = []
    for m, n, k in ((2048, 2048, 2048), (rows, 5 * hidden, 2 * hidden)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k)).astype(np.float32)
        rates.append(2.0 * m * n * k / best_seconds(lambda a=a, b=b: a @ b.T, repeats) / 1e9)
    return max(rates)


def positive(text: str) -> int:
    """A count of turns or repeats: one at least (with none, nothing is timed)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return int(text)


def main() -> int:
    from bench import batching

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--leaves", type=int, default=128)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--repeats", type=positive, default=7)
    parser.add_argument("--rounds", type=positive, default=3)
    args = parser.parse_args()
    trees, vocab, _ = batching.workload(f"complete-{args.leaves}", args.batch)
    trees = trees[:args.batch]
    params = batching.make_params(args.hidden, vocab)
    flops = batching.cell_flops(trees, args.hidden)
    modes = {mode: batching.CONTESTANTS["recir-frontier"](params, mode, 1)
             for mode in ("infer", "train")}
    top, seconds = 0.0, dict.fromkeys(modes, float("inf"))
    for _ in range(args.rounds):
        top = max(top, roof(args.hidden, args.batch * args.leaves // 2, args.repeats))
        for mode, run in modes.items():
            seconds[mode] = min(seconds[mode], best_seconds(lambda run=run: run(trees),
                                                            args.repeats))
    print(f"SGEMM roof (NumPy, CPU time): {top:.0f} GFLOP/s")
    for mode, scale in (("infer", 1), ("train", 3)):
        rate = scale * flops / seconds[mode] / 1e9
        print(f"{mode}: {args.batch / seconds[mode]:.1f} trees/s, {rate:.1f} GFLOP/s, "
              f"{100 * rate / top:.1f}% of the roof")
    return 0


if __name__ == "__main__":
    sys.exit(main())
