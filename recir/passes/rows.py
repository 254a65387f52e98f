"""Rows as the loop lowering sees them, and the scratch they are allocated from.

A rows value of `invoke-to-frontier`'s batched functions is lowered to its
row count (an i64 known at run time), a data pointer, and its static row
width and stride (a slice is a view with its input's stride). The ABI and
the lowering are `row_lowering.py`'s; the kernels `row_kernels.py`' and
`frontier_kernels.py`'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import count
from math import prod

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import IntegerAttr, IntegerType, TensorType, i1, i8, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import format_error
from recir.passes.loop_builder import Emitter

SCRATCH_EXHAUSTED = "error: the frontier's scratch buffer is too small"
ALIGN = 64


def storage(element: Attribute) -> Attribute:
    """How an element is stored: `i1` as a byte, the rest as they are."""
    if isinstance(element, IntegerType) and element.width.data == 1:
        return i8
    return element


def element_bytes(element: Attribute) -> int:
    if isinstance(element, IntegerType):
        return max(1, storage(element).width.data // 8)  # type: ignore[attr-defined]
    return 4


def row_width(typ: Attribute) -> int:
    """Elements per row of a rows type."""
    assert isinstance(typ, TensorType)
    return prod(typ.get_shape()[1:])


@dataclass(frozen=True)
class Rows:
    """A lowered rows value: `count` rows of `width` elements, `stride` apart."""

    count: SSAValue
    data: SSAValue
    width: int
    stride: int
    elem: Attribute  # the storage type


class Scratch:
    """The function's scratch buffer as slots: a temporary of `w` bytes a
    row takes `w` rounded up to `ALIGN` bytes of every row, at a per-row
    offset chosen as the ops are lowered (first fit). Slot `o` starts at
    `base + o * rows`, where `rows` is `capacity // per_row`: each slot holds
    `rows` rows, 64-byte aligned to the base, and all of them fit. `per_row`
    is known once the function is lowered (`finish`). `release` hands a
    slot's bytes out again: the caller frees a temporary after its last use
    (`ScratchLiveness`), so a height's working set is its live
    temporaries, not all of them."""

    def __init__(self, b: Emitter, base: SSAValue, capacity: SSAValue):
        self.base = base
        self.per_row = b.op(arith.ConstantOp(IntegerAttr(1, i64)))  # set by `finish`
        self.rows = b.binary(arith.DivUIOp, capacity, self.per_row.results[0])
        self.top = 0  # per-row bytes of the slots so far
        self.free: list[tuple[int, int]] = []  # (offset, bytes) not in use, sorted
        self.fresh: list[tuple[SSAValue, int, int]] = []  # (data, offset, bytes) since `taken`
        # the op being lowered: its k-th rows may go to a result's room
        # (`row_lowering.Placement`): k -> (whether, rows there, address)
        self.placing: Placing = {}

    def take(self, b: Emitter, count: SSAValue, row_bytes: int) -> SSAValue:
        """A slot for `count` rows of `row_bytes`, checked to hold them, or
        the room `placing` names for them where it holds them."""
        size = max(ALIGN, -(-row_bytes // ALIGN) * ALIGN)
        offset = self.first_fit(size)
        b.check(b.compare("ule", count, self.rows), SCRATCH_EXHAUSTED)
        data = b.offset(self.base, b.mul(self.rows, offset), i8) if offset else self.base
        placed = self.placing.get(len(self.fresh))
        if placed is not None:
            whether, rows, target = placed
            there = b.binary(arith.AndIOp, whether(b), b.compare("ule", count, rows))
            data = b.value(arith.SelectOp(there, target, data))
        self.fresh.append((data, offset, size))
        return data

    def first_fit(self, size: int) -> int:
        for k, (offset, room) in enumerate(self.free):
            if room >= size:
                self.free[k:k + 1] = [(offset + size, room - size)] if room > size else []
                return offset
        if self.free and self.free[-1][0] + self.free[-1][1] == self.top:  # extend the last gap
            offset = self.free.pop()[0]
        else:
            offset = self.top
        self.top = offset + size
        return offset

    def taken(self) -> list[tuple[SSAValue, int, int]]:
        """The slots taken since the last call (an op's), its rooms forgotten."""
        fresh, self.fresh, self.placing = self.fresh, [], {}
        return fresh

    def release(self, offset: int, size: int) -> None:
        """Slot (`offset`, `size`) free again, merged with free neighbours."""
        spans = sorted([*self.free, (offset, size)])
        merged: list[tuple[int, int]] = []
        for start, room in spans:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + room)
            else:
                merged.append((start, room))
        self.free = merged

    def finish(self) -> int:
        """The function's scratch bytes a row, written where `rows` is found."""
        Rewriter.replace_op(self.per_row, arith.ConstantOp(IntegerAttr(max(self.top, 1), i64)))
        return self.top


