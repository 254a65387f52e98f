"""A team's heights in L2 blocks against whole, in one process, by the cores' L3 state.

A team's height loop cuts each height wider than a block into blocks
(`native_schedule.block_rows`: each thread's rows' temporaries within its
L2), each thread taking at each block a piece of its own block of the
whole height (`schedule_loops`), so that its children are its own rows (a
complete tree's children of rows [a, b) are rows [2a, 2b) of the height
below). Whole heights split evenly keep that too, without the L2 blocking.
This times both on N threads beside one thread, in alternating chunks of
calls (`native_scaling.timed`), the cores' round trip (`core_latency`:
two L3s read hundreds of ns) before and after:

    .venv/bin/python -m bench.blocks_ab --mode train --hidden 256 --workload complete-128
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.batching import make_params, recir_frontier, workload
from bench.core_latency import describe, round_trips
from bench.native_scaling import CHUNK, timed, timed_loops
from recir.backend import native_schedule

FORMS = ("1 thread", "blocks", "whole")


def measure(mode: str, hidden: int, name: str, batch: int, threads: int, calls: int
            ) -> dict[str, Any]:
    trees, vocab, _ = workload(name, batch)
    params, batch_trees = make_params(hidden, vocab), trees[:batch]
    spent = [0.0]
    undo = timed_loops(spent)
    blocks = native_schedule.block_rows

    def whole(team: int, per_row: int) -> int:  # a team's heights never cut
        return 1 << 40 if team > 1 else blocks(team, per_row)

    try:
        forms = {}
        for form, count in zip(FORMS, (1, threads, threads), strict=True):
            if form == "whole":  # read when the loop's first call lays it out
                native_schedule.block_rows = whole  # type: ignore[assignment]
            forms[form] = recir_frontier(params, mode, count)
            for _ in range(CHUNK):
                forms[form](batch_trees)
            native_schedule.block_rows = blocks  # type: ignore[assignment]
        return timed(forms, batch_trees, calls, 1.0, spent)
    finally:
        native_schedule.block_rows = blocks  # type: ignore[assignment]
        undo()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default="train")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--workload", default="complete-128")
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=96, help="timed calls per form")
    args = parser.parse_args()
    before = describe(round_trips())
    found = measure(args.mode, args.hidden, args.workload, args.batch, args.threads, args.calls)
    medians = found["medians"]
    one = medians["1 thread"]["wall"]
    print(f"{args.mode} h={args.hidden} {args.workload} b{args.batch}, {args.threads} threads; "
          f"round trip {before} before, {describe(round_trips())} after")
    for form, m in medians.items():
        print(f"{form}: wall {m['wall'] * 1e6:.0f} us" + (
            "" if form == "1 thread" else f", {args.threads}t/1t {one / m['wall']:.3f}"))
    print(f"whole over blocks (wall, below 1: faster): "
          f"{medians['whole']['wall'] / medians['blocks']['wall']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
