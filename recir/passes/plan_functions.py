"""The shared part of the frontier schedule's native loops: a plan's operands.

`@expand__depths` (`expansion_loop.py`) and `@post__heights`
(`schedule_loops.py`) each call one lowered function over rows many times,
reading a plan of 8-byte fields: an operand takes two fields (rows, data;
a scalar's value in the second). `PlanFunction` reads them, builds the
callee's arguments and result slots (`row_lowering`'s ABI) in one array of
(rows, address) pairs, and sets the context's error and site where a check
fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, i1, i8, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue

from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import CONTEXT_BYTES, ERROR_CHECK, OFFSETS

SLICE, WHOLE, SAVED, STATIC, SCALAR = "slice", "whole", "saved", "static", "scalar"
COPIED = "copied"  # a parameter's gradient, a buffer per thread (plan: their addresses)
TABLE = "table"  # an output's kind besides SAVED
# a slice of a gradient's table that a `_bwd` reads at its height and zeroes
# after: the next call finds the table zeroed (`NativeBackward.zeroed`)
CLEARED = "cleared"
# an operand of rows' kind in its record of a loop's operand table
ROW_CODES = {SLICE: 0, CLEARED: 0, TABLE: 0, SAVED: 1, WHOLE: 2}
RECORD = 5  # a record's fields (`PlanFunction.operand_table`)


@dataclass(frozen=True)
class Operand:
    """One input or output of the function over rows, as the loop passes it."""

    kind: str
    row_bytes: int = 0  # rows kinds; COPIED: the whole buffer's
    scalar: Attribute = i64  # SCALAR
    # COPIED: only outer products add into it, whose rows a team adds from
    # its threads' logs into the caller's buffer (`team_logs`)
    outer_only: bool = False


class PlanFunction:
    """A loop over calls of one lowered function, reading its plan."""

    def __init__(self, function: llvm.FuncOp, suffix: str, header: int,
                 inputs: Sequence[Operand], outputs: Sequence[Operand], sites: list[str],
                 team: bool = False):
        """`team`: the function is a team's, `(plan)`: each thread's context
        and scratch are its share of the plan's (`HEADER`'s fields 6 and 2)."""
        self.name, self.inputs, self.outputs = function.sym_name.data, list(inputs), \
            list(outputs)
        self.header, self.sites, self.team = header, sites, team
        self.globals: list[Operation] = []  # constants beside the loop
        self.function = function
        if team:
            self.loop, b, (self.plan,) = new_function(f"{self.name}{suffix}", [PTR])
            self.thread = b.to_i64(b.value(llvm.CallOp("omp_get_thread_num", return_type=i32)))
            self.threads = b.to_i64(b.value(llvm.CallOp("omp_get_num_threads",
                                                        return_type=i32)))
            self.ctx = b.offset(b.load(self.plan, 6, PTR), b.mul(self.thread, CONTEXT_BYTES), i8)
        else:
            self.loop, b, (self.ctx, self.plan) = new_function(
                f"{self.name}{suffix}", [PTR, PTR], private=False)
            self.thread, self.threads = b.i64(0), b.i64(1)
        self.b = b
        self.scratch_bytes = b.load(self.plan, 3, i64)
        self.scratch = b.load(self.plan, 2, PTR)
        if team:
            self.scratch = b.offset(self.scratch, b.mul(self.thread, self.scratch_bytes), i8)
        self.error_at = b.offset(self.ctx, OFFSETS["error"], i8)
        # one array of every operand's (rows, address): a loop can index it
        self.described = b.alloca(2 * (len(inputs) + len(outputs)), i64)
        self.descriptors = [b.offset(self.described, 2 * k, i64)
                            for k in range(len(inputs) + len(outputs))]
        self.slots = self.descriptors[len(inputs):]

    def site(self, message: str) -> int:
        if message not in self.sites:
            self.sites.append(message)
        return self.sites.index(message)

    def fail(self, message: str) -> Callable[[Emitter], None]:
        def failing(e: Emitter) -> None:
            e.store(e.const(ERROR_CHECK, i32), self.error_at, 0)
            e.store(e.const(self.site(message), i32), e.offset(self.ctx, OFFSETS["site"], i8),
                    0)
        return failing

    def failed(self, e: Emitter) -> SSAValue:
        return e.value(arith.CmpiOp(e.load(self.error_at, 0, i32), e.const(0, i32), "ne"))

    def unless_failed(self, e: Emitter, then: Callable[[Emitter], None]) -> None:
        e.when(self.failed(e), lambda _: None, then)

    def field(self, e: Emitter, k: int, typ: Attribute = i64) -> SSAValue:
        return e.load(e.offset(self.plan, 8 * k, i8), 0, typ)

    def operand_field(self, k: int) -> int:
        """The first plan field of input k (outputs follow the inputs)."""
        return self.header + 2 * k

    def argument(self, e: Emitter, k: int) -> SSAValue:
        """Input `k`, not of rows (those are the operand table's): a scalar's
        value, this thread's buffer of a copied one, a static tensor's data."""
        operand, first = self.inputs[k], self.operand_field(k)
        if operand.kind == SCALAR:
            if operand.scalar == i1:  # a byte in memory
                return e.value(arith.TruncIOp(self.field(e, first + 1, i8), i1))
            return self.field(e, first + 1, operand.scalar)
        if operand.kind == COPIED:  # this thread's buffer
            return e.load(self.field(e, first, PTR), self.thread, PTR)
        assert operand.kind == STATIC, operand
        return self.field(e, first + 1, PTR)

    def call(self, e: Emitter, args: Sequence[SSAValue], roomed: bool = False) -> None:
        """Each result's slot first holds where its rows may go (`roomed`:
        filled already, else none; `row_lowering`'s ABI)."""
        null = e.value(llvm.ZeroOp.create(result_types=[PTR])) if not roomed else None
        for slot in self.slots if null is not None else ():
            e.store(e.i64(0), slot, 0)
            e.store(null, slot, 1)
        e.op(llvm.CallOp(self.name, self.ctx, *args, *self.slots, self.scratch,
                         self.scratch_bytes))

    def copy_rows(self, e: Emitter, ok: SSAValue, message: str, output: int,
                  start: SSAValue) -> None:
        """Result `output`'s rows into its plan array from row `start`, if `ok`."""
        operand = self.outputs[output]
        rows, source = e.load(self.slots[output], 0, i64), e.load(self.slots[output], 1, PTR)
        data = self.field(e, self.operand_field(len(self.inputs) + output) + 1, PTR)
        self.move_rows(e, ok, message, e.offset(data, e.mul(start, operand.row_bytes), i8),
                       source, e.mul(rows, operand.row_bytes))

    def move_rows(self, e: Emitter, ok: SSAValue, message: str, target: SSAValue,
                  source: SSAValue, size: SSAValue) -> None:
        """`size` bytes from `source` to `target` if `ok` (else fails on
        `message`); none where the function wrote them in place."""
        elsewhere = e.value(arith.CmpiOp(e.value(llvm.PtrToIntOp(target, i64)),
                                         e.value(llvm.PtrToIntOp(source, i64)), "ne"))
        e.when(ok, lambda inner: inner.when(elsewhere, lambda moving: moving.op(  # not in place
            llvm.CallIntrinsicOp("llvm.memmove.p0.p0.i64",
                                 [target, source, size, moving.const(0, i1)], []))),
            self.fail(message))

    def operand_table(self, b: Emitter, rows: Sequence[tuple[str, int, int]]) -> None:
        """Operands of rows that take the same steps bar a few constants,
        one loop over their records rather than steps unrolled for each:
        `rows`' (kind, operand number (outputs after the inputs), saved
        index) as records (kind code, plan field, row bytes, saved index,
        descriptor) of an internal constant beside the loop (`globals`),
        at `self.table`."""
        operands = [*self.inputs, *self.outputs]
        records = [value for kind, at, saved in rows for value in (
            ROW_CODES[kind], self.operand_field(at), operands[at].row_bytes, saved, at)]
        self.table = None
        if records:
            name = f"{self.loop.sym_name.data}.operands"
            typ = llvm.LLVMArrayType(len(records), i64)
            self.globals.append(llvm.GlobalOp(typ, name, "internal", constant=True, value=(
                DenseIntOrFPElementsAttr.from_list(TensorType(i64, [len(records)]), records))))
            self.table = b.value(llvm.AddressOfOp(name, PTR))

    def record(self, e: Emitter, r: SSAValue) -> tuple[SSAValue, ...]:
        """Record r's fields: kind, plan field, row bytes, saved index, and
        its descriptor's address (its (rows, address) in `described`)."""
        assert self.table is not None
        at = e.offset(self.table, e.mul(r, RECORD), i64)
        kind, field, row_bytes, saved, k = (e.load(at, f, i64) for f in range(RECORD))
        return kind, field, row_bytes, saved, e.offset(self.described, e.mul(k, 2), i64)

    def operand_fields(self, e: Emitter, field: SSAValue) -> tuple[SSAValue, SSAValue]:
        """An operand's capacity in rows and its data, at plan field `field`."""
        return e.load(self.plan, field, i64), e.load(self.plan, e.add(field, 1), PTR)

    def output_rows(self, e: Emitter, output: int) -> SSAValue:
        return e.load(self.slots[output], 0, i64)

    def finish(self) -> llvm.FuncOp:
        self.b.op(llvm.ReturnOp())
        return lower_to_llvm(self.loop, arith_cf=False)  # `llvm_convert.ARITH`


def both(e: Emitter, *conditions: SSAValue) -> SSAValue:
    held = conditions[0]
    for c in conditions[1:]:
        held = e.value(arith.AndIOp(held, c))
    return held