@dataclass(frozen=True)
class RowTeam:
    """How a function's products over rows are run: on up to `threads`
    threads where they have at least `min_work` multiply-adds
    (`gemm_teams.team_function`)."""

    threads: int = 1
    min_work: int = -1


SERIAL = RowTeam()


class RowEmitter(Emitter):
    """An `Emitter` that also allocates rows from the function's scratch;
    `team` says how its products over rows use threads."""

    def __init__(self, point: InsertPoint, allocas: InsertPoint, scratch: Scratch,
                 team: RowTeam = SERIAL):
        super().__init__(point, allocas)
        self.scratch, self.team = scratch, team

    def rows(self, count: SSAValue, typ: Attribute) -> Rows:
        """Fresh contiguous rows of rows type `typ`."""
        assert isinstance(typ, TensorType)
        elem = storage(typ.element_type)
        width = row_width(typ)
        data = self.scratch.take(self, count, width * element_bytes(typ.element_type))
        return Rows(count, data, width, width, elem)

    def same_count(self, op: Operation, values: list[Rows]) -> SSAValue:
        """The common row count of `values`, checked at run time."""
        count = values[0].count
        for other in values[1:]:
            if other.count is count:
                continue
            ok = self.value(arith.CmpiOp(count, other.count, "eq"))
            self.check(ok, format_error(op, "operands have different row counts"))
        return count


@dataclass(frozen=True)
class Gathered(Rows):
    """Row r is row `index[r]` (an i32, checked when made) of the rows at
    `data`: a `frontier.take` read in place by the op it feeds
    (`row_lowering.in_place_takes`), which reads it through `row_at` only."""

    index: SSAValue | None = None


def row_at(b: Emitter, value: Rows | SSAValue, r: SSAValue) -> SSAValue:
    """Row `r` of `value`; a uniform buffer (or scalar) is every row."""
    if not isinstance(value, Rows):
        return value
    if isinstance(value, Gathered):
        assert value.index is not None
        r = b.to_i64(b.load(value.index, r, IntegerType(32)))
    return b.offset(value.data, b.mul(r, value.stride), value.elem)


Lowered = Rows | SSAValue  # what a kernel gets: rows, a buffer or a scalar


def plain_rows(*values: Lowered) -> bool:
    """Whether each value is rows of its own (not uniform, not gathered):
    what a product over rows takes."""
    return all(type(v) is Rows for v in values)
# `Scratch.placing`: an op's k-th rows -> (whether, rows there, address)
Placing = dict[int, tuple[Callable[[Emitter], SSAValue], SSAValue, SSAValue]]


