"""The cost model behind `run.py distributed`'s speedup predictions.

A step on N ranks costs compute + allreduce + allgather + optimizer:
- allreduce of B dense bytes (MPICH: recursive doubling for latency,
  reduce-scatter + allgather for volume): a * 2ceil(log2 N) + b * 2(N-1)/N * B;
- allgather of the embedding rows, R bytes from all ranks together:
  a * ceil(log2 N) + b * (N-1)/N * R;
- the optimizer step, the same on every rank, does not shrink with N; with a
  batch per machine it touches the union of their embedding rows (timed).
`a` and `b` are fitted to bare Allreduce timings here (shared memory). Over
Ethernet a round also pays the wire's latency, a + LATENCY_S, and a byte its
transfer time 1 / (line rate * PAYLOAD) as well as its local cost b (copy
and sum): `serial` adds the two, `overlapped` takes the larger (MPICH
pipelines long messages, so the sums of one chunk can hide behind the next
chunk's transfer). Two cases, from the measured one-rank step:
- the paper's (data-parallel TensorFlow): each machine takes its own batch
  of 25, so N machines take N times the trees per step;
- one global batch of 25 split N ways (`--distributed` here, same updates as
  one process): compute shrinks by N times the node imbalance of the split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# One-way small-message latency of MPI over TCP on 10/25 GbE (kernel stack,
# no RDMA): 20-50 us is the usual range; the upper end is taken.
LATENCY_S = 50e-6
PAYLOAD = 0.94  # TCP/IP payload over line rate at a 1500-byte MTU
PAPER = {2: 1.85, 4: 3.65, 8: 7.34}  # Jeong et al., EuroSys'18, TreeLSTM
FLOAT = 4


def rounds(ranks: int) -> int:
    return math.ceil(math.log2(ranks)) if ranks > 1 else 0


def fit(probes: Sequence[dict[str, Any]]) -> dict[str, float]:
    """a (s per round) and b (s per byte) of the allreduce model, least
    squares on relative error (the times span three decades)."""
    x = np.array([[2 * rounds(p["ranks"]),
                   2 * (p["ranks"] - 1) / p["ranks"] * p["bytes"]] for p in probes])
    t = np.array([p["seconds"] for p in probes])
    (a, b), *_ = np.linalg.lstsq(x / t[:, None], np.ones_like(t), rcond=None)
    a, b = max(float(a), 0.0), max(float(b), 1e-13)
    error = np.abs(x @ np.array([a, b]) / t - 1)
    return {"latency_s": a, "seconds_per_byte": b, "bytes_per_s": 1 / b,
            "points": len(probes), "max_rel_error": float(error.max())}


def network_seconds(model: dict[str, float], ranks: int, dense_bytes: float,
                    row_bytes: float, gbps: float, overlapped: bool) -> float:
    """Allreduce of the dense gradients plus allgather of all ranks' rows."""
    a = model["latency_s"] + LATENCY_S
    wire = 8 / (gbps * 1e9 * PAYLOAD)
    b = (max if overlapped else sum)((model["seconds_per_byte"], wire))
    share = (ranks - 1) / ranks
    return (a * 2 * rounds(ranks) + b * 2 * share * dense_bytes
            + a * rounds(ranks) + b * share * row_bytes)


def predictions(model: dict[str, float], one_rank: dict[str, Any],
                stats: dict[int, dict[str, float]], dense_floats: int,
                width: int) -> list[dict[str, Any]]:
    """Speedups on 2, 4 and 8 machines of one rank each, at 10 and 25 Gb/s.
    `stats[N]`: per step, `imbalance` (largest share's nodes over the mean)
    and `rows` (the shares' embedding rows, summed) for a batch split N ways,
    `optimizer_s` for a step over N batches' rows; `stats[1]` is one batch's."""
    compute = one_rank["compute_seconds"] / one_rank["steps"]
    optimizer = one_rank["optimizer_seconds"] / one_rank["steps"]
    dense = FLOAT * (dense_floats + 1)
    alone = compute + optimizer
    out = []
    for machines in (2, 4, 8):
        # N batches touch more embedding rows than one: the step grows by
        # what those rows cost (the dense parameters' update does not grow)
        grown = optimizer + stats[machines]["optimizer_s"] - stats[1]["optimizer_s"]
        own_rows = FLOAT * width * machines * stats[1]["rows"]
        split_rows = FLOAT * width * stats[machines]["rows"]
        split_compute = compute * stats[machines]["imbalance"] / machines
        cases = {
            "own batch of 25 per machine (the paper's)":
                lambda g, over, n=machines, r=own_rows, o=grown: n * alone / (
                    compute + o + network_seconds(model, n, dense, r, g, over)),
            "one batch of 25 split (--distributed)":
                lambda g, over, n=machines, r=split_rows, c=split_compute: alone / (
                    c + optimizer + network_seconds(model, n, dense, r, g, over)),
        }
        for case, speedup in cases.items():
            out.append({"case": case, "machines": machines, "paper": PAPER[machines]}
                       | {f"speedup_{g}gbps{'_overlapped' if over else ''}":
                          speedup(g, over) for g in (10, 25) for over in (False, True)})
    return out
