"""The frontier's height order in one native call: sort, inverse and gathers.

A native schedule numbers its invocations by height (`NativeSchedule.renumber`):
a stable sort of the rows by height, each row's place in that order, each
row's children as places, and the stored values in that order. In NumPy that
is a dozen calls and as many temporaries a call, on rows the height loops
have just pushed out of the caches. `recir_height_order(plan)` does it in
passes over the rows: a counting sort (stable, as `argsort(kind="stable")`)
by height, or by height and group, then the inverse, the children (i32, -1
where none) and the stored rows.

By groups (`height_groups`; the plan's trees not 0), it first gives each
tree a group of the team's T, node counts balanced as
`policy.balanced_groups` gives them (the largest tree first, each to the
group with the fewest rows so far, the lowest on a tie; then
`group_swaps`), sorts the rows by
the key height x T + group, and then says whether the team should run by
them: every height up to the tallest has rows, and the largest group's
rows are fewer than a thread's when each height with a register tile of
rows per thread (`tile`) splits and the thinner ones run alone.

Its plan, 8-byte fields: rows n, keys K, heights (i64[n]; by groups,
where the keys go), starts (i64[K + 1]: each key's first place, then n),
order (i64[n]: written), inverse (i32[n + 1], -1 after the rows), sites S,
stored values V, status (written: 0; 1 where a height is not below K, 2
where a tree is not below the batch, and nothing else is written), the most
keys used and the empty keys below it (written); by groups, each row's tree
(i64[n], 0: not by groups), the batch, T, the tile, the heights by depth
(K / T), each row's height (i64[n]) and a scratch (i64[3 batch + T + n +
2]), then (written) whether to run by groups, the largest group's rows, the
most rows of a height's group, the heights with rows and whether a height
below the tallest has none; then S children tables (i64[n]) and S children
out (i32[n]), V stored tables, V stored out and V row sizes in bytes. The
caller sizes every table; no read or write leaves them.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Any

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i8, i32, i64
from xdsl.ir import SSAValue

from recir.backend.kernels.group_swaps import swap_passes
from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter

ENTRY = "recir_height_order"
HEADER = 23  # the plan's fields before the tables
ROWS, KEYS, HEIGHTS, STARTS, ORDER, INVERSE, SITES, STORED, STATUS, USED, EMPTY = range(11)
TREES, BATCH, TEAM, TILE, LEVELS, ROW_HEIGHTS, SCRATCH = range(11, 18)  # by groups
GROUPED, LARGEST, MOST, TALLEST, GAPS = range(18, HEADER)  # written by groups
OUT_OF_RANGE, TREE_OUT_OF_RANGE = 1, 2  # statuses


def height_order_module() -> ModuleOp:
    function, b, (plan,) = new_function(ENTRY, [PTR], private=False)
    n, keys = b.load(plan, ROWS, i64), b.load(plan, KEYS, i64)
    order, inverse = b.load(plan, ORDER, PTR), b.load(plan, INVERSE, PTR)
    b.store(b.i64(0), plan, STATUS)
    by_groups = b.compare("ne", b.load(plan, TREES, i64), 0)
    b.when(by_groups, lambda e: group_keys(e, plan, n))
    b.when(ok(b, plan), lambda e: counting_sort(e, plan, n, keys, order))
    b.when(b.value(arith.AndIOp(ok(b, plan), by_groups)), lambda e: decide(e, plan, n))
    b.when(ok(b, plan), lambda e: renumbered(e, plan, n, order, inverse))
    b.op(llvm.ReturnOp())
    return ModuleOp([lower_to_llvm(function)])


def ok(b: Emitter, plan: SSAValue) -> SSAValue:
    """Whether the status is still 0 (no input out of range so far)."""
    return b.compare("eq", b.load(plan, STATUS, i64), 0)


def scratch(b: Emitter, plan: SSAValue) -> list[SSAValue]:
    """The scratch's tables by groups: each tree's rows, the trees by
    decreasing rows, each tree's group (i64[batch] each), each group's rows
    (i64[T]) and each rank's first place (i64[n + 2])."""
    first, batch = b.load(plan, SCRATCH, PTR), b.load(plan, BATCH, i64)
    tables = [first, *(b.offset(first, b.mul(batch, k), i64) for k in range(1, 4))]
    return [*tables, b.offset(tables[3], b.load(plan, TEAM, i64), i64)]


