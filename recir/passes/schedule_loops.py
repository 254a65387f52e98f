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
The operands of rows are records of a constant table beside each loop,
whose steps one loop over the records takes (`plan_functions.py`): the
code does not grow with the values a `_fwd` saves.

`@post__heights` (`height_loop`): heights, bounds (i64[heights + 1]),
scratch, scratch bytes (each thread's), saved_at (i64[heights][threads]
[saved][2]: each thread's first row and count of each saved value), threads,
contexts (one per thread, `CONTEXT_BYTES` apart), the heights split across
the team (the first ones: rows per height never grow with the height), then
three fields of the loop's own (a phase's heights and team), the groups
(0, or i64[heights][threads + 1]: each thread's rows of each height), the
pieces (0, or i64[heights][4] where heights are cut into blocks:
`native_schedule.in_blocks`), then the inputs and the outputs (capacity in
rows, data). A loop built for a team (where the
function is compiled for several threads) starts one on `threads` > 1 for
the heights it splits, each thread taking a block of every such height's
rows with its own context and scratch, a barrier after each height (the
next reads this one's rows): one team start per call rather than per
product, and every op of a height shared (a thread's rows of each:
`height_shares`). The other heights (few rows: the
products' own teams split those by columns) run on the calling thread, after
the team's for `@post` and `_fwd`, before them for a `_bwd` (roots first).
With groups, each thread runs every height on its own rows, those of its
own trees (`backend/height_groups.py`): a tree's rows read only the same
tree's, so no thread waits for another until the gradients' copies are
added up.
An input is a slice of a table (the height's rows of it; a `_bwd`'s
slice of a gradient's table, `CLEARED`, zeroed once read, so the next call
finds the table zeroed), a whole table, a value a `_fwd` saved (its rows
at that height, the thread's), a static tensor or scalar, or a parameter's
gradient a `_bwd` adds into (`COPIED`: each thread adds into its own
buffer, the caller's for thread 0 and a zeroed copy for the others, which
the team adds into the caller's after the last height, zeroing them again:
`thread_copies`' one function for every such input). An output goes into
its table at the height's rows or, for a `_fwd`'s saved values, into its
buffer at the thread's next rows: each thread's saved rows of all its
heights one block, after the blocks of the threads before it
(`saved_cursor`), so that a thread writes about the same memory from call
to call (a saved value has at most the rows it was computed from); where
they went goes to `saved_at`, where the `_bwd` split as its `_fwd` finds
each thread's. The slot holds that room on entry, and rows written there
are not copied.
Each thread's products by a weight read one packed copy of it for all
its heights (`gemm_cached`: a table in its context for the loop's call),
and its thin heights' outer products into a weight's gradient go to a log
added a block of rows at a time and when its heights end (`row_logs`); a
team's threads keep all their thin rows, which the team adds into the
caller's buffers, before the copies' sum, which it skips where the copies
hold nothing (`team_logs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i1, i8, i32, i64
from xdsl.ir import Operation, SSAValue

from recir.passes.frame_buffers import declare_heap
from recir.passes.gemm_cached import close_table, open_table
from recir.passes.height_shares import TeamShares
from recir.passes.llvm_functions import call, ceil_div, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.packed_weights import packed_sites
from recir.passes.plan_functions import (
    CLEARED,
    COPIED,
    ROW_CODES,
    SAVED,
    SLICE,
    TABLE,
    Operand,
    PlanFunction,
    both,
)
from recir.passes.row_logs import close_logs, log_rows, log_sites, open_logs
from recir.passes.team_logs import team_end
from recir.passes.thread_copies import SUM_ROW_COPIES, sum_row_copies_function

HEIGHTS_ENTRY = "__heights"
HEADER = 13  # the height plan's fields before the inputs'
TEAM_DECLARATIONS = (("GOMP_parallel", [PTR, PTR, i32, i32], None), ("GOMP_barrier", [], None),
                     ("omp_get_thread_num", [], i32), ("omp_get_num_threads", [], i32))
OUT_OF_RANGE = "error: a height's rows lie outside a frontier table"
SHORT_TEAM = "error: a schedule's team started with fewer threads than its call asked"


def height_loop(function: llvm.FuncOp, inputs: Sequence[Operand],
                outputs: Sequence[Operand], reverse: bool, sites: list[str],
                team: bool = False) -> list[Operation]:
    """`@<function>__heights(ctx, plan)` (and, for a team, what it calls);
    appends its checks' messages to `sites` (the module's error sites)."""
    builder = HeightLoopBuilder(function, f"{HEIGHTS_ENTRY}.part" if team else HEIGHTS_ENTRY,
                                HEADER, inputs, outputs, sites, team)
    part = builder.build(reverse)
    if not team:
        return [part, *builder.globals]
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
            *shared, *builder.globals,
            *(llvm.FuncOp(n, llvm.LLVMFunctionType(list(i), o), llvm.LinkageAttr("external"))
              for n, i, o in TEAM_DECLARATIONS)]


class HeightLoopBuilder(TeamShares, PlanFunction):
    """`@post__heights`: one method per step of a height. Its inputs and
    outputs of rows are records of its operand table (`operand_table`):
    the loop's code stays the same size however many values a `_fwd`
    saves."""

    def build(self, reverse: bool) -> llvm.FuncOp:
        b = self.b
        self.bounds, self.saved_at = b.load(self.plan, 1, PTR), b.load(self.plan, 4, PTR)
        self.stride = b.load(self.plan, 5, i64) if self.team else b.i64(1)  # saved_at's
        first, end = (b.load(self.plan, 8, i64), b.load(self.plan, 9, i64)) if self.team \
            else (b.i64(0), b.load(self.plan, 0, i64))
        self.nsaved = max(sum(1 for o in operands if o.kind == SAVED)
                          for operands in (self.inputs, self.outputs))
        self.rows_in = [k for k, o in enumerate(self.inputs) if o.kind in ROW_CODES]
        rows: list[tuple[str, int, int]] = []
        for group in ([(k, self.inputs[k]) for k in self.rows_in],
                      [(len(self.inputs) + j, o) for j, o in enumerate(self.outputs)]):
            saved = 0  # the inputs' saved values, then the outputs', each from 0
            for at, operand in group:
                rows.append((operand.kind, at, saved))
                saved += operand.kind == SAVED
        self.operand_table(b, rows)
        copied = [k for k, operand in enumerate(self.inputs) if operand.kind == COPIED]
        self.grouped = b.compare("ne", b.load(self.plan, 11, i64), 0) if self.team else None
        if self.grouped is not None:
            # saved rows, copies and groups are laid out for the team asked for
            laid_out = b.const(1, i1) if self.nsaved or copied else self.grouped
            short = b.compare("ne", self.threads, b.load(self.plan, 10, i64))
            b.when(both(b, laid_out, short), self.fail(SHORT_TEAM))
        shared = both(b, b.compare("sge", self.threads, 2), b.value(arith.XOrIOp(
            self.grouped, b.const(1, i1)))) if self.grouped is not None else None
        self.cursor = self.saved_cursor(b, first, end) if self.team and any(
            o.kind == SAVED for o in self.outputs) else None

        def each_height(e: Emitter, index: SSAValue) -> None:
            h = e.sub(e.sub(end, 1), index) if reverse else e.add(first, index)
            self.unless_failed(e, lambda inner: self.run_height(inner, h))
            if shared is not None:  # every thread, every height, failed or not: none waits
                e.when(shared, lambda inner: inner.op(llvm.CallOp("GOMP_barrier")))

        need = self.within_tables(b, lambda e: e.each(e.sub(end, first), each_height), copied,
                                  lambda e: self.thin_rows(e, first, end))
        if self.team and copied:
            assert self.grouped is not None
            if need is None:  # all added before any thread sums them: the last
                # height's barrier does, unless groups have none (else `team_end`'s)
                b.when(both(b, b.compare("sge", self.threads, 2), self.grouped),
                       lambda inner: inner.op(llvm.CallOp("GOMP_barrier")))
            for j, k in enumerate(copied):
                elements = self.inputs[k].row_bytes // 4
                if need is not None and self.inputs[k].outer_only:  # zeros unless `need`
                    b.when(b.compare("ne", b.load(need, j, i64), 0),
                           lambda e, k=k, n=elements: self.sum_copies(e, k, n))
                else:
                    self.sum_copies(b, k, elements)
        return self.finish()

    def within_tables(self, b: Emitter, heights: Callable[[Emitter], None],
                      copied: list[int], thin: Callable[[Emitter], SSAValue]
                      ) -> SSAValue | None:
        """`heights(b)` between the opening and the closing of this thread's
        tables for the loop's call: its copies of the weights, packed once
        for all its heights (`gemm_cached`), and its logs of outer products
        (`row_logs`), where the module has such products. A team's threads
        keep their thin products' rows and add them into the caller's
        buffers when the heights end (`team_logs`); returns then which
        copied inputs' copies hold products (`team_end`'s `need`)."""
        module = self.function.parent_op()
        logs = log_sites(module) if isinstance(module, ModuleOp) else 0
        sites = packed_sites(module) if isinstance(module, ModuleOp) else 0
        if sites:
            declare_heap(module)  # the copies' `free`
        packed = open_table(b, self.ctx, sites) if sites else None
        keep = (b.compare("sge", self.threads, 2), thin(b)) if (
            logs and self.team and copied) else None
        logged = open_logs(b, self.ctx, logs, keep, len(copied)) if logs else None
        heights(b)
        if packed is not None:
            close_table(b, self.ctx, *packed, sites)
        need = None
        if keep is not None and logged is not None:  # the logs' rows into the caller's
            inputs = [(self.field(b, self.operand_field(k), PTR), self.inputs[k].row_bytes)
                      for k in copied]
            need = team_end(b, logged[0], b.load(self.plan, 6, PTR), self.thread,
                            self.threads, logs, inputs)
        if logged is not None:  # the rest of each thread's into its own buffers
            close_logs(b, self.ctx, *logged, logs)
        return need

    def thin_rows(self, b: Emitter, first: SSAValue, end: SSAValue) -> SSAValue:
        """A thread's rows of heights [first, end) where its block of a
        height is thin (fewer than a log's rows, `row_logs`): what a kept
        log of a product at every height takes, where the team splits each
        height (with groups, about as many)."""
        def each(e: Emitter, h: SSAValue, total: Sequence[SSAValue]) -> list[SSAValue]:
            rows = e.sub(e.load(self.bounds, e.add(h, 1), i64), e.load(self.bounds, h, i64))
            share = ceil_div(e, rows, self.threads)
            thin = e.compare("slt", share, log_rows())
            return [e.add(total[0], e.value(arith.SelectOp(thin, share, e.i64(0))))]

        return b.loop(end, each, [b.i64(0)], start=first)[0]

    def saved_cursor(self, b: Emitter, first: SSAValue, end: SSAValue) -> SSAValue:
        """Where this thread's next saved row goes: its saved rows of heights
        [first, end) one block, after the rows of the threads before it
        (`share`), so that a thread writes about the same rows from call to
        call, whichever trees it has: a row another core wrote last is
        fetched from its cache, across L3s on some machines. One thread's
        block is the heights' rows, where `store_output` put them before."""
        def each(e: Emitter, h: SSAValue, total: Sequence[SSAValue]) -> list[SSAValue]:
            lo, hi = e.load(self.bounds, h, i64), e.load(self.bounds, e.add(h, 1), i64)
            mine = self.share(e, h, lo, hi)[0]
            slot = e.alloca(1, i64)  # the rows of the threads before it at height h
            e.store(e.sub(mine, lo), slot, 0)

            def pieces(t: Emitter) -> None:  # theirs: pieces of their own blocks
                def piece(f: Emitter, other: SSAValue, rows: Sequence[SSAValue]) -> list:
                    theirs = self.share(f, h, lo, hi, other)
                    return [f.add(rows[0], f.sub(theirs[1], theirs[0]))]
                t.store(t.loop(self.thread, piece, [t.i64(0)])[0], slot, 0)

            e.when(self.pieced(e), pieces)
            return [e.add(total[0], e.load(slot, 0, i64))]

        before = b.loop(end, each, [b.i64(0)], start=first)[0]
        cursor = b.alloca(1, i64)
        b.store(b.add(b.load(self.bounds, first, i64), before), cursor, 0)
        return cursor

    def sum_copies(self, b: Emitter, k: int, elements: int) -> None:
        """This thread's block of the elements of input `k`'s copies (of
        threads 1 on) added into the caller's buffer, and zeroed."""
        call(b, SUM_ROW_COPIES, self.field(b, self.operand_field(k), PTR), self.thread,
             self.threads, b.i64(elements))

    def saved_base(self, e: Emitter, h: SSAValue) -> SSAValue:
        """Where saved value 0's (first row, count) of this thread at height
        h is in `saved_at` (value j's: 2j on)."""
        return e.mul(e.mul(e.add(e.mul(h, self.stride), self.thread), self.nsaved), 2)

    def run_height(self, e: Emitter, h: SSAValue) -> None:
        lo, hi = e.load(self.bounds, h, i64), e.load(self.bounds, e.add(h, 1), i64)
        checks = [e.compare("sle", 0, lo), e.compare("sle", lo, hi)]
        lo, hi, within = self.share(e, h, lo, hi)
        checks += within
        base = self.saved_base(e, h) if self.nsaved else None
        if self.rows_in:
            checks.append(self.describe_inputs(e, lo, hi, base))
        args = [self.descriptors[k] if operand.kind in ROW_CODES else self.argument(e, k)
                for k, operand in enumerate(self.inputs)]
        saved_lo = lo if self.cursor is None else e.load(self.cursor, 0, i64)
        e.when(both(e, *checks), lambda inner: self.run_call(
            inner, args, lo, e.sub(hi, lo), base, saved_lo), self.fail(OUT_OF_RANGE))
        if self.cursor is not None:
            e.store(e.add(saved_lo, e.sub(hi, lo)), self.cursor, 0)

    def describe_inputs(self, e: Emitter, lo: SSAValue, hi: SSAValue,
                        base: SSAValue | None) -> SSAValue:
        """Each input's rows at this height (a slice: the thread's rows of
        it; a saved value: where its `_fwd` put them; a whole table: all) in
        its descriptor; whether every one lies within its table."""
        saving = any(self.inputs[k].kind == SAVED for k in self.rows_in)

        def each(f: Emitter, r: SSAValue, held: Sequence[SSAValue]) -> list[SSAValue]:
            kind, field, row_bytes, saved, descriptor = self.record(f, r)
            capacity, data = self.operand_fields(f, field)

            def tables(g: Emitter) -> None:  # (count, first row) for now
                sliced = g.compare("eq", kind, ROW_CODES[SLICE])
                g.store(g.value(arith.SelectOp(sliced, g.sub(hi, lo), capacity)), descriptor, 0)
                g.store(g.value(arith.SelectOp(sliced, lo, g.i64(0))), descriptor, 1)

            def saved_rows(g: Emitter) -> None:
                assert base is not None
                at = g.add(base, g.mul(saved, 2))
                g.store(g.load(self.saved_at, g.add(at, 1), i64), descriptor, 0)
                g.store(g.load(self.saved_at, at, i64), descriptor, 1)

            if saving:
                f.when(f.compare("eq", kind, ROW_CODES[SAVED]), saved_rows, tables)
            else:
                tables(f)
            count, start = f.load(descriptor, 0, i64), f.load(descriptor, 1, i64)
            f.store(f.offset(data, f.mul(start, row_bytes), i8), descriptor, 1)
            # (capacity - start: start + count may wrap around)
            within = both(f, f.compare("sle", 0, start), f.compare("sle", 0, count),
                          f.compare("sle", count, f.sub(capacity, start)))
            return [f.value(arith.AndIOp(held[0], within))]

        return e.loop(len(self.rows_in), each, [e.const(1, i1)])[0]

    def run_call(self, e: Emitter, args: list[SSAValue], lo: SSAValue, count: SSAValue,
                 base: SSAValue | None, saved_lo: SSAValue) -> None:
        """`saved_lo`: where the saved values' rows go (`saved_cursor`)."""
        if self.outputs:
            e.each(len(self.outputs), lambda f, j: self.room(f, j, lo, count, saved_lo))
        self.call(e, args, roomed=True)
        if self.outputs:
            self.unless_failed(e, lambda inner: inner.each(len(self.outputs), lambda f, j: (
                self.store_output(f, j, lo, count, base, saved_lo))))
        if any(o.kind == CLEARED for o in self.inputs):
            self.unless_failed(e, self.clear_read)

    def clear_read(self, e: Emitter) -> None:
        """The `CLEARED` inputs' rows this call read, zeroed while in this
        thread's cache: the next call finds their tables zeroed."""
        for k, operand in enumerate(self.inputs):
            if operand.kind == CLEARED:
                rows = e.load(self.descriptors[k], 0, i64)
                e.clear(e.load(self.descriptors[k], 1, PTR), e.mul(rows, operand.row_bytes))

    def output_record(self, e: Emitter, j: SSAValue) -> tuple[SSAValue, ...]:
        return self.record(e, e.add(j, len(self.rows_in)))

    def room(self, e: Emitter, j: SSAValue, lo: SSAValue, count: SSAValue,
             saved_lo: SSAValue) -> None:
        """Where output j's rows go (`store_output`), in its slot: rows that
        fit there (a table: the height's or none) and their address."""
        kind, field, row_bytes, _, slot = self.output_record(e, j)
        capacity, data = self.operand_fields(e, field)
        is_table = e.compare("eq", kind, ROW_CODES[TABLE])
        start = e.value(arith.SelectOp(is_table, lo, saved_lo))
        left = e.sub(capacity, start)
        table = e.value(arith.SelectOp(e.compare("sle", count, left), count, e.i64(0)))
        saved = e.value(arith.MaxSIOp(e.min(count, left), e.i64(0)))
        e.store(e.value(arith.SelectOp(is_table, table, saved)), slot, 0)
        e.store(e.offset(data, e.mul(start, row_bytes), i8), slot, 1)

    def store_output(self, e: Emitter, j: SSAValue, lo: SSAValue, count: SSAValue,
                     base: SSAValue | None, saved_lo: SSAValue) -> None:
        """Output j into its table at the thread's rows of the height (all
        of them), or into its saved buffer from `saved_lo` (at most as many
        rows; where they went into `saved_at`)."""
        kind, field, row_bytes, saved, slot = self.output_record(e, j)
        capacity, data = self.operand_fields(e, field)
        rows, source = e.load(slot, 0, i64), e.load(slot, 1, PTR)
        table = e.compare("eq", kind, ROW_CODES[TABLE])
        start = e.value(arith.SelectOp(table, lo, saved_lo))
        fits = e.value(arith.SelectOp(table, e.compare("eq", rows, count),
                                      e.compare("sle", rows, count)))
        ok = both(e, fits, e.compare("sle", 0, start), e.compare("sle", 0, rows),
                  e.compare("sle", e.add(start, rows), capacity))
        if base is not None and any(o.kind == SAVED for o in self.outputs):
            def where(f: Emitter) -> None:
                at = f.add(base, f.mul(saved, 2))
                f.store(start, self.saved_at, at)
                f.store(rows, self.saved_at, f.add(at, 1))
            e.when(table, lambda _: None, where)
        self.move_rows(e, ok, OUT_OF_RANGE, e.offset(data, e.mul(start, row_bytes), i8),
                       source, e.mul(rows, row_bytes))
