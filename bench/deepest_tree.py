"""How far a frontier batch can scale while each tree stays on one thread.

A team that runs a batch by groups of whole trees (`backend/height_groups.py`)
cannot end before its deepest tree does alone: each height of that tree is
a product of its few rows by the whole weight, one height after another,
on one thread. So the whole batch's native time on one thread over its
deepest tree's alone bounds the batch's speed-up on any number of threads,
before the cores' contention and the calling thread's Python. Per batch of
the workload (the batches `bench/run.py targets` scales), in rounds, the
native height loops timed as `native_scaling` times them:

    python -m bench.deepest_tree --mode infer [--hidden 150] [--workload sst]
        [--batch 25] [--rounds 5] [--calls 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.batching import keep_freed_memory, make_params, recir_frontier, workload
from bench.common import cell_parser
from bench.native_scaling import timed_loops
from bench.team_groups import native_time, node_heights


def deepest(trees: list[Any]) -> int:
    """The index of the tree with the most heights (of those, the most nodes)."""
    return max(range(len(trees)), key=lambda k: (int(node_heights(trees[k]).max()),
                                                 trees[k].num_nodes))


def measure(mode: str, hidden: int, name: str, batch: int, rounds: int, calls: int
            ) -> list[dict[str, Any]]:
    """Per batch: the whole batch's and its deepest tree's native seconds a
    call on one thread (medians over rounds, the two in turn), and that
    tree's heights and nodes."""
    trees, vocab, _ = workload(name, batch)
    batches = [trees[k:k + batch] for k in range(0, len(trees) - batch + 1, batch)]
    params = make_params(hidden, vocab)
    spent = [0.0]
    undo = timed_loops(spent, time.perf_counter)
    try:
        whole, alone = recir_frontier(params, mode, 1), recir_frontier(params, mode, 1)
        found = []
        for trees in batches:
            tree = trees[deepest(trees)]
            times: dict[str, list[float]] = {"whole": [], "deepest": []}
            for _ in range(rounds):
                times["whole"].append(native_time(spent, whole, trees, calls))
                times["deepest"].append(native_time(spent, alone, [tree], calls))
            found.append({key: statistics.median(v) for key, v in times.items()} | {
                "heights": int(node_heights(tree).max()), "nodes": tree.num_nodes})
    finally:
        undo()
    return found


def report(found: list[dict[str, Any]], args: argparse.Namespace) -> str:
    bounds = [f["whole"] / f["deepest"] for f in found]
    lines = [f"{args.mode} h={args.hidden} {args.workload} b{args.batch}, native us a call "
             "on 1 thread: the whole batch, its deepest tree alone (heights, nodes), "
             "whole / deepest"]
    lines += [f"  batch {k}: {1e6 * f['whole']:.0f}, {1e6 * f['deepest']:.0f} "
              f"({f['heights']}, {f['nodes']}), {b:.2f}"
              for k, (f, b) in enumerate(zip(found, bounds, strict=True))]
    lines.append(f"  the speed-up by groups of whole trees is bounded at {min(bounds):.2f}-"
                 f"{max(bounds):.2f} (median {statistics.median(bounds):.2f}) on any "
                 "number of threads")
    return "\n".join(lines)


def main() -> int:
    parser = cell_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="timed calls a turn")
    args = parser.parse_args()
    keep_freed_memory()  # (as `targets`' cells)
    print(report(measure(args.mode, args.hidden, args.workload, args.batch, args.rounds,
                         args.calls), args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
