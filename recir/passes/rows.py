"""Rows as the loop lowering sees them, and the scratch they are allocated from.

A rows value of `invoke-to-frontier`'s batched functions is lowered to its
row count (an i64 known at run time), a data pointer, and its static row
width and stride (a slice is a view with its input's stride). The ABI and
the lowering are `row_lowering.py`'s; the kernels `row_kernels.py`' and
`frontier_kernels.py`'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, TensorType, i8
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint

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
    width = 1
    for d in typ.get_shape()[1:]:
        width *= d
    return width


@dataclass(frozen=True)
class Rows:
    """A lowered rows value: `count` rows of `width` elements, `stride` apart."""

    count: SSAValue
    data: SSAValue
    width: int
    stride: int
    elem: Attribute  # the storage type


class Scratch:
    """The function's scratch buffer, bump-allocated as the ops are lowered
    (the functions are straight-line: `used` is one chain of adds)."""

    def __init__(self, base: SSAValue, capacity: SSAValue, used: SSAValue):
        self.base, self.capacity, self.used = base, capacity, used

    def take(self, b: Emitter, count: SSAValue, row_bytes: int) -> SSAValue:
        """`count * row_bytes` bytes, 64-byte aligned, checked to fit."""
        fits = b.compare("ule", count, self.capacity)
        rounded = b.binary(arith.AndIOp, b.add(b.mul(count, row_bytes), ALIGN - 1), -ALIGN)
        end = b.add(self.used, rounded)
        within = b.compare("ule", end, self.capacity)
        b.check(b.binary(arith.AndIOp, fits, within), SCRATCH_EXHAUSTED)
        data = b.offset(self.base, self.used, i8)
        self.used = end
        return data


@dataclass(frozen=True)
class RowTeam:
    """How a function's products over rows are run: on up to `threads`
    threads where they have at least `min_work` multiply-adds
    (`row_products.team_function`)."""

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


def row_at(b: Emitter, value: Rows | SSAValue, r: SSAValue) -> SSAValue:
    """Row `r` of `value`; a uniform buffer (or scalar) is every row."""
    if not isinstance(value, Rows):
        return value
    return b.offset(value.data, b.mul(r, value.stride), value.elem)


Lowered = Rows | SSAValue  # what a kernel gets: rows, a buffer or a scalar


def rows_of(args: Sequence[Lowered]) -> list[Rows]:
    return [a for a in args if isinstance(a, Rows)]
