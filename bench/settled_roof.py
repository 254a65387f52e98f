"""The frontier's share of the one-core SGEMM roof, the two timed in the same rounds.

`run.py targets`' roof rows divide the complete-128 cell's rate (h=256,
batch 25, one thread) by the best SGEMM rate the run saw. Where a host's
speed drifts between spells (on the 16-core machine one such call read 44
to 66 ms within minutes while the roof held), that quotient falls wherever
the cell caught a slow spell and the roof a fast one. Here each round
times one call of the cell and then the product that set the roof (the
library and shape at the top of `roof.measure`, at one thread), and the
share is the median of the rounds' quotients.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import batching, roof

ROUNDS = 7


def roof_product() -> tuple[str, str, int, int, int]:
    """(library, layout, m, n, k) of the fastest product `quick_roof` times
    on one thread."""
    rows = roof.measure([256], 1, [1600], repeats=1)
    _, library, row = max((g, lib, r) for r in rows for lib, g in r["gflops"].items())
    return library, row["layout"], row["m"], row["n"], row["k"]


def shares(mode: str, product: tuple[str, str, int, int, int], rounds: int = ROUNDS,
           workload: str = "complete-128", hidden: int = 256) -> list[float]:
    """Each round's cell GFLOP/s over the roof product's, in `mode`."""
    trees, vocab, _ = batching.workload(workload, 25)
    batch = trees[:25]
    run = batching.recir_frontier(batching.make_params(hidden, vocab), mode, 1)
    flops = batching.cell_flops(batch, hidden) * (1 if mode == "infer" else 3)
    library, layout, m, n, k = product
    sgemm = roof.product(library, layout, *roof.operands(layout, m, n, k), 1)
    for _ in range(2):  # compiled, its loops made, warm
        run(batch)
    found = []
    for _ in range(rounds):
        start = time.perf_counter()
        run(batch)
        cell = flops / (time.perf_counter() - start) / 1e9
        found.append(cell / roof.rate(sgemm, 2.0 * m * n * k, 1))
    return found


def measure() -> dict[str, Any]:
    """{mode: {"median", "low", "high"}} and the roof's product."""
    product = roof_product()
    found: dict[str, Any] = {"product": list(product)}
    for mode in ("infer", "train"):
        each = shares(mode, product)
        found[mode] = {"median": statistics.median(each), "low": min(each), "high": max(each)}
        print(f"roof, settled: c128 h=256 b25 1t {mode} over {product[0]}'s "
              f"{product[2]}x{product[3]}x{product[4]} {product[1]}, {len(each)} rounds: "
              f"median {found[mode]['median']:.2f} ({found[mode]['low']:.2f}-"
              f"{found[mode]['high']:.2f})", flush=True)
    return found
