"""Where a frontier team loses against its groups of trees, in native time.

A team that runs a batch by groups (`backend/height_groups.py`) gives each
thread all the heights of its own trees, with no barrier between them, so
its call could take as long as its slowest group takes alone on one thread.
Four timings of the native height loops (`native_scaling.timed_loops`)
show what it costs beyond that:

- each group's trees on one thread alone, and beside them the whole batch
  on one thread (the groups' sum over it: what smaller products cost);
- the groups at once, each in a process of its own: per round, the
  slowest over the slowest alone (what busy cores cost each other through
  the host's shared caches and memory, and, on a VM, a core the host runs
  slower while both are busy: a team with even shares waits for it);
- the groups at once, each on a thread of this process, by each thread's
  CPU time (a wait for the GIL between native calls takes none): the same
  for threads that share an address space, the slowest over the slowest
  alone;
- the team on the whole batch, against its slowest group alone, beside the
  cores' cache-line round trip before and after (`core_latency`: on a VM
  whose cores the host moves between L3s, a team pays several times as much
  for each line in one state as in the other).

    python -m bench.team_groups --mode train [--hidden 150] [--workload sst]
        [--batch 25] [--threads 2] [--rounds 10] [--calls 10]

The groups are the team's (`policy.balanced_groups` over the trees' nodes,
as the height-order kernel makes them). Beside each group's nodes the
report gives its heights and row tiles: a height's rows in the nt dot
tile's rows of A (`gemm_target.Target.nt_tile`), rounded up, summed over
the heights above the leaves. With four groups or more it fits each
group's time alone to a fixed part plus a cost a tile and a cost a node
(least squares): where a thread's heights are thin (many threads, few
trees each), whether a height of one row costs what one of a tile does.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from typing import Any

import numpy as np

from bench import core_latency
from bench.batching import keep_freed_memory, make_params, recir_frontier, workload
from bench.common import cell_parser
from bench.native_scaling import timed_loops
from recir.backend.policy import balanced_groups
from recir.passes.gemm_target import host_target


def cell(mode: str, hidden: int, name: str, batch: int, threads: int
         ) -> tuple[list[Any], list[list[Any]], dict[str, Any]]:
    """The batch, its groups for a team of `threads` and the model's weights."""
    trees, vocab, _ = workload(name, batch)
    trees = trees[:batch]
    found = balanced_groups([t.num_nodes for t in trees], threads)
    groups = [[t for t, g in zip(trees, found, strict=True) if g == k] for k in range(threads)]
    return trees, groups, make_params(hidden, vocab)


def node_heights(tree: Any) -> np.ndarray:
    """Each node's height (a leaf's 0), a pass a level."""
    inner = np.flatnonzero(tree.left >= 0)
    heights = np.zeros(tree.num_nodes, np.int64)
    for _ in range(tree.num_nodes):
        raised = 1 + np.maximum(heights[tree.left[inner]], heights[tree.right[inner]])
        if np.array_equal(raised, heights[inner]):
            break
        heights[inner] = raised
    return heights


