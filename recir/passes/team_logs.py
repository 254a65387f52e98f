"""A height loop team's weight gradients, added from every thread's logs when its heights end.

On a team each thread adds a `_bwd`'s outer products dY^T X into its own
copy of a weight's gradient, and the team then sums the copies
(`thread_copies`). On many threads with a few rows each, every thread passes
over its whole copy at each product it adds (a log of thin rows, `row_logs`,
once per block of them), and the sum reads every copy. So a team's threads
keep every thin product's rows in their logs instead (a table with `KEEP`),
and when the heights end (`team_end`):

1. each thread finds, for each of its logs, the caller's buffer at the
   place of the log's C (C lies within the thread's buffer of a `COPIED`
   input: `TARGET`, the caller's at the same offset, and `INPUT`); a log
   whose C lies in none is added into its C, and the table marked `ASTRAY`;
2. after a barrier, for each site the threads count its rows in all logs:
   where every thread reading all of them (their rows of X, its block of
   dY's columns) moves fewer floats than a pass over a copy and the copies'
   sum would (4 m n), each thread adds into its block of the caller's
   buffer's rows every thread's rows, in thread order (one product per log,
   `recir_rows_log.block`): the same sums on every call at one thread
   count; else each adds its own log into its copy, as one product;
3. after a second barrier, the copies of an input that only outer products
   add into (`Operand.outer_only`) hold zeros unless step 2 added into them,
   a thread other than the first added a product into its copy at once
   (`DIRECT`: a block of rows or more, or a log that could not grow), or a
   table went astray: only then does the team sum them (`need`).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i8, i64
from xdsl.ir import SSAValue

from recir.passes.llvm_functions import call, ceil_div
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import CONTEXT_BYTES, ROW_LOGS
from recir.passes.row_logs import (
    ASTRAY,
    BLOCK,
    C_AT,
    DIRECT,
    ENTRY,
    FLUSH,
    HEADER,
    INPUT,
    M,
    N,
    TARGET,
    USED,
    entry_of,
)

# a `COPIED` input's buffers (i64[threads]: the caller's, then each thread's
# copy) and its bytes
Buffers = tuple[SSAValue, int]


def flags_at(sites: int) -> int:
    """Where a table's flags of its `COPIED` inputs start (after its entries):
    whether this thread added into its copy of the input at once."""
    return HEADER + ENTRY * sites


def find_targets(b: Emitter, table: SSAValue, sites: int, thread: SSAValue,
                 inputs: Sequence[Buffers]) -> None:
    """Step 1 for this thread's `table`."""
    def each(e: Emitter, site: SSAValue) -> None:
        entry = entry_of(e, table, site)
        c = e.load(entry, C_AT, i64)
        end = e.add(c, e.mul(e.mul(e.load(entry, M, i64), e.load(entry, N, i64)), 4))
        for j, (buffers, size) in enumerate(inputs):
            own = e.load(buffers, thread, i64)
            inside = e.value(arith.AndIOp(e.compare("sle", own, c),
                                          e.compare("sle", end, e.add(own, size))))

            def found(f: Emitter, j: int = j, buffers: SSAValue = buffers,
                      own: SSAValue = own) -> None:
                f.store(f.add(f.load(buffers, 0, i64), f.sub(c, own)), entry, TARGET)
                f.store(f.i64(j + 1), entry, INPUT)
                copied_into = f.value(arith.AndIOp(
                    f.compare("ne", f.load(entry, DIRECT, i64), 0),
                    f.compare("sge", thread, 1)))
                f.when(copied_into, lambda g: g.store(g.i64(1), table, flags_at(sites) + j))

            e.when(inside, found)

        def astray(f: Emitter) -> None:  # a C no input holds: as without a team
            call(f, FLUSH, entry)
            f.store(f.i64(1), table, ASTRAY)

        e.when(e.value(arith.AndIOp(e.compare("ne", c, 0),
                                    e.compare("eq", e.load(entry, TARGET, i64), 0))), astray)

    b.each(sites, each)


