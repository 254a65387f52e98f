"""`@f__heights`: one native call runs a function over rows for every height.

`frontier.schedule` runs `@post` (or its `_fwd`, or its `_bwd` from the roots
down) once per height on that height's contiguous range of rows. Calling
each height from Python costs more than the height's work at small
frontiers, so each lowered function over rows gets a loop beside it, built
here in the llvm dialect after `convert-recir-to-llvm` and called once per
batch with a plan: 8-byte fields

    heights, bounds (i64[heights + 1]), scratch, scratch bytes,
    saved_at (i64[heights][saved][2]: each saved value's first row and count),
    per input two fields (rows, data; a scalar's value in the second),
    per output two fields (capacity in rows, data).

An input is a slice of a table (the height's rows of it), a whole table, a
value a `_fwd` saved (its rows at that height) or a static tensor or scalar;
an output is written into its table at the height's rows or, for a `_fwd`'s
saved values, appended to its buffer. Every range is checked before it is
read or written: a failed check sets the context's error and site, and the
loop stops, as after an error of the function itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i1, i8, i32, i64
from xdsl.ir import Attribute, SSAValue

from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import ERROR_CHECK, OFFSETS

HEIGHTS_ENTRY = "__heights"
SLICE, WHOLE, SAVED, STATIC, SCALAR = "slice", "whole", "saved", "static", "scalar"
TABLE = "table"  # an output's kind besides SAVED
HEADER = 5  # the plan's fields before the inputs'
OUT_OF_RANGE = "error: a height's rows lie outside a frontier table"


@dataclass(frozen=True)
class Operand:
    """One input or output of the function over rows, as the loop passes it."""

    kind: str
    row_bytes: int = 0  # rows kinds
    scalar: Attribute = i64  # SCALAR


def height_loop(function: llvm.FuncOp, inputs: Sequence[Operand],
                outputs: Sequence[Operand], reverse: bool, sites: list[str]) -> llvm.FuncOp:
    """`@<function>__heights(ctx, plan)`; appends its check's message to
    `sites` (the module's error sites)."""
    site = len(sites)
    sites.append(OUT_OF_RANGE)
    return HeightLoopBuilder(function, inputs, outputs, site).build(reverse)


class HeightLoopBuilder:
    """The loop's builder: its values, and one method per step of a height."""

    def __init__(self, function: llvm.FuncOp, inputs: Sequence[Operand],
                 outputs: Sequence[Operand], site: int):
        self.name, self.inputs, self.outputs, self.site = (
            function.sym_name.data, list(inputs), list(outputs), site)
        self.loop, b, (self.ctx, self.plan) = new_function(
            f"{self.name}{HEIGHTS_ENTRY}", [PTR, PTR], private=False)
        self.b = b
        self.heights, self.bounds = b.load(self.plan, 0, i64), b.load(self.plan, 1, PTR)
        self.scratch, self.scratch_bytes = b.load(self.plan, 2, PTR), b.load(self.plan, 3, i64)
        self.saved_at = b.load(self.plan, 4, PTR)
        self.error_at = b.offset(self.ctx, OFFSETS["error"], i8)
        self.nsaved = max(sum(1 for o in operands if o.kind == SAVED)
                          for operands in (inputs, outputs))
        self.appended = b.alloca(max(self.nsaved, 1), i64)  # each saved output's rows so far
        for j in range(self.nsaved):
            b.store(b.i64(0), self.appended, j)
        self.descriptors = [b.alloca(2, i64) for _ in range(len(inputs) + len(outputs))]

    def build(self, reverse: bool) -> llvm.FuncOp:
        def each_height(e: Emitter, index: SSAValue, _: Sequence[SSAValue]
                        ) -> Sequence[SSAValue]:
            h = e.sub(e.sub(self.heights, 1), index) if reverse else index
            self.unless_failed(e, lambda inner: self.run_height(inner, h))
            return ()

        self.b.loop(self.heights, each_height)
        self.b.op(llvm.ReturnOp())
        return lower_to_llvm(self.loop)

    def fail(self, e: Emitter) -> None:
        e.store(e.const(ERROR_CHECK, i32), self.error_at, 0)
        e.store(e.const(self.site, i32), e.offset(self.ctx, OFFSETS["site"], i8), 0)

    def unless_failed(self, e: Emitter, then: Callable[[Emitter], None]) -> None:
        failed = e.load(self.error_at, 0, i32)
        e.when(e.value(arith.CmpiOp(failed, e.const(0, i32), "eq")), then)

    def field(self, e: Emitter, k: int, typ: Attribute = i64) -> SSAValue:
        return e.load(e.offset(self.plan, 8 * k, i8), 0, typ)

    def saved_slot(self, e: Emitter, h: SSAValue, j: int) -> SSAValue:
        return e.mul(e.add(e.mul(h, self.nsaved), j), 2)

    def run_height(self, e: Emitter, h: SSAValue) -> None:
        lo, hi = e.load(self.bounds, h, i64), e.load(self.bounds, e.add(h, 1), i64)
        ok = e.value(arith.AndIOp(e.compare("sle", 0, lo), e.compare("sle", lo, hi)))
        args: list[SSAValue] = []
        saved = 0
        for k, operand in enumerate(self.inputs):
            value, fits = self.argument(e, k, operand, h, lo, hi, saved)
            saved += operand.kind == SAVED
            args.append(value)
            if fits is not None:
                ok = e.value(arith.AndIOp(ok, fits))
        e.when(ok, lambda inner: self.call(inner, h, args, lo, e.sub(hi, lo)), self.fail)

    def argument(self, e: Emitter, k: int, operand: Operand, h: SSAValue, lo: SSAValue,
                 hi: SSAValue, saved: int) -> tuple[SSAValue, SSAValue | None]:
        """Input `k` at height `h`, and the check that it lies in its array."""
        first = HEADER + 2 * k
        if operand.kind == SCALAR:
            if operand.scalar == i1:  # a byte in memory
                return e.value(arith.TruncIOp(self.field(e, first + 1, i8), i1)), None
            return self.field(e, first + 1, operand.scalar), None
        rows, data = self.field(e, first), self.field(e, first + 1, PTR)
        if operand.kind == STATIC:
            return data, None
        start, length, fits = e.i64(0), rows, None
        if operand.kind == SLICE:
            start, length, fits = lo, e.sub(hi, lo), e.compare("sle", hi, rows)
        elif operand.kind == SAVED:
            at = self.saved_slot(e, h, saved)
            start, length = e.load(self.saved_at, at, i64), e.load(self.saved_at,
                                                                   e.add(at, 1), i64)
            fits = e.value(arith.AndIOp(e.compare("sle", 0, start), e.compare(
                "sle", e.add(start, length), rows)))
        descriptor = self.descriptors[k]
        e.store(length, descriptor, 0)
        e.store(e.offset(data, e.mul(start, operand.row_bytes), i8), descriptor, 1)
        return descriptor, fits

    def call(self, e: Emitter, h: SSAValue, args: list[SSAValue], lo: SSAValue,
             count: SSAValue) -> None:
        slots = self.descriptors[len(self.inputs):]
        e.op(llvm.CallOp(self.name, self.ctx, *args, *slots, self.scratch, self.scratch_bytes))
        self.unless_failed(e, lambda inner: self.store_outputs(inner, h, slots, lo, count))

    def store_outputs(self, e: Emitter, h: SSAValue, slots: list[SSAValue], lo: SSAValue,
                      count: SSAValue) -> None:
        """Each result into its table at the height's rows, or appended to its
        saved buffer (and where it went into `saved_at`)."""
        saved = 0
        for j, (operand, slot) in enumerate(zip(self.outputs, slots, strict=True)):
            rows, source = e.load(slot, 0, i64), e.load(slot, 1, PTR)
            first = HEADER + 2 * (len(self.inputs) + j)
            capacity, data = self.field(e, first), self.field(e, first + 1, PTR)
            if operand.kind == TABLE:
                start = lo
                ok = e.value(arith.AndIOp(e.compare("eq", rows, count),
                                          e.compare("sle", e.add(lo, count), capacity)))
            else:
                start = e.load(self.appended, saved, i64)
                ok = e.compare("sle", e.add(start, rows), capacity)
                at = self.saved_slot(e, h, saved)
                e.store(start, self.saved_at, at)
                e.store(rows, self.saved_at, e.add(at, 1))
                e.store(e.add(start, rows), self.appended, saved)
                saved += 1
            target = e.offset(data, e.mul(start, operand.row_bytes), i8)
            size = e.mul(rows, operand.row_bytes)
            e.when(ok, lambda inner, t=target, s=source, n=size: inner.op(
                llvm.CallIntrinsicOp("llvm.memmove.p0.p0.i64", [t, s, n, inner.const(0, i1)],
                                     [])), self.fail)
