"""The frontier's height order in one native call: sort, inverse and gathers.

A native schedule numbers its invocations by height (`NativeSchedule.renumber`):
a stable sort of the rows by height, each row's place in that order, each
row's children as places, and the stored values in that order. In NumPy that
is a dozen calls and as many temporaries a call, on rows the height loops
have just pushed out of the caches. `recir_height_order(plan)` does it in
passes over the rows: a counting sort (stable, as `argsort(kind="stable")`)
by height, or by height and group (`height_groups.group_keys`), then the
inverse, the children (i32, -1 where none) and the stored rows.

Its plan, 8-byte fields: rows n, keys K, heights (i64[n]), starts
(i64[K + 1]: each height's first place, then n), order (i64[n]: written),
inverse (i32[n + 1], -1 after the rows), sites S, stored values V, status
(written: 0, or 1 where a height is not below K, and nothing else is
written), the
most keys used and the empty keys below it (written); then S children
tables (i64[n]) and S children out (i32[n]), V stored tables, V stored out
and V row sizes in bytes. The caller sizes every table; no read or write
leaves them.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i8, i32, i64
from xdsl.ir import SSAValue

from recir.backend.array_address import data_address
from recir.backend.kept_plans import KeptRows
from recir.diagnostics import RecirError
from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter

ENTRY = "recir_height_order"
FIRST, STRIDES, NBYTES = operator.itemgetter(0), operator.attrgetter("strides"), \
    operator.attrgetter("nbytes")
CONTIGUOUS = operator.attrgetter("flags.c_contiguous")  # a row's bytes one after another
INT64, INT32 = np.dtype(np.int64), np.dtype(np.int32)
HEADER = 11  # the plan's fields before the tables
ROWS, KEYS, HEIGHTS, STARTS, ORDER, INVERSE, SITES, STORED, STATUS, USED, EMPTY = range(HEADER)


def height_order_module() -> ModuleOp:
    function, b, (plan,) = new_function(ENTRY, [PTR], private=False)
    n, keys = b.load(plan, ROWS, i64), b.load(plan, KEYS, i64)
    order, inverse = b.load(plan, ORDER, PTR), b.load(plan, INVERSE, PTR)
    b.store(b.i64(0), plan, STATUS)
    counting_sort(b, plan, n, keys, order)
    b.when(b.compare("eq", b.load(plan, STATUS, i64), 0),
           lambda e: renumbered(e, plan, n, order, inverse))
    b.op(llvm.ReturnOp())
    return ModuleOp([lower_to_llvm(function)])


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
def height_order_kernel() -> Any:
    """`recir_height_order(plan)` as a ctypes function; compiled on first use
    (an object cached on disk, as the matrix kernels are)."""
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir

    compiled = cached_engine("height order", ENTRY,
                             lambda: to_llvm_ir(height_order_module()))
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.address(ENTRY))
    fn.engine = compiled  # the engine owns the code
    return fn


class HeightOrder:
    """One schedule's calls of `recir_height_order`, its order and starts
    kept from call to call (calls of one function take turns)."""

    def __init__(self, sites: int, sizes: Sequence[int]):
        """`sites`: the children tables; `sizes`: the stored values' row bytes."""
        self.sites, self.sizes = sites, list(sizes)
        # each table's row bytes: children (i64), their places (i32), stored
        # values in and out; each row's bytes one after another
        self.strides = [8] * sites + [4] * sites + self.sizes * 2
        self.order = KeptRows([(np.dtype(np.int64), ())])
        self.starts = KeptRows([(np.dtype(np.int64), ())])
        self.kernel = height_order_kernel()
        self.addresses: list[int] = []  # the tables' of the kept plan
        self.plan = np.zeros(HEADER, np.int64)

    def __call__(self, heights: np.ndarray, keys: int, inverse: np.ndarray,
                 children: Sequence[np.ndarray], children_out: Sequence[np.ndarray],
                 stored: Sequence[np.ndarray], stored_out: Sequence[np.ndarray],
                 every: bool = False) -> np.ndarray:
        """The rows of `heights` (i64, below `keys`) sorted by height, their
        places into `inverse` (i32, -1 after them), children and stored
        values in that order into the outs; the starts of the heights used,
        or with `every` of all `keys` and then the rows. Every array is
        checked to have the rows and row bytes the kernel reads and writes."""
        total = len(heights)
        tables = (*children, *children_out, *stored, *stored_out)
        rows = list(map(len, tables))
        # each row's bytes one after another (C-level maps: checked every call)
        if keys < 0 or heights.dtype != INT64 or heights.strides[0] != 8 or (
                inverse.dtype != INT32) or (
                len(inverse) <= total or inverse.strides[0] != 4) or (
                list(map(FIRST, map(STRIDES, tables))) != self.strides) or (
                list(map(NBYTES, tables)) != list(map(operator.mul, rows, self.strides))) or (
                not all(map(CONTIGUOUS, tables))) or min(rows, default=total) < total or (
                len(children) != self.sites or len(stored) != len(self.sizes)):
            raise RecirError("error: the height order's tables do not hold its rows")
        addresses = list(map(data_address, tables))
        if addresses != self.addresses:  # tables made (again): a plan of theirs
            self.plan = np.array([0] * HEADER + addresses + self.sizes, np.int64)
            self.addresses = addresses
        order = self.order.at_least(total)[0]
        starts = self.starts.at_least(keys + 1)[0]
        plan = self.plan
        plan[:STATUS] = (total, keys, data_address(heights),
                         data_address(starts), data_address(order), data_address(inverse),
                         len(children), len(stored))
        self.kernel(data_address(plan))
        status, used, empty = plan[STATUS:EMPTY + 1].tolist()
        if status:
            raise RecirError("error: a height of the height order is out of range")
        if every:
            return starts[:keys + 1]
        bounds = starts[:used + 1]
        return np.unique(bounds) if empty else bounds  # (`Schedule.height_order`'s)