def row_tiles(trees: list[Any], tile: int) -> tuple[int, int]:
    """A group's (heights, row tiles): its rows of each height above the
    leaves in tiles of `tile` rows, rounded up."""
    if not trees:
        return 0, 0
    rows = np.bincount(np.concatenate([node_heights(t) for t in trees]))
    return len(rows) - 1, int(sum(-(-r // tile) for r in rows[1:]))


def cost_fit(seconds: list[float], tiles: list[int], nodes: list[int]
             ) -> tuple[float, float, float, float]:
    """(fixed, a tile, a node, the worst residual) in seconds: least squares
    of each group's time alone."""
    design = np.stack([np.ones(len(tiles)), np.asarray(tiles, float),
                       np.asarray(nodes, float)], 1)
    coefficients, *_ = np.linalg.lstsq(design, np.asarray(seconds), rcond=None)
    worst = float(np.abs(design @ coefficients - seconds).max())
    fixed, tile, node = map(float, coefficients)
    return fixed, tile, node, worst


def native_time(spent: Any, run: Any, trees: list[Any], calls: int) -> float:
    """Native seconds a call of `run` on `trees`, after two untimed calls."""
    for _ in range(2):
        run(trees)
    spent[0] = 0.0
    for _ in range(calls):
        run(trees)
    return spent[0] / calls


class PerThread:
    """`timed_loops`' `spent[0]` and clock, each thread's own: wall seconds,
    or CPU seconds on a thread that says so (`threads_at_once`)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def __getitem__(self, _: int) -> float:
        return getattr(self.local, "seconds", 0.0)

    def __setitem__(self, _: int, seconds: float) -> None:
        self.local.seconds = seconds

    def clock(self) -> float:
        return time.thread_time() if getattr(self.local, "cpu", False) else time.perf_counter()


def in_one_process(mode: str, hidden: int, name: str, batch: int, threads: int,
                   rounds: int, calls: int) -> dict[str, Any]:
    """Medians over rounds of the whole batch and each group on one thread
    and of the team on the batch, native seconds a call; and of the groups
    at once on threads of this process, the slowest thread's native CPU
    seconds a call over the slowest group's alone."""
    trees, groups, params = cell(mode, hidden, name, batch, threads)
    tile = host_target().nt_tile[0]  # rows of A in nt's dot tile
    spent = PerThread()
    undo = timed_loops(spent, spent.clock)
    try:
        whole, team = recir_frontier(params, mode, 1), recir_frontier(params, mode, threads)
        alone = [recir_frontier(params, mode, 1) for _ in groups]  # each keeps its plans
        runs = list(zip(alone, groups, strict=True))
        found: dict[str, list[Any]] = {"whole": [], "groups": [], "team": [], "threads": []}
        for _ in range(rounds):
            found["whole"].append(native_time(spent, whole, trees, calls))
            found["groups"].append([native_time(spent, run, group, calls)
                                    for run, group in runs])
            found["team"].append(native_time(spent, team, trees, calls))
            each = [threads_at_once(spent, [run], calls)[0] for run in runs]
            found["threads"].append(max(threads_at_once(spent, runs, calls)) / max(each))
    finally:
        undo()
    return {"whole": statistics.median(found["whole"]),
            "groups": [statistics.median(g) for g in zip(*found["groups"], strict=True)],
            "team": statistics.median(found["team"]),
            "threads": statistics.median(found["threads"]),
            "nodes": [sum(t.num_nodes for t in g) for g in groups],
            "tiles": [row_tiles(g, tile) for g in groups]}


def threads_at_once(cpu: PerThread, runs: list[tuple[Any, list[Any]]], calls: int
                    ) -> list[float]:
    """Each (run, trees)'s native CPU seconds a call, all at once, a thread
    each; a thread's error raised here once all have ended."""
    found: list[Any] = [None] * len(runs)

    def each(k: int) -> None:
        cpu.local.cpu = True
        try:
            found[k] = native_time(cpu, *runs[k], calls)
        except Exception as e:  # (raised in the calling thread below)
            found[k] = e

    workers = [threading.Thread(target=each, args=(k,)) for k in range(len(runs))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for value in found:
        if isinstance(value, Exception):
            raise value
    return found


def group_process(k: int, cell_args: tuple, rounds: int, calls: int, barrier: Any,
                  results: Any) -> None:
    """Group `k` on one thread, round by round: alone (each process in turn
    while the others wait), then all at once."""
    keep_freed_memory()
    mode, hidden, name, batch, threads = cell_args
    _, groups, params = cell(*cell_args)
    spent = [0.0]
    timed_loops(spent)
    run = recir_frontier(params, mode, 1)
    run(groups[k])  # compiled (from the cache) and loaded
    for _ in range(rounds):
        for turn in range(threads):
            barrier.wait()
            if turn == k:
                results.put((k, "alone", native_time(spent, run, groups[k], calls)))
        barrier.wait()
        results.put((k, "together", native_time(spent, run, groups[k], calls)))


def in_processes(mode: str, hidden: int, name: str, batch: int, threads: int, rounds: int,
                 calls: int) -> float:
    """The median, over rounds, of the slowest group's native time at once
    with the others over the slowest's alone, a process each (spawned: a
    fork would copy this process's OpenMP runtime mid-flight)."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(threads), context.Queue()
    cell_args = (mode, hidden, name, batch, threads)
    children = [context.Process(target=group_process, args=(
        k, cell_args, rounds, calls, barrier, results)) for k in range(threads)]
    for child in children:
        child.start()
    found: dict[tuple[int, str], list[float]] = {}
    for _ in range(2 * threads * rounds):
        k, kind, seconds = results.get(timeout=600)
        found.setdefault((k, kind), []).append(seconds)
    for child in children:
        child.join()
    return statistics.median(
        max(found[k, "together"][r] for k in range(threads))
        / max(found[k, "alone"][r] for k in range(threads)) for r in range(rounds))


def report(found: dict[str, Any], together: float | None, args: argparse.Namespace
           ) -> str:
    us = [f"{1e6 * g:.0f}" for g in found["groups"]]
    slowest = max(found["groups"])
    lines = [f"{args.mode} h={args.hidden} {args.workload} b{args.batch}, {args.threads} "
             f"groups ({' / '.join(map(str, found['nodes']))} nodes), native us a call:",
             f"  whole batch, 1 thread: {1e6 * found['whole']:.0f}",
             f"  each group alone, 1 thread: {', '.join(us)} (their sum over the whole "
             f"batch {sum(found['groups']) / found['whole']:.3f})"]
    lines.append("  each group's heights / row tiles: " + ", ".join(
        f"{h}/{n}" for h, n in found["tiles"]))
    held = [(s, n, k) for s, (_, n), k in zip(found["groups"], found["tiles"], found["nodes"],
                                              strict=True) if k]  # groups with trees
    if len(held) >= 4:
        fixed, tile, node, worst = cost_fit(*map(list, zip(*held, strict=True)))
        lines.append(f"  a group alone ~ {1e6 * fixed:.0f} + {1e6 * tile:.1f} a row tile + "
                     f"{1e6 * node:.2f} a node (worst residual {1e6 * worst:.0f})")
    if together is not None:
        lines.append(f"  the groups at once, a process each: the slowest over the slowest "
                     f"alone {together:.3f}")
    lines.append(f"  the groups at once, a thread each of this process (CPU time): the "
                 f"slowest over the slowest alone {found['threads']:.3f}")
    lines.append(f"  the team of {args.threads} on the batch: {1e6 * found['team']:.0f} "
                 f"(over the slowest group alone {found['team'] / slowest:.3f}; the whole "
                 f"batch on 1 thread over it {found['whole'] / found['team']:.3f})")
    return "\n".join(lines)


def main() -> int:
    parser = cell_parser(__doc__, mode="train")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10, help="timed calls a turn")
    parser.add_argument("--no-processes", action="store_true",
                        help="leave out the groups at once in processes of their own")
    args = parser.parse_args()
    keep_freed_memory()  # (as `targets`' cells)
    cell_args = (args.mode, args.hidden, args.workload, args.batch, args.threads)
    before = core_latency.round_trips()
    found = in_one_process(*cell_args, args.rounds, args.calls)
    trips = [core_latency.describe(t) for t in (before, core_latency.round_trips())]
    together = None if args.no_processes else in_processes(*cell_args, args.rounds,
                                                           args.calls)
    print(report(found, together, args))
    print(f"  the cores' round trip {trips[0]} before the team's rounds, {trips[1]} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
