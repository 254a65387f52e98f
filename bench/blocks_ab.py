"""A team's heights in pieces, in evenly split blocks and whole, in one process.

A team's height loop cuts each height wider than a block into blocks
(`native_schedule.block_rows`: each thread's rows' temporaries within its
L2), each thread taking at each block a piece of its own block of the
whole height (`passes/height_shares.py`), so that its children are its
own rows (a complete tree's children of rows [a, b) are rows [2a, 2b) of
the height below). Before, each block was split evenly between the
threads, and half of a thread's children were the other core's rows.
Whole heights split evenly keep a thread's children its own, without the
L2 blocking. This times the three on N threads beside one thread, in
alternating chunks of calls (`native_scaling.timed`), each call's policy
made in Python (`NativeSchedule.choose`, the reference, which the form
sets), the cores' round trip (`core_latency`: two L3s read hundreds of
ns) before and after:

    .venv/bin/python -m bench.blocks_ab --mode train --hidden 256 --workload complete-128
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.batching import make_params, recir_frontier, workload
from bench.common import cell_parser
from bench.core_latency import describe, round_trips
from bench.native_scaling import CHUNK, timed, timed_loops
from recir.backend import native_schedule

FORMS = ("1 thread", "pieces", "even", "whole")


def layouts() -> dict[str, tuple[Callable, Callable]]:
    """Each form's (`block_rows`, `in_blocks`)."""
    blocks, cut = native_schedule.block_rows, native_schedule.in_blocks

    def whole(team: int, per_row: int) -> int:  # a team's heights never cut
        return 1 << 40 if team > 1 else blocks(team, per_row)

    def even(bounds: Any, rows: int) -> tuple[Any, None]:  # no pieces: blocks split evenly
        return cut(bounds, rows)[0], None

    return {"1 thread": (blocks, cut), "pieces": (blocks, cut), "even": (blocks, even),
            "whole": (whole, cut)}


def measure(mode: str, hidden: int, name: str, batch: int, threads: int, calls: int
            ) -> dict[str, Any]:
    trees, vocab, _ = workload(name, batch)
    params, batch_trees = make_params(hidden, vocab), trees[:batch]
    spent = [0.0]
    undo = timed_loops(spent)
    chosen = layouts()
    policy = native_schedule.NativeSchedule.policy
    native_schedule.NativeSchedule.policy = lambda self, *args: (None, None)  # type: ignore

    def laid_out(form: str, run: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def call(trees: Any) -> Any:  # `choose` reads both at every call
            native_schedule.block_rows, native_schedule.in_blocks = chosen[form]
            return run(trees)
        return call

    try:
        forms = {}
        for form, count in zip(FORMS, (1, threads, threads, threads), strict=True):
            forms[form] = laid_out(form, recir_frontier(params, mode, count))
            for _ in range(CHUNK):
                forms[form](batch_trees)
        return timed(forms, [batch_trees], calls, 1.0, spent)  # every call on the one batch
    finally:
        native_schedule.block_rows, native_schedule.in_blocks = chosen["pieces"]
        native_schedule.NativeSchedule.policy = policy  # type: ignore[method-assign]
        undo()


def main() -> int:
    parser = cell_parser(__doc__, mode="train", hidden=256, workload="complete-128")
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
    for form in ("even", "whole"):
        print(f"{form} over pieces (wall, below 1: faster): "
              f"{medians[form]['wall'] / medians['pieces']['wall']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
