"""The frontier schedule's loops in native code: all depths, all heights.

`frontier.schedule` expands the call tree depth by depth with `@expand` and
runs `@post` (or its `_fwd`, or its `_bwd` from the roots down) once per
height. Calling each depth and height from Python costs more than its work
at small frontiers, so the lowered functions over rows get loops beside
them, built here in the llvm dialect after `convert-recir-to-llvm` and
called once per batch, each with a plan of 8-byte fields. An operand takes
two fields (rows, data; a scalar's value in the second). Every range is
checked before it is read or written: a failed check sets the context's
error and site, and the loop stops, as after an error of the function.

`@post__heights` (`height_loop`): heights, bounds (i64[heights + 1]),
scratch, scratch bytes (each thread's), saved_at (i64[heights][threads]
[saved][2]: each thread's first row and count of each saved value), threads,
contexts (one per thread, `CONTEXT_BYTES` apart), the heights split across
the team (the first ones: rows per height never grow with the height), then
three fields of the loop's own (a phase's heights and team), the groups
(0, or i64[heights][threads + 1]: each thread's rows of each height), then
the inputs and the outputs (capacity in rows, data). A loop built for a team (where the
function is compiled for several threads) starts one on `threads` > 1 for
the heights it splits, each thread taking a block of every such height's
rows with its own context and scratch, a barrier after each height (the
next reads this one's rows): one team start per call rather than per
product, and every op of a height shared. The other heights (few rows: the
products' own teams split those by columns) run on the calling thread, after
the team's for `@post` and `_fwd`, before them for a `_bwd` (roots first).
With groups, each thread runs every height on its own rows, those of its
own trees (`backend/height_groups.py`): a tree's rows read only the same
tree's, so no thread waits for another until the gradients' copies are
added up.
An input is a slice of a table (the height's rows of it), a whole
table, a value a `_fwd` saved (its rows at that height, the thread's), a
static tensor or scalar, or a parameter's gradient a `_bwd` adds into
(`COPIED`: each thread adds into its own buffer, the caller's for thread 0
and a zeroed copy for the others, which the team adds into the caller's
after the last height, zeroing them again: `thread_copies`' one function
for every such input). An output goes into its table at
the height's rows or, for a `_fwd`'s saved values, into its buffer from the
thread's first row of the height on (a saved value has at most the rows it
was computed from), so the `_bwd` split as its `_fwd` finds each thread's;
the slot holds that room on entry, and rows written there are not copied.
Each thread's thin heights' outer products into a weight's gradient go to a log
added a block of rows at a time and when its heights end (`row_logs`: a
team's threads each into its own buffer, all before the copies' sum).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i1, i8, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue

from recir.passes.llvm_functions import call, ceil_div, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter, Index
from recir.passes.native_context import CONTEXT_BYTES, ERROR_CHECK, OFFSETS
from recir.passes.row_logs import close_logs, log_sites, open_logs
from recir.passes.thread_copies import SUM_ROW_COPIES, sum_row_copies_function

HEIGHTS_ENTRY = "__heights"
SLICE, WHOLE, SAVED, STATIC, SCALAR = "slice", "whole", "saved", "static", "scalar"
COPIED = "copied"  # a parameter's gradient, a buffer per thread (plan: their addresses)
TABLE = "table"  # an output's kind besides SAVED
HEADER = 12  # the height plan's fields before the inputs'
TEAM_DECLARATIONS = (("GOMP_parallel", [PTR, PTR, i32, i32], None), ("GOMP_barrier", [], None),
                     ("omp_get_thread_num", [], i32), ("omp_get_num_threads", [], i32))
OUT_OF_RANGE = "error: a height's rows lie outside a frontier table"
SHORT_TEAM = "error: a schedule's team started with fewer threads than its call asked"


@dataclass(frozen=True)
class Operand:
    """One input or output of the function over rows, as the loop passes it."""

    kind: str
    row_bytes: int = 0  # rows kinds; COPIED: the whole buffer's
    scalar: Attribute = i64  # SCALAR


def height_loop(function: llvm.FuncOp, inputs: Sequence[Operand],
                outputs: Sequence[Operand], reverse: bool, sites: list[str],
                team: bool = False) -> list[Operation]:
    """`@<function>__heights(ctx, plan)` (and, for a team, what it calls);
    appends its checks' messages to `sites` (the module's error sites)."""
    if not team:
        return [HeightLoopBuilder(function, HEIGHTS_ENTRY, HEADER, inputs, outputs,
                                  sites).build(reverse)]
    part = HeightLoopBuilder(function, f"{HEIGHTS_ENTRY}.part", HEADER, inputs, outputs,
                             sites, team).build(reverse)
    name = f"{function.sym_name.data}{HEIGHTS_ENTRY}"
    outer, b, (_, plan) = new_function(name, [PTR, PTR], private=False)
    name, threads, split = part.sym_name.data, b.load(plan, 5, i64), b.load(plan, 7, i64)

    def phase(e: Emitter, first: SSAValue, end: SSAValue, size: SSAValue) -> None:
        """Heights [first, end) on `size` threads (the calling thread alone: 1)."""
        for field, value in ((8, first), (9, end), (10, size)):
            e.store(value, plan, field)
        e.when(e.compare("sge", size, 2), lambda t: t.op(llvm.CallOp(
            "GOMP_parallel", t.value(llvm.AddressOfOp(name, PTR)), plan,
            t.value(arith.TruncIOp(size, i32)), t.const(0, i32))), lambda t: call(t, name, plan))

    phases = [(b.i64(0), split, threads), (split, b.load(plan, 0, i64), b.i64(1))]
    for first, end, size in reversed(phases) if reverse else phases:
        phase(b, first, end, size)
    b.op(llvm.ReturnOp())
    shared = [sum_row_copies_function()] if any(o.kind == COPIED for o in inputs) else []
    return [part, lower_to_llvm(outer, arith_cf=False),  # `llvm_convert.ARITH`
            *shared,
            *(llvm.FuncOp(n, llvm.LLVMFunctionType(list(i), o), llvm.LinkageAttr("external"))
              for n, i, o in TEAM_DECLARATIONS)]


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
        self.descriptors = [b.alloca(2, i64) for _ in range(len(inputs) + len(outputs))]
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

    def argument(self, e: Emitter, k: int, start: Index = 0,
                 length: SSAValue | None = None) -> SSAValue:
        """Input `k`: a scalar's value, a static tensor's data, or a
        descriptor of rows [start, start + length) of its array (all of it)."""
        operand, first = self.inputs[k], self.operand_field(k)
        if operand.kind == SCALAR:
            if operand.scalar == i1:  # a byte in memory
                return e.value(arith.TruncIOp(self.field(e, first + 1, i8), i1))
            return self.field(e, first + 1, operand.scalar)
        if operand.kind == COPIED:  # this thread's buffer
            return e.load(self.field(e, first, PTR), self.thread, PTR)
        data = self.field(e, first + 1, PTR)
        if operand.kind == STATIC:
            return data
        descriptor = self.descriptors[k]
        e.store(self.field(e, first) if length is None else length, descriptor, 0)
        e.store(e.offset(data, e.mul(start, operand.row_bytes), i8), descriptor, 1)
        return descriptor

    def call(self, e: Emitter, args: Sequence[SSAValue],
             room: Sequence[tuple[SSAValue, SSAValue]] = ()) -> None:
        """Each result's slot first holds where its rows may go (`room`: rows
        and address, else none; `row_lowering`'s ABI)."""
        null = e.value(llvm.ZeroOp.create(result_types=[PTR]))
        for k, slot in enumerate(self.slots):
            e.store(room[k][0] if room else e.i64(0), slot, 0)
            e.store(room[k][1] if room else null, slot, 1)
        e.op(llvm.CallOp(self.name, self.ctx, *args, *self.slots, self.scratch,
                         self.scratch_bytes))

    def copy_rows(self, e: Emitter, ok: SSAValue, message: str, output: int,
                  start: SSAValue) -> None:
        """Result `output`'s rows into its plan array from row `start`, if `ok`."""
        operand = self.outputs[output]
        rows, source = e.load(self.slots[output], 0, i64), e.load(self.slots[output], 1, PTR)
        data = self.field(e, self.operand_field(len(self.inputs) + output) + 1, PTR)
        target = e.offset(data, e.mul(start, operand.row_bytes), i8)
        size = e.mul(rows, operand.row_bytes)
        elsewhere = e.value(arith.CmpiOp(e.value(llvm.PtrToIntOp(target, i64)),
                                         e.value(llvm.PtrToIntOp(source, i64)), "ne"))
        e.when(ok, lambda inner: inner.when(elsewhere, lambda moving: moving.op(  # not in place
            llvm.CallIntrinsicOp("llvm.memmove.p0.p0.i64",
                                 [target, source, size, moving.const(0, i1)], []))),
            self.fail(message))

    def output_rows(self, e: Emitter, output: int) -> SSAValue:
        return e.load(self.slots[output], 0, i64)

    def capacity(self, e: Emitter, output: int) -> SSAValue:
        return self.field(e, self.operand_field(len(self.inputs) + output))

    def finish(self) -> llvm.FuncOp:
        self.b.op(llvm.ReturnOp())
        return lower_to_llvm(self.loop, arith_cf=False)  # `llvm_convert.ARITH`


