"""A call's time after the other thread count's turn, and after a pause.

`run.py targets` times one and N threads in rounds, each a pass over the
trees in batches after the other count's pass. This measures what that
costs a pass's first call: rounds with the batches' order rotated, so that
each batch is sometimes first, and each batch's first-call time against its
time later in a pass (`first_call_extra`). Then calls after a pause of
nothing (0.5, 2 and 16 ms) against back-to-back calls.

    .venv/bin/python -m bench.first_call --mode infer --threads 2 --rounds 16
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import batching
from bench.common import run_script

PAUSES = (0.0, 0.0005, 0.002, 0.016)

Calls = dict[int, list[tuple[bool, float]]]  # batch -> (first in its pass, seconds)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=150)


def first_call_extra(calls: Calls) -> tuple[list[float], list[float]]:
    """Per batch: its median time later in a pass, and its median first-call
    time's excess over that."""
    later = [statistics.median([s for first, s in calls[k] if not first]) for k in sorted(calls)]
    first = [statistics.median([s for f, s in calls[k] if f]) for k in sorted(calls)]
    return later, [a - b for a, b in zip(first, later, strict=True)]


def rotated_rounds(runs: dict[int, Callable[[Any], Any]], batches: Sequence[Any],
                   rounds: int) -> dict[int, Calls]:
    """Each thread count's pass in turn, round r starting at batch r."""
    found: dict[int, Calls] = {t: {k: [] for k in range(len(batches))} for t in runs}
    for r in range(rounds):
        for t, run in runs.items():
            for j in range(len(batches)):
                k = (r + j) % len(batches)
                start = time.perf_counter()
                run(batches[k])
                found[t][k].append((j == 0, time.perf_counter() - start))
    return found


def after_pauses(run: Callable[[Any], Any], batches: Sequence[Any], calls: int
                 ) -> dict[float, float]:
    """Median seconds of a call after each pause (0: right after another call)."""
    found = {}
    for pause in PAUSES:
        times = []
        for r in range(calls):
            if pause:
                time.sleep(pause)
            else:
                run(batches[(r + 1) % len(batches)])
            start = time.perf_counter()
            run(batches[r % len(batches)])
            times.append(time.perf_counter() - start)
        found[pause] = statistics.median(times)
    return found


def run(args: argparse.Namespace) -> int:
    batching.keep_freed_memory()
    trees, vocab, _ = batching.workload("sst", 25)
    batches = [trees[k:k + 25] for k in range(0, len(trees), 25)]
    if args.rounds < len(batches):  # each batch first in one pass and later in another
        raise SystemExit(f"error: --rounds {args.rounds}: at least {len(batches)}, the "
                         "number of batches")
    params = batching.make_params(args.hidden, vocab)
    runs = {t: batching.recir_frontier(params, args.mode, t) for t in (1, args.threads)}
    for fn in runs.values():
        for _ in range(5):
            for b in batches:
                fn(b)
    found = rotated_rounds(runs, batches, args.rounds)
    for t, calls in found.items():
        later, extra = first_call_extra(calls)
        print(f"{args.mode} {t}t: each batch's call later in a pass, us: "
              f"{[round(s * 1e6) for s in later]}; a pass's first call's extra, us: "
              f"{[round(s * 1e6) for s in extra]}")
    for t, fn in runs.items():
        paused = after_pauses(fn, batches, 4 * args.rounds)
        print(f"{args.mode} {t}t: a call after a pause of (ms): "
              + ", ".join(f"{p * 1e3:g}: {s * 1e6:.0f} us" for p, s in paused.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(__doc__, add_arguments, run))
