"""What a frontier batch's heights cost, and what a team pays for them by groups.

Each batch of SST dev (25 trees) runs through the frontier TreeLSTM's
inference on one thread and on N in turn, timing the native height loops
only (`native_scaling.timed_loops`, the median of a few calls). Then a
least-squares fit over the one-thread batches:

    time = F x heights + C x (leaf rows + r x internal rows)

where r is an internal row's multiply-adds over a leaf row's, taken from
the weights' shapes. F is what a height costs whatever its rows, and C is a
leaf row's cost. Each batch's groups on N threads (each thread's rows at
each height) are then priced with the same costs. Each thread pays F at
every height where it has rows, so the model predicts the N-thread time.
That prediction is printed beside the time measured, and beside the
prediction of a team that paid each height's F once between its threads.

    .venv/bin/python -m bench.height_costs --trees 600 --hidden 150
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.batching import make_params, recir_frontier, workload
from bench.native_scaling import timed_loops
from recir.backend import native_schedule

Groups = list[list[int]]  # each thread's rows at each height


def fit(heights: Sequence[int], leaves: Sequence[int], internal: Sequence[int],
        seconds: Sequence[float], ratio: float) -> tuple[float, float, float]:
    """(F, C, rms): least squares of `seconds` ~ F heights + C (leaves +
    ratio internal)."""
    rows = np.asarray(leaves, float) + ratio * np.asarray(internal, float)
    design = np.stack([np.asarray(heights, float), rows], 1)
    (fixed, per_row), *_ = np.linalg.lstsq(design, np.asarray(seconds, float), rcond=None)
    rms = float(np.sqrt(np.mean((design @ [fixed, per_row] - seconds) ** 2)))
    return float(fixed), float(per_row), rms


def team_seconds(groups: Groups, fixed: float, per_row: float, ratio: float,
                 shared: bool = False) -> float:
    """A batch's time on a team by these groups (height 0: leaves): the
    slowest thread's, each paying `fixed` at each of its heights with rows;
    `shared`: a height's `fixed` paid once between the threads."""
    threads = len(groups)

    def cost(h: int, rows: int) -> float:
        return per_row * rows * (1.0 if h == 0 else ratio)

    if shared:
        return sum(fixed + sum(cost(h, g[h]) for g in groups) / threads
                   for h in range(len(groups[0])) if any(g[h] for g in groups))
    return max(sum(fixed + cost(h, rows) for h, rows in enumerate(g) if rows) for g in groups)


def measure(hidden: int, count: int, threads: int, calls: int) -> list[dict[str, Any]]:
    """Each batch's native seconds on 1 and `threads` threads and its
    groups on the team (None where the team did not run by groups)."""
    trees, vocab, _ = workload("sst", max(count, 25))
    spent, seen = [0.0], {}
    undo = timed_loops(spent)
    choose = native_schedule.NativeSchedule.choose

    def noted(self: Any, *args: Any) -> np.ndarray:
        bounds = choose(self, *args)
        groups = self.team_groups
        seen["groups"] = None if groups is None else np.diff(groups, axis=1).T.tolist()
        return bounds

    native_schedule.NativeSchedule.choose = noted  # type: ignore[method-assign]
    try:  # the loops are made at a function's first call, once its code is loaded
        forms = {t: recir_frontier(make_params(hidden, vocab), "infer", t) for t in (1, threads)}
        for run in forms.values():
            run(trees[:25])
        return [timed(forms, trees[start:start + 25], calls, spent, seen)
                for start in range(0, len(trees[:count]) - 24, 25)]
    finally:
        native_schedule.NativeSchedule.choose = choose  # type: ignore[method-assign]
        undo()


def timed(forms: dict[int, Any], batch: list[Any], calls: int, spent: list[float],
          seen: dict[str, Any]) -> dict[Any, Any]:
    """A batch's median native seconds on each thread count, and its groups."""
    times: dict[Any, Any] = {t: [] for t in forms}
    for _ in range(calls):  # the two in turn: a slow spell falls on both
        for t, run in forms.items():
            spent[0] = 0.0
            run(batch)
            times[t].append(spent[0])
    row = {t: statistics.median(v) for t, v in times.items()}
    row["groups"] = seen["groups"]
    return row


def report(found: list[dict[str, Any]], threads: int, ratio: float) -> str:
    grouped = [row for row in found if row["groups"] is not None]
    if not grouped:
        return "no batch ran by groups: nothing to price"
    rows = [np.sum(row["groups"], axis=0) for row in grouped]
    one = [row[1] for row in grouped]
    fixed, per_row, rms = fit([len(r) for r in rows], [int(r[0]) for r in rows],
                              [int(r[1:].sum()) for r in rows], one, ratio)
    many = sum(row[threads] for row in grouped)
    predicted = sum(team_seconds(row["groups"], fixed, per_row, ratio) for row in grouped)
    shared = sum(team_seconds(row["groups"], fixed, per_row, ratio, shared=True)
                 for row in grouped)
    each = sorted(row[1] / row[threads] for row in grouped)  # a slow spell: near 1
    apart = sorted(100 * (max(totals) / np.mean(totals) - 1) for totals in (
        np.sum(row["groups"], axis=1) for row in grouped))  # the team waits for the largest
    return (f"{len(grouped)} batches of 25 by groups on {threads} threads: a height "
            f"{fixed * 1e6:.1f} us, a leaf row {per_row * 1e6:.2f} us, an internal row "
            f"{per_row * ratio * 1e6:.2f} us (rms {rms * 1e6:.0f} of {np.mean(one) * 1e6:.0f} "
            f"us)\n{threads}t / 1t of the native loops: measured {sum(one) / many:.3f}, "
            f"predicted {sum(one) / predicted:.3f}; with each height's fixed cost paid "
            f"once by the team {sum(one) / shared:.3f}\neach batch's measured: "
            f"{' '.join(f'{r:.2f}' for r in each)}\nthe largest group's rows over the "
            f"mean: median {statistics.median(apart):.1f}%, most {apart[-1]:.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--trees", type=int, default=600, help="SST dev trees, in 25s")
    parser.add_argument("--threads", type=int, default=2, help="N, priced against 1")
    parser.add_argument("--calls", type=int, default=15, help="timed calls a batch and form")
    args = parser.parse_args()
    params = make_params(args.hidden, 10)
    inner = params["u"].size + params["w_out"].size  # a row's multiply-adds
    ratio = inner / (params["w_leaf"].size + params["w_out"].size)
    print(report(measure(args.hidden, args.trees, args.threads, args.calls), args.threads,
                 ratio))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