def group_keys(b: Emitter, plan: SSAValue, n: SSAValue) -> None:
    """Each tree's rows (the scratch's first `batch`), the trees by
    decreasing rows (a counting sort on n - rows, stable: the lower tree
    first on a tie), each tree's group (the least rows so far, the lowest
    group on a tie) and each group's rows; then each row's key."""
    trees, team = b.load(plan, TREES, PTR), b.load(plan, TEAM, i64)
    batch, (sizes, ranked, group_of, loads, bucket) = b.load(plan, BATCH, i64), scratch(b, plan)
    b.each(batch, lambda e, t: e.store(e.i64(0), sizes, t))

    def count(e: Emitter, r: SSAValue) -> None:
        t = e.load(trees, r, i64)
        e.when(e.compare("ult", t, batch),
               lambda f: f.store(f.add(f.load(sizes, t, i64), 1), sizes, t),
               lambda f: f.store(f.i64(TREE_OUT_OF_RANGE), plan, STATUS))

    b.each(n, count)

    def ranks(e: Emitter) -> None:
        def rank(f: Emitter, t: SSAValue) -> SSAValue:
            return f.sub(n, f.load(sizes, t, i64))

        e.each(e.add(n, 2), lambda f, i: f.store(f.i64(0), bucket, i))
        e.each(batch, lambda f, t: f.store(f.add(f.load(bucket, f.add(rank(f, t), 1), i64), 1),
                                           bucket, f.add(rank(f, t), 1)))
        e.each(e.add(n, 1), lambda f, i: f.store(f.add(f.load(bucket, i, i64), f.load(
            bucket, f.add(i, 1), i64)), bucket, f.add(i, 1)))

        def place(f: Emitter, t: SSAValue) -> None:
            at = f.load(bucket, rank(f, t), i64)
            f.store(t, ranked, at)
            f.store(f.add(at, 1), bucket, rank(f, t))

        e.each(batch, place)
        e.each(team, lambda f, g: f.store(f.i64(0), loads, g))

        def assign(f: Emitter, j: SSAValue) -> None:
            t = f.load(ranked, j, i64)

            def least(g_: Emitter, g: SSAValue, carried: Any) -> list[SSAValue]:
                best, fewest = carried
                load = g_.load(loads, g, i64)
                fewer = g_.compare("slt", load, fewest)
                return [g_.value(arith.SelectOp(fewer, g, best)),
                        g_.value(arith.SelectOp(fewer, load, fewest))]

            best, _ = f.loop(team, least, [f.i64(0), f.i64(2**62)])
            f.store(best, group_of, t)
            f.store(f.add(f.load(loads, best, i64), f.load(sizes, t, i64)), loads, best)

        e.each(batch, assign)
        swap_passes(e, n, batch, team, sizes, group_of, loads)
        heights, keys = e.load(plan, ROW_HEIGHTS, PTR), e.load(plan, HEIGHTS, PTR)
        levels = e.load(plan, LEVELS, i64)

        def key(f: Emitter, r: SSAValue) -> None:
            h = f.load(heights, r, i64)  # below the levels: its key cannot wrap
            f.when(f.compare("ult", h, levels),
                   lambda g_: g_.store(g_.add(g_.mul(h, team), g_.load(
                       group_of, g_.load(trees, r, i64), i64)), keys, r),
                   lambda g_: g_.store(g_.i64(OUT_OF_RANGE), plan, STATUS))

        e.each(n, key)

    b.when(ok(b, plan), ranks)


def decide(b: Emitter, plan: SSAValue, n: SSAValue) -> None:
    """After the sort by (height, group): each height's rows from the
    starts, the rows a thread takes split (wide heights' over the team,
    the others' whole), and whether the largest group's are fewer."""
    team, tile = b.load(plan, TEAM, i64), b.load(plan, TILE, i64)
    starts, batch = b.load(plan, STARTS, PTR), b.load(plan, BATCH, i64)
    loads = scratch(b, plan)[3]
    wide_from = b.mul(team, tile)

    def height(e: Emitter, h: SSAValue, carried: Any) -> list[SSAValue]:
        wide, tallest, empties, gaps, most = carried
        first = e.mul(h, team)
        rows = e.sub(e.load(starts, e.add(first, team), i64), e.load(starts, first, i64))
        has = e.compare("sgt", rows, 0)
        wide = e.add(wide, e.value(arith.SelectOp(e.compare("sge", rows, wide_from), rows,
                                                  e.i64(0))))
        cells = e.loop(team, lambda f, g, c: [f.binary(arith.MaxSIOp, c[0], f.sub(
            f.load(starts, f.add(f.add(first, g), 1), i64), f.load(starts, f.add(first, g),
                                                                   i64)))], [most])
        return [wide, e.value(arith.SelectOp(has, e.add(h, 1), tallest)),
                e.add(empties, e.value(arith.ExtUIOp(e.compare("eq", rows, 0), i64))),
                e.value(arith.SelectOp(has, empties, gaps)), cells[0]]

    zero = b.i64(0)
    wide, tallest, _, gaps, most = b.loop(b.load(plan, LEVELS, i64), height,
                                          [zero, zero, zero, zero, zero])
    largest = b.loop(team, lambda e, g, c: [e.binary(arith.MaxSIOp, c[0], e.load(
        loads, g, i64))], [zero])[0]
    split = b.add(wide, b.mul(team, b.sub(n, wide)))  # x T: in whole rows
    grouped = b.value(arith.AndIOp(b.compare("eq", gaps, 0), b.value(arith.AndIOp(
        b.compare("sge", batch, 2), b.compare("slt", b.mul(largest, team), split)))))
    for field, value in ((GROUPED, b.value(arith.ExtUIOp(grouped, i64))), (LARGEST, largest),
                         (MOST, most), (TALLEST, tallest), (GAPS, gaps)):
        b.store(value, plan, field)