def clear_of_reads(b: Emitter, op: Operation, rooms: Placing, args: Sequence[Lowered]
                   ) -> Placing:
    """`op`'s rooms, each written only where no row of its operands lies in
    it: a room is rows of a caller's table, which the op may read too (in
    place through a take's row numbers: one pass over them). Else a row's
    result could replace a row that a later row reads, and the pointers of
    `row_kernels.apart` would not be apart. A frontier's rows read lower
    heights' rows only, so there the rooms are kept."""
    reads = rows_of(args)
    if not rooms or not reads:
        return rooms
    spans = []
    for k, (_, rows, address) in rooms.items():
        typ = op.results[k].type
        start = b.value(llvm.PtrToIntOp(address, i64))
        spans.append((start, b.add(start, b.mul(rows, row_width(typ) * element_bytes(
            typ.element_type)))))  # type: ignore[attr-defined]

    def apart(e: Emitter, start: SSAValue, end: SSAValue, held: SSAValue) -> SSAValue:
        for room, room_end in spans:
            held = e.binary(arith.AndIOp, held, e.binary(
                arith.OrIOp, e.compare("ule", end, room), e.compare("ule", room_end, start)))
        return held

    clear = b.const(1, i1)
    for value in reads:
        size, base = element_bytes(value.elem), b.value(llvm.PtrToIntOp(value.data, i64))
        if isinstance(value, Gathered):
            def each(inner: Emitter, r: SSAValue, held: Sequence[SSAValue],
                     value: Gathered = value, size: int = size, base: SSAValue = base
                     ) -> Sequence[SSAValue]:
                assert value.index is not None
                number = inner.to_i64(inner.load(value.index, r, i32))
                start = inner.add(base, inner.mul(number, value.stride * size))
                return (apart(inner, start, inner.add(start, value.width * size), held[0]),)
            clear = b.loop(value.count, each, [clear])[0]
        else:
            clear = apart(b, base, b.add(base, b.mul(value.count, value.stride * size)), clear)
    return {k: (lambda e, whether=whether: e.binary(arith.AndIOp, whether(e), clear),
                rows, address) for k, (whether, rows, address) in rooms.items()}


def rows_of(args: Sequence[Lowered]) -> list[Rows]:
    return [a for a in args if isinstance(a, Rows)]


class ScratchLiveness:
    """When a scratch slot is free again: after the op of the last use of
    every value whose rows lie in it. A use inside an op's regions counts as
    the op's, and a pad folded into a sum of pads is read where the sum is
    lowered. A result that is none of its op's fresh slots (a slice, a view)
    may lie in any slot of the op's operands or of the op itself, so it keeps
    them all. A value returned is used by the last op: its slot is never
    handed out again."""

    def __init__(self, ops: list[Operation], deferred: dict[Operation, list[Operation]]):
        """`ops`: the function's ops in order; `deferred`: an op lowered
        later than its place, under the op that lowers it."""
        place = {op: k for k, op in enumerate(ops)}
        self.last: dict[SSAValue, int] = {}
        for k, op in enumerate(ops):
            for inner in op.walk():
                self.last.update((v, k) for v in inner.operands)
        for later, folded in deferred.items():
            for op in folded:
                self.last.update((v, max(self.last.get(v, -1), place[later]))
                                 for v in op.operands)
        self.slots: dict[SSAValue, set[int]] = {}  # value -> the slots its rows may lie in
        self.holders: dict[int, set[SSAValue]] = {}  # slot -> the values in it
        self.spans: dict[int, tuple[int, int]] = {}  # slot -> (per-row offset, bytes)
        self.ids = count()

    def record(self, op: Operation, results: Sequence[SSAValue],
               lowered: Callable[[SSAValue], Rows | None],
               taken: Sequence[tuple[SSAValue, int, int]]) -> None:
        """`results` of `op`, lowered to `lowered(r)`, and the slots it took."""
        fresh: dict[SSAValue, int] = {}
        for data, offset, size in taken:
            slot = next(self.ids)
            self.spans[slot], self.holders[slot], fresh[data] = (offset, size), set(), slot
        around = set(fresh.values()).union(*(self.slots.get(v, ()) for inner in op.walk()
                                             for v in inner.operands))
        for r in results:
            rows = lowered(r)
            if rows is None:
                continue
            own = fresh.get(rows.data)
            self.slots[r] = {own} if own is not None else around
            for slot in self.slots[r]:
                self.holders[slot].add(r)

    def dead(self, k: int) -> list[tuple[int, int]]:
        """The slots whose values are all dead after op `k`, now forgotten."""
        gone = [slot for slot, values in self.holders.items()
                if all(self.last.get(v, -1) <= k for v in values)]
        for slot in gone:
            del self.holders[slot]
        return [self.spans.pop(slot) for slot in gone]
