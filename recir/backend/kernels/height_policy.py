"""A height loop's policy, in the native call that numbers its rows.

After the height order (`height_order.py`) a native schedule chose, in
Python, how its height loop runs (`NativeSchedule.post`): the heights'
bounds (`renumber`: the starts of the heights used, by groups every
T-th key's), then by groups of trees (`height_groups`, where the team
pays: `HeightLoop.team_size` with the largest group's rows) or by rows:
a wide height cut into blocks (`in_blocks`), the team over the first
heights with a register tile of rows a thread where it pays
(`team_size`), and the most rows one call takes (`most_rows`). Those
functions stay the reference; `recir_height_policy(plan)` computes the
same from the order's plan, after the order and in its call
(`kernels/numbering`), so that the next call finds its choices made.

Plan, 8-byte fields: the order's plan, its team T (0: not by groups),
whether groups may be used (`BY_GROUPS`), the depths (written by the
numbering call: groups only for more than one), the loop's team size
(1 where no team can run), the register tile's rows, a block's rows, the
multiply-adds of a row (for the loop and its `_bwd`), the loops weighed,
then f64: the cost of a multiply-add (`unit_s`), the share a moved row
saves, a team's start, a warm barrier, the cost of adding the threads'
copies; then the tables: the first bounds and the bounds (i64[rows or
heights + 2]) and the group table (i64[heights][T + 1], written where
`renumber` makes it: by groups the order found, `BY_GROUPS`, more than
one depth); then, written, the heights, the team's threads, the heights
it splits, the most rows of a call, whether it runs by groups and whether
the group table was written; then the pieces table (i64[bounds][4],
written by rows: each bound's height's first row and rows, and which of
how many blocks of it the bound starts), by which each thread of a team
takes its block of a height cut into blocks (`schedule_loops`).
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, f64, i64
from xdsl.ir import SSAValue

from recir.backend.array_address import data_address
from recir.backend.kernels import height_order as order
from recir.backend.schedule_specs import copied_elements
from recir.backend.teams import thread_limit
from recir.passes.llvm_functions import ceil_div, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter

ENTRY = "recir_height_policy"
(ORDER_PLAN, TEAM, BY_GROUPS, DEPTHS, THREADS, TILE, BLOCK, WORK, LOOPS, UNIT, SHARE,
 TEAM_S, WARM_S, SUMMED, FIRST, BOUNDS, GROUPS) = range(17)
HEIGHTS, TEAM_THREADS, SPLIT, MOST, GROUPED, TABLED = range(17, 23)  # written
PIECES = 23  # the pieces table
FIELDS = 24


def height_policy_module() -> ModuleOp:
    function, b, (plan,) = new_function(ENTRY, [PTR], private=False)
    order_plan, team = b.load(plan, ORDER_PLAN, PTR), b.load(plan, TEAM, i64)
    count = first_bounds(b, plan, order_plan, team)
    tallest = b.sub(count, 1)
    tabled = all_of(b, b.compare("sge", team, 2),
                    b.compare("ne", b.load(order_plan, order.GROUPED, i64), 0),
                    b.compare("ne", b.load(plan, BY_GROUPS, i64), 0),
                    b.compare("sgt", b.load(plan, DEPTHS, i64), 1))
    b.store(b.value(arith.ExtUIOp(tabled, i64)), plan, TABLED)
    b.store(b.i64(0), plan, GROUPED)
    b.when(tabled, lambda e: group_table(e, plan, order_plan, e.load(
        order_plan, order.TALLEST, i64)))  # (by groups no height below it is empty)

    def weighed(e: Emitter) -> None:
        first = e.load(plan, FIRST, PTR)
        moved = e.sub(e.sub(e.load(first, tallest, i64), e.load(first, 0, i64)),
                      e.load(order_plan, order.LARGEST, i64))
        e.when(pays(e, plan, moved, e.i64(0)), lambda f: by_groups(f, plan, order_plan, count))

    b.when(all_of(b, tabled, b.compare("eq", b.load(plan, THREADS, i64), team),
                  b.compare("sge", tallest, 1)), weighed)
    b.when(b.compare("eq", b.load(plan, GROUPED, i64), 0), lambda e: by_rows(e, plan, count))
    b.op(llvm.ReturnOp())
    return ModuleOp([lower_to_llvm(function)])


def all_of(b: Emitter, *conditions: SSAValue) -> SSAValue:
    """Whether every condition (i1) holds."""
    found = conditions[0]
    for condition in conditions[1:]:
        found = b.value(arith.AndIOp(found, condition))
    return found


def first_bounds(b: Emitter, plan: SSAValue, order_plan: SSAValue, team: SSAValue
                 ) -> SSAValue:
    """The first bounds (`renumber`'s): the starts of the heights used, or by
    groups every T-th start up to the tallest height's end; a start equal to
    the one before it (a height with no rows) left out, as `np.unique`
    leaves it. Returns their count."""
    grouped = b.compare("sge", team, 2)
    n = b.value(arith.SelectOp(grouped, b.load(order_plan, order.TALLEST, i64),
                               b.load(order_plan, order.USED, i64)))
    stride = b.value(arith.SelectOp(grouped, team, b.i64(1)))
    starts, first = b.load(order_plan, order.STARTS, PTR), b.load(plan, FIRST, PTR)

    def bound(e: Emitter, h: SSAValue, carried: Any) -> list[SSAValue]:
        count, last = carried
        start = e.load(starts, e.mul(h, stride), i64)
        new = e.value(arith.OrIOp(e.compare("eq", h, 0), e.compare("ne", start, last)))
        e.store(start, first, count)
        return [e.add(count, e.value(arith.ExtUIOp(new, i64))), start]

    return b.loop(b.add(n, 1), bound, [b.i64(0), b.i64(-1)])[0]


def pays(b: Emitter, plan: SSAValue, moved: SSAValue, barriers: SSAValue) -> SSAValue:
    """Whether the rows moved off the calling thread save more than the team
    costs (`HeightLoop.team_size`, its float operations in its order)."""
    def real(value: SSAValue) -> SSAValue:
        return b.value(arith.SIToFPOp(value, f64))

    def cost(field: int) -> SSAValue:
        return b.load(plan, field, f64)

    saved = b.value(arith.MulfOp(b.value(arith.MulfOp(real(b.mul(moved, b.load(
        plan, WORK, i64))), cost(UNIT))), cost(SHARE)))
    start = b.value(arith.MulfOp(real(b.load(plan, LOOPS, i64)), b.value(arith.AddfOp(
        cost(TEAM_S), b.value(arith.MulfOp(real(barriers), cost(WARM_S)))))))
    return b.value(arith.CmpfOp(saved, b.value(arith.AddfOp(start, cost(SUMMED))), "ogt"))


def group_table(b: Emitter, plan: SSAValue, order_plan: SSAValue, heights: SSAValue) -> None:
    """Each thread's rows of each height (`height_groups.group_table`): row
    h, its T groups' starts and then the next height's first."""
    team, starts = b.load(plan, TEAM, i64), b.load(order_plan, order.STARTS, PTR)
    groups, width = b.load(plan, GROUPS, PTR), b.add(team, 1)
    b.each(heights, lambda e, h: e.each(width, lambda f, g: f.store(
        f.load(starts, f.add(f.mul(h, team), g), i64), groups, f.add(f.mul(h, width), g))))


def by_groups(b: Emitter, plan: SSAValue, order_plan: SSAValue, count: SSAValue) -> None:
    """The team on every height, each thread its group's rows."""
    heights = b.sub(count, 1)
    first, bounds = b.load(plan, FIRST, PTR), b.load(plan, BOUNDS, PTR)
    b.each(count, lambda e, h: e.store(e.load(first, h, i64), bounds, h))
    most = b.value(arith.MaxSIOp(b.load(order_plan, order.MOST, i64), b.i64(1)))
    for field, value in ((HEIGHTS, heights), (TEAM_THREADS, b.load(plan, TEAM, i64)),
                         (SPLIT, heights), (MOST, most), (GROUPED, b.i64(1))):
        b.store(value, plan, field)


def by_rows(b: Emitter, plan: SSAValue, count: SSAValue) -> None:
    """The bounds in blocks (`in_blocks`), the team over the first wide
    heights where it pays (`team_size`) and the most rows (`most_rows`)."""
    first, bounds = b.load(plan, FIRST, PTR), b.load(plan, BOUNDS, PTR)
    block, table = b.load(plan, BLOCK, i64), b.load(plan, PIECES, PTR)

    def cut(e: Emitter, h: SSAValue, carried: Any) -> list[SSAValue]:
        lo = e.load(first, h, i64)
        n = e.sub(e.load(first, e.add(h, 1), i64), lo)
        whole = e.value(arith.ExtUIOp(e.compare("sgt", n, 0), i64))
        pieces = e.value(arith.SelectOp(e.compare("sgt", n, block), ceil_div(e, n, block),
                                        whole))

        def piece(f: Emitter, j: SSAValue, at: Any) -> list[SSAValue]:
            f.store(f.add(lo, f.value(arith.DivSIOp(f.mul(n, j), pieces))), bounds, at[0])
            record = f.offset(table, f.mul(at[0], 4), i64)
            for k, value in enumerate((lo, n, j, pieces)):
                f.store(value, record, k)
            return [f.add(at[0], 1)]

        return e.loop(pieces, piece, carried)

    made = b.loop(b.sub(count, 1), cut, [b.i64(0)])[0]
    b.store(b.load(first, b.sub(count, 1), i64), bounds, made)
    heights, threads = made, b.load(plan, THREADS, i64)
    wide_from = b.mul(threads, b.load(plan, TILE, i64))

    def rows(e: Emitter, h: SSAValue) -> SSAValue:
        return e.sub(e.load(bounds, e.add(h, 1), i64), e.load(bounds, h, i64))

    split = b.loop(heights, lambda e, h, c: [e.add(c[0], e.value(arith.ExtUIOp(
        e.compare("sge", rows(e, h), wide_from), i64)))], [b.i64(0)])[0]
    moved = b.loop(split, lambda e, h, c: [e.add(c[0], e.sub(rows(e, h), ceil_div(
        e, rows(e, h), threads)))], [b.i64(0)])[0]
    team = b.value(arith.AndIOp(b.value(arith.AndIOp(
        b.compare("sge", threads, 2), b.compare("sgt", split, 0))), pays(b, plan, moved, split)))
    b.store(b.value(arith.SelectOp(team, threads, b.i64(1))), plan, TEAM_THREADS)
    split = b.value(arith.SelectOp(team, split, b.i64(0)))
    b.store(split, plan, SPLIT)
    per = b.value(arith.SelectOp(team, threads, b.i64(1)))
    most = b.loop(heights, lambda e, h, c: [e.value(arith.MaxSIOp(c[0], e.value(
        arith.SelectOp(e.compare("slt", h, split), ceil_div(e, rows(e, h), per),
                       rows(e, h)))))], [b.i64(1)])[0]
    b.store(most, plan, MOST)
    b.store(heights, plan, HEIGHTS)


class Weights(NamedTuple):
    """What `HeightLoop.team_size` weighs, fixed per loop: its team size (1
    where none can run), a row's multiply-adds, the loops, the costs."""

    threads: int
    work: int
    loops: int
    unit_s: float
    share: float
    team_s: float
    warm_team_s: float
    summed: float


def weights_of(loop: Any, backward: Any = None) -> Weights:
    """A `HeightLoop`'s `Weights`, with the `_bwd` that splits as it does."""
    loops = [loop] if backward is None else [loop, backward]
    threads, costs = loop.threads, loop.spec.costs
    if threads < 2 or costs is None or thread_limit() < threads or any(
            other.threads != threads for other in loops):
        return Weights(1, 0, len(loops), 0.0, 0.0, 0.0, 0.0, 0.0)
    summed = sum(copied_elements(other.spec) for other in loops) * (
        threads - 1) / threads * costs.unit_s
    return Weights(threads, sum(other.spec.row_work for other in loops), len(loops),
                   costs.unit_s, costs.share, costs.team_s, costs.warm_team_s, summed)


class HeightPolicy:
    """A loop's plan over an order's kept plan (for at most `rows` rows of
    `levels` heights), with the tables it writes."""

    def __init__(self, order_plan: np.ndarray, rows: int, levels: int, team: int,
                 by_groups: bool, tile: int, block: int, weights: Weights,
                 folder: Path | None = None):
        size = max(rows, levels) + 2
        self.first, self.bounds = np.empty(size, np.int64), np.empty(size, np.int64)
        self.groups = np.empty(levels * (team + 1), np.int64)
        self.pieces = np.empty((size, 4), np.int64)
        self.team, self.order_plan = team, order_plan
        plan = self.plan = np.zeros(FIELDS, np.int64)
        plan[:UNIT] = (data_address(order_plan), team, by_groups, 0, weights.threads,
                       max(tile, 1), max(block, 1), weights.work, weights.loops)
        plan[UNIT:FIRST].view(np.float64)[:] = weights[3:]
        plan[FIRST:HEIGHTS] = list(map(data_address, (self.first, self.bounds, self.groups)))
        plan[PIECES] = data_address(self.pieces)
        self.address = height_policy_address(folder)

    def found(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """After a call: the loop's bounds, the group table where written
        (each height's row: its T groups' starts, then its end), and by rows
        each bound's piece (`native_schedule.in_blocks`)."""
        heights, tabled = int(self.plan[HEIGHTS]), self.plan[TABLED]
        tallest, width = int(self.order_plan[order.TALLEST]), self.team + 1
        grouped = bool(self.plan[GROUPED])
        return self.bounds[:heights + 1], (self.groups[:tallest * width].reshape(
            tallest, width) if tabled else None), (
            None if grouped else self.pieces[:heights])

    def choice(self) -> tuple[tuple[int, int], int, bool]:
        """After a call: the team (threads, heights split), the most rows of
        a call, and whether the team runs by groups."""
        threads, split, most, grouped = self.plan[TEAM_THREADS:TABLED].tolist()
        return (threads, split), most, bool(grouped)


@cache
def height_policy_kernel(folder: Path | None = None) -> Any:
    """`recir_height_policy(plan)` as a ctypes function; compiled on first
    use (an object cached on disk, in the calling function's `folder`, as
    the matrix kernels are)."""
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir

    compiled = cached_engine("height policy", ENTRY,
                             lambda: to_llvm_ir(height_policy_module()), cache_dir=folder)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.address(ENTRY))
    fn.engine = compiled  # the engine owns the code
    return fn


def height_policy_address(folder: Path | None = None) -> int:
    """The kernel's address (`kernels/numbering` calls it by pointer)."""
    return ctypes.cast(height_policy_kernel(folder), ctypes.c_void_p).value or 0
