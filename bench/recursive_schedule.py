"""What a recursive batch's task schedule allows on N threads, tasks free.

A team's batch (`NativeFunction.batch`) spawns each call (a tree) as a task,
the largest first (`policy.spawn_order`), and each call spawns its two
children as tasks while its budget lasts (`policy.batch_budget`,
`passes/invoke_clone_serial.py`), waits for them, then computes its node;
below the budget a call runs its subtree alone. This replays that schedule
for the workload's batches with every node costing one unit and tasks
costing nothing: N workers take ready tasks oldest first (libgomp's team
queue), a node whose children are done goes to the front. It prints each
batch's efficiency (the work over N, over the schedule's length) at the
policy's budget and at others:

    .venv/bin/python -m bench.recursive_schedule --threads 16

On 16 threads a measured scaling far below 16 x this efficiency is lost to
the machine and the runtime (tasks' costs, memory), not to the schedule.
"""

from __future__ import annotations

import argparse
import heapq
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.batching import workload
from recir.backend import policy


def subtree_sizes(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Each node's subtree's node count (post-order: children come first)."""
    sizes = np.ones(len(left), np.int64)
    for v in np.flatnonzero(left >= 0).tolist():
        sizes[v] += sizes[left[v]] + sizes[right[v]]
    return sizes


def schedule_length(trees: Sequence[Any], budget: int, threads: int) -> int:
    """The time, in node units, to run every tree of `trees` as tasks of a
    team of `threads` spawning `budget` levels down."""
    sizes = [subtree_sizes(t.left, t.right) for t in trees]
    ready: deque[tuple[int, int, int]] = deque(  # (tree, node, budget left); -1: its node
        (k, trees[k].root, budget) for k in policy.spawn_order(
            [t.num_nodes for t in trees], len(trees)))
    waiting: dict[tuple[int, int], int] = {}  # children not done, by node
    parent: dict[tuple[int, int], tuple[int, int]] = {}
    running: list[tuple[int, int, int, int]] = []  # (end, order, tree, node)
    now, order, idle = 0, 0, threads
    while ready or running:
        while idle and ready:
            k, v, left = ready.popleft()
            tree = trees[k]
            if left > 0 and tree.left[v] >= 0:  # spawns its children and waits
                for child in (int(tree.left[v]), int(tree.right[v])):
                    parent[(k, child)] = (k, v)
                    ready.append((k, child, left - 1))
                waiting[(k, v)] = 2
                continue
            cost = 1 if left < 0 else int(sizes[k][v])
            order += 1
            heapq.heappush(running, (now + cost, order, k, v))
            idle -= 1
        now, _, k, v = heapq.heappop(running)
        idle += 1
        up = parent.get((k, v))
        if up is not None:
            waiting[up] -= 1
            if not waiting[up]:
                ready.appendleft((*up, -1))
    return now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--workload", default="sst")
    parser.add_argument("--budgets", type=int, nargs="+", default=[0, 2, 4, 6, 8])
    parser.add_argument("--node-work", type=int, default=300_778,
                        help="a call's work a node (`NativeFunction.call_work`; the default: "
                        "the h=150 TreeLSTM's), which the policy's budget reads")
    args = parser.parse_args()
    trees, _, desc = workload(args.workload, 25)
    costs = policy.costs()
    for start in range(0, len(trees) - 24, 25):
        batch = trees[start:start + 25]
        works = [t.num_nodes * args.node_work for t in batch]
        chosen = policy.batch_budget(works, len(batch), args.threads, costs)
        ideal = sum(t.num_nodes for t in batch) / args.threads
        found = {b: ideal / schedule_length(batch, b, args.threads)
                 for b in sorted({chosen, *args.budgets})}
        print(f"{desc} batch {start // 25} on {args.threads} threads, the policy's budget "
              f"{chosen}: efficiency " + ", ".join(
                  f"{'*' if b == chosen else ''}{b} levels {e:.2f}" for b, e in found.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
