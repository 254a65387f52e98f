"""`@expand__depths`: the frontier schedule's whole expansion in one native call.

Its plan, 8-byte fields: capacity (rows of every table), depth
limit, scratch, scratch bytes, levels (i64[depth limit]: each depth's first
row), total and depths (written back), roots, heights (i64[capacity]:
each invocation's, written after the expansion), trees (i64[capacity]: each
invocation's root row, written with its row); then `@expand`'s inputs, the
moving ones as tables whose first `roots` rows the caller fills; then per
invoke site a children table (i64: each row's child there, or -1) and per
stored value a table. Each depth's children get the rows after it, site by
site (the expansion order of `Schedule.expand`); a table too small, or the
depth limit reached, fails on `EXPANSION_FULL`, and the caller calls again
with larger ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, cf, llvm
from xdsl.dialects.builtin import i8, i32, i64
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.rewriter import InsertPoint

from recir.passes.loop_builder import PTR, Emitter
from recir.passes.plan_functions import (
    ROW_CODES,
    SLICE,
    TABLE,
    WHOLE,
    Operand,
    PlanFunction,
    both,
)

EXPANSION_HEADER = 10
EXPAND_ENTRY = "__depths"
EXPANSION_FULL = "error: the frontier's expansion tables are too small"
CHILD_OUT_OF_RANGE = "error: an invoke site's row lies outside its frontier"


def expansion_loop(function: llvm.FuncOp, inputs: Sequence[Operand], moving: int,
                   sites: int, stored: Sequence[Operand], messages: list[str]
                   ) -> list[Operation]:
    """`@<function>__depths(ctx, plan)` for an `@expand` whose first `moving`
    inputs move down the tree, with `sites` invoke sites and `stored` values."""
    outputs = [o for _ in range(sites) for o in (Operand(WHOLE, 4), *inputs[:moving])]
    loop = ExpansionLoopBuilder(function, EXPAND_ENTRY, EXPANSION_HEADER, inputs,
                                [*outputs, *stored], messages)
    return [loop.build(moving, sites), *loop.globals]


class ExpansionLoopBuilder(PlanFunction):
    """`@expand__depths`: depth after depth while a depth has rows."""

    def build(self, moving: int, sites: int) -> llvm.FuncOp:
        b = self.b
        self.moving, self.nsites = moving, sites
        self.capacity_rows, self.depth_limit = b.load(self.plan, 0, i64), b.load(self.plan, 1, i64)
        self.levels = b.load(self.plan, 4, PTR)
        self.trees = b.load(self.plan, 9, PTR)  # a root's row its own (those that fit)
        b.each(b.min(b.load(self.plan, 7, i64), self.capacity_rows),
               lambda e, r: e.store(r, self.trees, r))
        self.children = [self.field(b, self.child_field(k) + 1, PTR) for k in range(sites)]
        # the inputs of rows (the moving ones: the depth's rows) and the stored
        # values, each a record of the operand table
        self.rows_in = [k for k, o in enumerate(self.inputs) if o.kind == WHOLE]
        self.stored = range(sites * (1 + moving), len(self.outputs))
        self.operand_table(b, [*((SLICE if k < moving else WHOLE, k, 0) for k in self.rows_in),
                               *((TABLE, len(self.inputs) + s, 0) for s in self.stored)])
        lo, _, depth = while_loop(b, [b.i64(0), b.load(self.plan, 7, i64), b.i64(0)],
                                  lambda e, v: e.compare("sgt", v[1], 0), self.depth)
        assert isinstance(lo, BlockArgument)
        b = self.b = b.at(InsertPoint.at_end(lo.block))
        b.store(lo, self.plan, 5)
        b.store(depth, self.plan, 6)
        self.unless_failed(b, lambda e: self.heights(e, lo))
        return self.finish()

    def heights(self, e: Emitter, total: SSAValue) -> None:
        """Each invocation's height (0 for a leaf, else one more than its
        highest child's), from the last row up: children lie after their
        parent."""
        heights = e.load(self.plan, 8, PTR)

        def each(f: Emitter, index: SSAValue) -> None:
            row = f.sub(f.sub(total, 1), index)
            height: SSAValue = f.i64(0)
            for children in self.children:
                child = f.load(children, row, i64)
                real = f.compare("ult", child, total)  # -1 (none) is not
                above = f.add(f.load(heights, f.value(arith.SelectOp(real, child, f.i64(0))),
                                     i64), 1)
                height = f.value(arith.SelectOp(real, f.value(arith.MaxSIOp(height, above)),
                                                height))
            f.store(height, heights, row)

        e.each(total, each)

    def child_field(self, k: int) -> int:
        return self.operand_field(len(self.inputs) + len(self.outputs)) + 2 * k

    def depth(self, e: Emitter, carried: Sequence[SSAValue]) -> list[SSAValue]:
        lo, n, depth = carried
        fits = both(e, e.compare("slt", depth, self.depth_limit),
                    e.compare("sle", e.add(lo, n), self.capacity_rows))
        e.when(fits, lambda inner: inner.store(lo, self.levels, depth),
               self.fail(EXPANSION_FULL))
        self.unless_failed(e, lambda inner: self.call_at(inner, lo, n))
        after = e.add(lo, n)
        count: SSAValue = e.i64(0)
        width = 1 + self.moving
        for k in range(self.nsites):
            m = self.output_rows(e, k * width)
            start = e.add(after, count)
            self.unless_failed(e, lambda inner, k=k, m=m, start=start: self.site_children(
                inner, k, lo, n, m, start))
            count = e.add(count, m)
        if self.stored:
            e.each(len(self.stored), lambda f, s: self.store(f, s, lo, n))
        return [after, e.value(arith.SelectOp(self.failed(e), e.i64(0), count)),
                e.add(depth, 1)]

    def call_at(self, e: Emitter, lo: SSAValue, n: SSAValue) -> None:
        """`@expand` on the depth's rows [lo, lo + n) of the moving tables,
        the other inputs whole."""
        def describe(f: Emitter, r: SSAValue) -> None:
            kind, field, row_bytes, _, descriptor = self.record(f, r)
            capacity, data = self.operand_fields(f, field)
            moving = f.compare("eq", kind, ROW_CODES[SLICE])
            f.store(f.value(arith.SelectOp(moving, n, capacity)), descriptor, 0)
            start = f.value(arith.SelectOp(moving, lo, f.i64(0)))
            f.store(f.offset(data, f.mul(start, row_bytes), i8), descriptor, 1)

        if self.rows_in:
            e.each(len(self.rows_in), describe)
        self.call(e, [self.descriptors[k] if k in self.rows_in else self.argument(e, k)
                      for k in range(len(self.inputs))])

    def store(self, e: Emitter, s: SSAValue, lo: SSAValue, n: SSAValue) -> None:
        """Stored value s (its record after the inputs') into its table at
        the depth's rows, unless an earlier step failed; all of them, or
        the tables are too small."""
        _, field, row_bytes, _, slot = self.record(e, e.add(s, len(self.rows_in)))
        _, data = self.operand_fields(e, field)
        rows, source = e.load(slot, 0, i64), e.load(slot, 1, PTR)
        ok = e.compare("eq", rows, n)
        self.unless_failed(e, lambda inner: self.move_rows(
            inner, ok, EXPANSION_FULL, inner.offset(data, inner.mul(lo, row_bytes), i8), source,
            inner.mul(rows, row_bytes)))

    def site_children(self, e: Emitter, k: int, lo: SSAValue, n: SSAValue, m: SSAValue,
                      start: SSAValue) -> None:
        """Site k's children: rows `start`.. of every table, and each of the
        depth's rows' child there (or -1)."""
        width = 1 + self.moving
        fits = e.compare("sle", e.add(start, m), self.capacity_rows)
        for j in range(1, width):
            fits = both(e, fits, e.compare("eq", self.output_rows(e, k * width + j), m))
        children = self.children[k]

        def fill(inner: Emitter) -> None:
            inner.each(n, lambda f, i: f.store(f.i64(-1), children, f.add(lo, i)))
            rows = inner.load(self.slots[k * width], 1, PTR)

            def link(f: Emitter, i: SSAValue) -> None:
                r = f.to_i64(f.load(rows, i, i32))

                def linked(g: Emitter) -> None:
                    g.store(g.add(start, i), children, g.add(lo, r))
                    g.store(g.load(self.trees, g.add(lo, r), i64), self.trees, g.add(start, i))

                f.when(f.compare("ult", r, n), linked, self.fail(CHILD_OUT_OF_RANGE))

            inner.each(m, link)
            for j in range(1, width):
                self.copy_rows(inner, fits, EXPANSION_FULL, k * width + j, start)

        e.when(fits, fill, self.fail(EXPANSION_FULL))


def while_loop(b: Emitter, inits: Sequence[SSAValue],
               condition: Callable[[Emitter, Sequence[SSAValue]], SSAValue],
               body: Callable[[Emitter, Sequence[SSAValue]], Sequence[SSAValue]]
               ) -> Sequence[SSAValue]:
    """`while condition(values): values = body(values)` as cf blocks after
    `b`'s point, which must end its block; the final values are the exit
    block's arguments (emit after the loop there)."""
    here = b.point.block
    region = here.parent
    assert region is not None
    types = [v.type for v in inits]
    header, inside, done = Block(arg_types=types), Block(), Block(arg_types=types)
    region.insert_block_after(header, here)
    region.insert_block_after(inside, header)
    region.insert_block_after(done, inside)
    b.op(cf.BranchOp(header, *inits))
    h = b.at(InsertPoint.at_end(header))
    h.op(cf.ConditionalBranchOp(condition(h, header.args), inside, [], done, header.args))
    e = b.at(InsertPoint.at_end(inside))
    e.op(cf.BranchOp(header, *body(e, header.args)))
    return done.args