def table_of(b: Emitter, contexts: SSAValue, thread: SSAValue) -> SSAValue:
    """Thread `thread`'s table (its context's `row_logs`)."""
    ctx = b.offset(contexts, b.mul(thread, CONTEXT_BYTES), i8)
    return b.load(b.offset(ctx, ROW_LOGS, i8), 0, PTR)


def add_logs(b: Emitter, contexts: SSAValue, thread: SSAValue, threads: SSAValue,
             sites: int, need: SSAValue, inputs: int) -> None:
    """Step 2 for this thread; `need[j]` (i64[inputs]) set where a thread's
    copy of input j holds products, or a table went astray. A site's rows
    are added by the team where every thread reading all their rows of X
    (and its share of dY's) moves fewer floats than a pass over its copy
    and the copies' sum (4 m n): else each thread adds its own log into its
    copy, and the team sums them."""
    def flags(e: Emitter, other: SSAValue) -> None:
        table = table_of(e, contexts, other)
        astray = e.load(table, ASTRAY, i64)
        for j in range(inputs):
            flag = e.value(arith.OrIOp(astray, e.load(table, flags_at(sites) + j, i64)))
            e.store(e.value(arith.OrIOp(e.load(need, j, i64), flag)), need, j)

    b.each(threads, flags)

    def each_site(e: Emitter, site: SSAValue) -> None:
        def gather(f: Emitter, other: SSAValue, found: Sequence[SSAValue]) -> list[SSAValue]:
            entry = entry_of(f, table_of(f, contexts, other), site)
            named = f.compare("ne", f.load(entry, TARGET, i64), 0)
            used, m, n, input_ = (f.value(arith.SelectOp(named, f.load(entry, k, i64), f.i64(0)))
                                  for k in (USED, M, N, INPUT))
            return [f.add(found[0], used), *(f.value(arith.MaxSIOp(a, v))
                                             for a, v in zip(found[1:], (m, n, input_)))]

        total, m, n, input_ = e.loop(threads, gather, [e.i64(0)] * 4)
        read = e.mul(total, e.add(n, ceil_div(e, m, threads)))
        lo = e.value(arith.DivSIOp(e.mul(thread, m), threads))
        hi = e.value(arith.DivSIOp(e.mul(e.add(thread, 1), m), threads))

        def by_team(f: Emitter) -> None:
            def each(g: Emitter, other: SSAValue) -> None:
                entry = entry_of(g, table_of(g, contexts, other), site)
                call(g, BLOCK, entry, g.load(entry, TARGET, PTR), lo, hi)

            f.each(threads, each)

        def by_copies(f: Emitter) -> None:
            entry = entry_of(f, table_of(f, contexts, thread), site)
            f.when(f.compare("ne", f.load(entry, TARGET, i64), 0), lambda g: call(
                g, BLOCK, entry, g.load(entry, C_AT, PTR), g.i64(0), m))
            f.when(f.compare("sgt", input_, 0),
                   lambda g: g.store(g.i64(1), need, g.sub(input_, 1)))

        e.when(e.compare("slt", read, e.mul(e.mul(m, n), 4)), by_team, by_copies)

    b.each(sites, each_site)


def team_end(b: Emitter, table: SSAValue, contexts: SSAValue, thread: SSAValue,
             threads: SSAValue, sites: int, inputs: Sequence[Buffers]) -> SSAValue:
    """Steps 1 to 3 on a team of two or more (every thread of it); returns
    `need` (i64[inputs], zeros on one thread)."""
    need = b.alloca(max(len(inputs), 1), i64)
    b.each(max(len(inputs), 1), lambda e, j: e.store(e.i64(0), need, j))

    def on_team(e: Emitter) -> None:
        find_targets(e, table, sites, thread, inputs)
        e.op(llvm.CallOp("GOMP_barrier"))
        add_logs(e, contexts, thread, threads, sites, need, len(inputs))
        e.op(llvm.CallOp("GOMP_barrier"))

    b.when(b.compare("sge", threads, 2), on_team)
    return need
