"""A recursive gradient's logs added two ways, in alternating rounds, one process.

After a recursive gradient's team call, each thread's log of deferred outer
products is added into its weight's gradient (`backend/outer_logs.py`).
This times the SST TreeLSTM's recursive gradient on N threads in batches,
two ways a round, the same weights and trees:

- `--compare threshold`: the logs' products on a team from the warm team's
  start (the call's workers still spin) against the cold one's
  (`policy.team_min_work`);
- `--compare segments`: a buffer's logs by one team through every log
  (`gemm.add_outer_logs`) against one product a thread's log.

It prints each way's median microseconds a tree and the per-round ratio's
median (second way over first).

    .venv/bin/python -m bench.outer_logs_ab --compare threshold --batch 1
    .venv/bin/python -m bench.outer_logs_ab --compare segments --threads 16 --batch 25
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.batching import args_of, keep_freed_memory, make_params, workload
from recir.backend import policy
from recir.backend.kernels import gemm


def one_a_log(target: int, rows: int, cols: int, segments: np.ndarray, threads: int = 1,
              team_work: int = -1) -> None:
    """Each log by its own product (on a team where one pays)."""
    for dy, ldy, x, ldx, k in segments.tolist():
        gemm.add_outer_at(target, rows, cols, dy, ldy, x, ldx, k, threads, team_work)


def ways(compare: str, native: Any, threads: int) -> dict[str, Callable[[], None]]:
    """What each way sets before its round."""
    if compare == "threshold":
        costs = policy.costs()
        works = {"cold": policy.team_min_work(threads, costs),
                 "warm": policy.team_min_work(threads, costs, warm=True)}
        return {name: (lambda w=w: native.team_works.__setitem__(threads, w))
                for name, w in works.items()}
    together = gemm.add_outer_logs
    return {"one a log": lambda: setattr(gemm, "add_outer_logs", one_a_log),
            "together": lambda: setattr(gemm, "add_outer_logs", together)}


def rounds(run: Callable[[list[Any]], Any], chunks: list[list[Any]],
           setters: dict[str, Callable[[], None]], count: int) -> dict[str, list[float]]:
    """Seconds a tree of each way, `count` rounds, the ways in turn."""
    trees = sum(map(len, chunks))
    found: dict[str, list[float]] = {name: [] for name in setters}
    for _ in range(count):
        for name, setter in setters.items():
            setter()
            run(chunks[0])  # the team's workers awake, as in back-to-back calls
            start = time.perf_counter()
            for chunk in chunks:
                run(chunk)
            found[name].append((time.perf_counter() - start) / trees)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", choices=["threshold", "segments"], default="threshold")
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    import recir
    from recir.models import tree_lstm

    keep_freed_memory()
    trees, vocab, _ = workload("sst", args.batch)
    params = make_params(args.hidden, vocab)
    grad = recir.value_and_grad(tree_lstm.trace_model(params), threads=args.threads)
    into = {k: np.zeros_like(v) for k, v in params.items()}
    items = [args_of(t) for t in trees]
    chunks = [items[i:i + args.batch] for i in range(0, len(items), args.batch)]
    run = lambda chunk: grad.batch(chunk, into)  # noqa: E731
    run(chunks[0])
    setters = ways(args.compare, grad.native.wait(), args.threads)
    found = rounds(run, chunks, setters, args.rounds)
    first, second = found.values()
    for name, seconds in found.items():
        print(f"{name}: {statistics.median(seconds) * 1e6:.1f} us a tree")
    names = list(found)
    print(f"{names[1]} / {names[0]}, per round, median: "
          f"{statistics.median(b / a for a, b in zip(first, second, strict=True)):.3f}")


if __name__ == "__main__":
    main()
