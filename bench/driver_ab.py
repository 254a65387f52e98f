"""The numbering call's native steps on and off, in one process.

From a frontier function's second call, the native call that makes the
expansion and the height order also chooses the height loop's policy
(`kernels/height_policy`) and runs the `@post` or `_fwd` loop
(`kernels/height_call`). This times the frontier TreeLSTM three ways in
alternating rounds, one process, the same weights and batches:

- native: both in the numbering call (and an inference call repeated on
  the last one's plans, `backend/repeat_call`);
- policy: the policy there, the loop called from Python;
- python: both in Python (`NativeSchedule.choose`, `HeightLoop.__call__`),

each on 1 and N threads, and prints each median time a batch and each
way's per-round ratio to python's (below 1: faster). A difference of two
processes on a shared host is mostly the host; within one, rounds that
alternate share its slow spells.

    .venv/bin/python -m bench.driver_ab --mode infer --rounds 12
    .venv/bin/python -m bench.driver_ab --mode train --threads 16 --workload complete-128
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.batching import keep_freed_memory, make_params, recir_frontier, workload
from recir.backend import native_schedule, repeat_call

WAYS = ("native", "policy", "python")


def ways() -> dict[str, Callable[..., Any]]:
    """`NativeSchedule.policy` for each way."""
    policy = native_schedule.NativeSchedule.policy
    return {"native": policy, "policy": lambda self, *args: (policy(self, *args)[0], None),
            "python": lambda self, *args: (None, None)}


def set_way(policies: dict[str, Callable[..., Any]], way: str) -> None:
    """The schedule's policy for `way`; a call repeated only in the native
    way (elsewhere every call runs the schedule)."""
    native_schedule.NativeSchedule.policy = policies[way]  # type: ignore[method-assign]
    repeat_call.RepeatCall.repeat = REPEAT if way == "native" else (  # type: ignore
        lambda self, *args: None)


REPEAT = repeat_call.RepeatCall.repeat


def measure(mode: str, name: str, hidden: int, batch: int, threads: int, rounds: int
            ) -> dict[tuple[str, int], list[float]]:
    """Seconds a batch, per (way, thread count), one value a round."""
    keep_freed_memory()
    trees, vocab, _ = workload(name, batch)
    batches = [trees[k:k + batch] for k in range(0, len(trees) - batch + 1, batch)]
    params = make_params(hidden, vocab)
    runs = {t: recir_frontier(params, mode, t) for t in sorted({1, threads})}
    policies = ways()
    found: dict[tuple[str, int], list[float]] = {(w, t): [] for w in WAYS for t in runs}
    try:
        for way in WAYS:  # each way's first calls: its arrays and plans made
            set_way(policies, way)
            for run in runs.values():
                for trees_ in batches * 2:
                    run(trees_)
        for _ in range(rounds):
            for way in WAYS:
                set_way(policies, way)
                for t, run in runs.items():
                    run(batches[0])  # the team's workers awake, as in back-to-back calls
                    start = time.perf_counter()
                    for trees_ in batches:
                        run(trees_)
                    found[(way, t)].append((time.perf_counter() - start) / len(batches))
    finally:
        set_way(policies, "native")
    return found


def report(found: dict[tuple[str, int], list[float]]) -> str:
    counts = sorted({t for _, t in found})
    lines = [f"{'way':8s}" + "".join(f"{f'{t}t us':>10s}{f'{t}t / python':>14s}"
                                    for t in counts)]
    for way in WAYS:
        row = f"{way:8s}"
        for t in counts:
            ratio = statistics.median(a / b for a, b in zip(
                found[(way, t)], found[("python", t)], strict=True))
            row += f"{1e6 * statistics.median(found[(way, t)]):10.0f}{ratio:14.3f}"
        lines.append(row)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--workload", default="sst")
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2, help="N, timed beside 1")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    found = measure(args.mode, args.workload, args.hidden, args.batch, args.threads,
                    args.rounds)
    print(f"{args.workload} b{args.batch} h={args.hidden} {args.mode}, a batch's median "
          f"time, {args.rounds} rounds")
    print(report(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