def counting_sort(b: Emitter, plan: SSAValue, n: SSAValue, keys: SSAValue,
                  order: SSAValue) -> None:
    """Each key's count after its start, summed into starts, then each row
    at its key's next place (stable); the starts moved back by one key."""
    heights, starts = b.load(plan, HEIGHTS, PTR), b.load(plan, STARTS, PTR)
    b.each(b.add(keys, 1), lambda e, k: e.store(e.i64(0), starts, k))

    def count(e: Emitter, r: SSAValue) -> None:
        h = e.load(heights, r, i64)
        e.when(e.compare("ult", h, keys),
               lambda f: f.store(f.add(f.load(starts, f.add(h, 1), i64), 1), starts, f.add(h, 1)),
               lambda f: f.store(f.i64(1), plan, STATUS))

    b.each(n, count)

    def sort(e: Emitter) -> None:
        used, empty = e.loop(keys, lambda f, k, carried: summed(f, starts, k, carried),
                             [e.i64(0), e.i64(0)])
        e.store(used, plan, USED)
        e.store(empty, plan, EMPTY)

        def place(f: Emitter, r: SSAValue) -> None:
            h = f.load(heights, r, i64)
            at = f.load(starts, h, i64)
            f.store(r, order, at)
            f.store(f.add(at, 1), starts, h)

        e.each(n, place)
        # starts[k] now holds key k's end, the next key's start: move them up
        e.each(keys, lambda f, i: f.store(f.load(starts, f.sub(f.sub(keys, 1), i), i64), starts,
                                          f.sub(keys, i)))
        e.store(e.i64(0), starts, 0)

    b.when(b.compare("eq", b.load(plan, STATUS, i64), 0), sort)


def summed(b: Emitter, starts: SSAValue, k: SSAValue, carried: Any) -> list[SSAValue]:
    """starts[k + 1] += starts[k]; the keys used (one past the last counted)
    and the empty keys (`carried`), empties counted as used ones pass them."""
    used, empty = carried
    count = b.load(starts, b.add(k, 1), i64)
    b.store(b.add(count, b.load(starts, k, i64)), starts, b.add(k, 1))
    has = b.compare("sgt", count, 0)
    gap = b.sub(k, used)  # empty keys between the last used and this one
    return [b.value(arith.SelectOp(has, b.add(k, 1), used)),
            b.value(arith.SelectOp(has, b.add(empty, gap), empty))]


def renumbered(b: Emitter, plan: SSAValue, n: SSAValue, order: SSAValue,
               inverse: SSAValue) -> None:
    """The inverse, then each row's children as places and its stored rows,
    in the order."""
    b.each(n, lambda e, j: e.store(e.value(arith.TruncIOp(j, i32)), inverse,
                                   e.load(order, j, i64)))
    b.store(b.const(-1, i32), inverse, n)
    sites, stored = b.load(plan, SITES, i64), b.load(plan, STORED, i64)

    def site(e: Emitter, s: SSAValue) -> None:
        children = e.load(plan, e.add(HEADER, s), PTR)
        out = e.load(plan, e.add(e.add(HEADER, sites), s), PTR)

        def each(f: Emitter, j: SSAValue) -> None:
            child = f.load(children, f.load(order, j, i64), i64)
            inside = f.compare("ult", child, n)  # -1: none
            place = f.load(inverse, f.value(arith.SelectOp(inside, child, n)), i32)
            f.store(place, out, j)

        e.each(n, each)

    b.each(sites, site)
    first = b.add(HEADER, b.mul(sites, 2))

    def value(e: Emitter, v: SSAValue) -> None:
        source = e.load(plan, e.add(first, v), PTR)
        out = e.load(plan, e.add(e.add(first, stored), v), PTR)
        size = e.load(plan, e.add(e.add(first, e.mul(stored, 2)), v), i64)
        for width, elem in ((1, i8), (4, i32), (8, i64)):  # scalar rows: a load each
            e.when(e.compare("eq", size, width), lambda f, elem=elem: f.each(
                n, lambda g, j: g.store(g.load(source, g.load(order, j, i64), elem), out, j)))
        other = e.value(arith.AndIOp(e.compare("ne", size, 1), e.value(arith.AndIOp(
            e.compare("ne", size, 4), e.compare("ne", size, 8)))))
        e.when(other, lambda f: f.each(n, lambda g, j: g.move(
            g.offset(out, g.mul(j, size), i8),
            g.offset(source, g.mul(g.load(order, j, i64), size), i8), size, i8)))

    b.each(stored, value)


@cache
def height_order_kernel(folder: Path | None = None) -> Any:
    """`recir_height_order(plan)` as a ctypes function; compiled on first use
    (an object cached on disk, in the calling function's `folder`, as the
    matrix kernels are)."""
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir

    compiled = cached_engine("height order", ENTRY,
                             lambda: to_llvm_ir(height_order_module()), cache_dir=folder)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.address(ENTRY))
    fn.engine = compiled  # the engine owns the code
    return fn