def both(e: Emitter, *conditions: SSAValue) -> SSAValue:
    held = conditions[0]
    for c in conditions[1:]:
        held = e.value(arith.AndIOp(held, c))
    return held


class HeightLoopBuilder(PlanFunction):
    """`@post__heights`: one method per step of a height."""

    def build(self, reverse: bool) -> llvm.FuncOp:
        b = self.b
        self.bounds, self.saved_at = b.load(self.plan, 1, PTR), b.load(self.plan, 4, PTR)
        self.stride = b.load(self.plan, 5, i64) if self.team else b.i64(1)  # saved_at's
        first, end = (b.load(self.plan, 8, i64), b.load(self.plan, 9, i64)) if self.team \
            else (b.i64(0), b.load(self.plan, 0, i64))
        self.nsaved = max(sum(1 for o in operands if o.kind == SAVED)
                          for operands in (self.inputs, self.outputs))
        copied = [k for k, operand in enumerate(self.inputs) if operand.kind == COPIED]
        self.grouped = b.compare("ne", b.load(self.plan, 11, i64), 0) if self.team else None
        if self.grouped is not None:
            # saved rows, copies and groups are laid out for the team asked for
            laid_out = b.const(1, i1) if self.nsaved or copied else self.grouped
            short = b.compare("ne", self.threads, b.load(self.plan, 10, i64))
            b.when(both(b, laid_out, short), self.fail(SHORT_TEAM))
        shared = both(b, b.compare("sge", self.threads, 2), b.value(arith.XOrIOp(
            self.grouped, b.const(1, i1)))) if self.grouped is not None else None

        def each_height(e: Emitter, index: SSAValue) -> None:
            h = e.sub(e.sub(end, 1), index) if reverse else e.add(first, index)
            self.unless_failed(e, lambda inner: self.run_height(inner, h))
            if shared is not None:  # every thread, every height, failed or not: none waits
                e.when(shared, lambda inner: inner.op(llvm.CallOp("GOMP_barrier")))

        module = self.function.parent_op()
        logs = log_sites(module) if isinstance(module, ModuleOp) else 0
        logged = open_logs(b, self.ctx, logs) if logs else None
        b.each(b.sub(end, first), each_height)
        if logged is not None:  # each thread's outer products into its own buffers
            close_logs(b, self.ctx, *logged, logs)
        if self.team and copied:
            assert self.grouped is not None
            # all added before any thread sums them: the last height's barrier
            # does, unless logs were added after it or groups have none
            late = b.const(1, i1) if logged is not None else self.grouped
            b.when(both(b, b.compare("sge", self.threads, 2), late),
                   lambda inner: inner.op(llvm.CallOp("GOMP_barrier")))
            for k in copied:
                self.sum_copies(b, k, self.inputs[k].row_bytes // 4)
        return self.finish()

    def sum_copies(self, b: Emitter, k: int, elements: int) -> None:
        """This thread's block of the elements of input `k`'s copies (of
        threads 1 on) added into the caller's buffer, and zeroed."""
        call(b, SUM_ROW_COPIES, self.field(b, self.operand_field(k), PTR), self.thread,
             self.threads, b.i64(elements))

    def share(self, e: Emitter, h: SSAValue, lo: SSAValue, hi: SSAValue
              ) -> tuple[SSAValue, SSAValue, list[SSAValue]]:
        """This thread's rows of height h's [lo, hi), and the checks they
        need: all of them; on a team its block, or its group's rows."""
        if self.grouped is None:
            return lo, hi, []
        count = e.sub(hi, lo)
        per = ceil_div(e, count, self.threads)
        first = e.min(e.mul(self.thread, per), count)
        block_lo, block_hi = e.add(lo, first), e.add(lo, e.min(e.add(first, per), count))
        slot = e.alloca(2, i64)  # the block, or where the thread's group has its rows
        e.store(block_lo, slot, 0)
        e.store(block_hi, slot, 1)
        at = e.add(e.mul(h, e.add(self.threads, 1)), self.thread)

        def group_rows(t: Emitter) -> None:
            table = t.load(self.plan, 11, PTR)
            t.store(t.load(table, at, i64), slot, 0)
            t.store(t.load(table, t.add(at, 1), i64), slot, 1)

        e.when(self.grouped, group_rows)
        lo_, hi_ = e.load(slot, 0, i64), e.load(slot, 1, i64)
        return lo_, hi_, [e.compare("sle", lo, lo_), e.compare("sle", lo_, hi_),
                          e.compare("sle", hi_, hi)]

    def saved_slot(self, e: Emitter, h: SSAValue, j: int) -> SSAValue:
        """Where saved value j's (first row, count) of this thread at height h is."""
        slot = e.add(e.mul(e.add(e.mul(h, self.stride), self.thread), self.nsaved), j)
        return e.mul(slot, 2)

    def run_height(self, e: Emitter, h: SSAValue) -> None:
        lo, hi = e.load(self.bounds, h, i64), e.load(self.bounds, e.add(h, 1), i64)
        checks = [e.compare("sle", 0, lo), e.compare("sle", lo, hi)]
        lo, hi, within = self.share(e, h, lo, hi)
        checks += within
        args: list[SSAValue] = []
        saved = 0
        for k, operand in enumerate(self.inputs):
            if operand.kind == SLICE:
                checks.append(e.compare("sle", hi, self.field(e, self.operand_field(k))))
                args.append(self.argument(e, k, lo, e.sub(hi, lo)))
            elif operand.kind == SAVED:
                at = self.saved_slot(e, h, saved)
                start, length = e.load(self.saved_at, at, i64), e.load(self.saved_at,
                                                                       e.add(at, 1), i64)
                checks += [e.compare("sle", 0, start), e.compare(
                    "sle", e.add(start, length), self.field(e, self.operand_field(k)))]
                args.append(self.argument(e, k, start, length))
                saved += 1
            else:
                args.append(self.argument(e, k))
        e.when(both(e, *checks), lambda inner: self.run_call(inner, h, args, lo, e.sub(hi, lo)),
               self.fail(OUT_OF_RANGE))

    def run_call(self, e: Emitter, h: SSAValue, args: list[SSAValue], lo: SSAValue,
                 count: SSAValue) -> None:
        self.call(e, args, [self.room(e, j, lo, count) for j in range(len(self.outputs))])
        self.unless_failed(e, lambda inner: self.store_outputs(inner, h, lo, count))

    def room(self, e: Emitter, output: int, lo: SSAValue, count: SSAValue
             ) -> tuple[SSAValue, SSAValue]:
        """Where result `output`'s rows go (`store_outputs`): rows that fit
        there (a table: the height's or none) and their address."""
        operand, left = self.outputs[output], e.sub(self.capacity(e, output), lo)
        data = self.field(e, self.operand_field(len(self.inputs) + output) + 1, PTR)
        rows = e.value(arith.SelectOp(e.compare("sle", count, left), count, e.i64(0))
                       if operand.kind == TABLE else arith.MaxSIOp(e.min(count, left), e.i64(0)))
        return rows, e.offset(data, e.mul(lo, operand.row_bytes), i8)

    def store_outputs(self, e: Emitter, h: SSAValue, lo: SSAValue, count: SSAValue) -> None:
        """Each result into its table at the thread's rows of the height, or
        into its saved buffer from the first of them (and where it went into
        `saved_at`): at most as many rows."""
        saved = 0
        for j, operand in enumerate(self.outputs):
            rows, capacity = self.output_rows(e, j), self.capacity(e, j)
            if operand.kind == TABLE:
                ok = both(e, e.compare("eq", rows, count),
                          e.compare("sle", e.add(lo, count), capacity))
            else:
                ok = both(e, e.compare("sle", rows, count),
                          e.compare("sle", e.add(lo, rows), capacity))
                at = self.saved_slot(e, h, saved)
                e.store(lo, self.saved_at, at)
                e.store(rows, self.saved_at, e.add(at, 1))
                saved += 1
            self.copy_rows(e, ok, OUT_OF_RANGE, j, lo)
