"""What a frontier height of one row costs beyond its row, and the weight it streams.

A caterpillar of H heights (an internal node over a leaf and the
caterpillar below, 2H - 1 nodes) and a tree of the same nodes as complete
as it gets (heap order, about log2(2H) heights) have the same leaves and
internal rows, so the frontier TreeLSTM's inference (one thread) does the
same multiply-adds on both: the difference over the caterpillar's extra
heights is what a height costs beyond its rows. Beside it, the node
weight's bytes (5h x 2h f32) over that cost: a height of few rows streams
the whole weight through the core's L1 for them, so its products run at
that stream's rate, not the core's FMA rate. A team by groups
(`backend/height_groups.py`) pays it on every thread at every height its
trees reach (`bench/team_groups.py`: the groups' sum over the whole batch).

    python -m bench.thin_heights [--hidden 150 256] [--heights 64] [--repeats 15]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import fmt, machine_info, median, print_table, rounds_times, run_script, write_json

VOCAB = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--hidden", type=int, nargs="+", default=[150, 256])
    parser.add_argument("--heights", type=int, default=64, help="the caterpillar's heights")
    parser.add_argument("--repeats", type=int, default=15)


def caterpillar(heights: int) -> list[tuple[int, int]]:
    """(left, right) of each node, the root last: node 2j an internal node
    over node 2j - 2 (the caterpillar below) and the leaf 2j - 1."""
    children = [(-1, -1)]
    for j in range(1, heights):
        children += [(-1, -1), (2 * j - 2, 2 * j - 1)]
    return children


def heap_tree(nodes: int) -> list[tuple[int, int]]:
    """`nodes` nodes in heap order (node i over 2i + 1 and 2i + 2), the root first."""
    return [(2 * i + 1, 2 * i + 2) if 2 * i + 2 < nodes else (-1, -1) for i in range(nodes)]


def tree_heights(children: list[tuple[int, int]], root: int) -> int:
    """The heights a tree's frontier takes (a leaf's height is 0)."""
    order, height = [root], [0] * len(children)
    for node in order:  # breadth first: every node after its parent
        order += [c for c in children[node] if c >= 0]
    for node in reversed(order):
        left, right = children[node]
        if left >= 0:
            height[node] = 1 + max(height[left], height[right])
    return height[root] + 1


def inputs(children: list[tuple[int, int]], root: int) -> tuple[Any, ...]:
    left = np.array([c[0] for c in children], np.int32)
    right = np.array([c[1] for c in children], np.int32)
    word = np.arange(len(children), dtype=np.int32) % VOCAB
    return left, right, word, np.zeros(len(children), np.int32), root


def measure(hidden: int, heights: int, repeats: int) -> dict[str, float]:
    """Both trees' seconds a call (the median of the rounds) and a height's cost."""
    import recir
    from bench.batching import make_params
    from recir.models import tree_lstm

    function = recir.compile(tree_lstm.trace_model(make_params(hidden, VOCAB)),
                             batching="frontier", threads=1)
    long = caterpillar(heights)
    bushy = heap_tree(len(long))
    trees = {"caterpillar": [inputs(long, len(long) - 1)], "complete": [inputs(bushy, 0)]}
    times = rounds_times({name: lambda batch=batch: function.batch(batch)
                          for name, batch in trees.items()}, repeats)
    found = {name: median(times[name]) for name in trees}
    complete_heights = tree_heights(bushy, 0)
    extra = tree_heights(long, len(long) - 1) - complete_heights
    height_s = (found["caterpillar"] - found["complete"]) / extra
    weight_bytes = 5 * hidden * 2 * hidden * 4
    return {"hidden": hidden, "heights": heights, "complete_heights": complete_heights,
            "caterpillar_s": found["caterpillar"], "complete_s": found["complete"],
            "height_s": height_s, "weight_bytes": weight_bytes,
            "stream_gb_s": weight_bytes / height_s / 1e9 if height_s > 0 else None}


def run(args: argparse.Namespace) -> int:
    results = [measure(hidden, args.heights, args.repeats) for hidden in args.hidden]
    print_table(f"frontier TreeLSTM inference, one thread: a caterpillar of {args.heights} "
                "heights against a tree of its nodes as complete as it gets",
                ["h", "caterpillar us", "complete us", "heights", "a height us",
                 "weight KB", "weight GB/s"],
                [[str(r["hidden"]), fmt(r["caterpillar_s"] * 1e6, 0),
                  fmt(r["complete_s"] * 1e6, 0), f"{r['heights']} / {r['complete_heights']}",
                  fmt(r["height_s"] * 1e6, 1), fmt(r["weight_bytes"] / 1024, 0),
                  fmt(r["stream_gb_s"], 0)] for r in results])
    if args.json:
        write_json(args.json, {"machine": machine_info(), "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(__doc__, add_arguments, run))
