"""A weight gradient's outer products over rows, logged and added a block at a time.

A `_bwd` height adds dY^T X into a weight's gradient C (`accumulate_outer`:
a tn product, `row_products.row_gemm`). The kernel reads and writes C once
per block of k (`Target.depth` rows), so a height of fewer rows pays a whole
pass over C for a part of a block's multiply-adds; a height loop's team pays
it on every thread, each for its own copy of C. So where a height loop has
opened a table of logs (`open_logs`: on its stack, pointed to by the
thread's context field `row_logs`), such a product of fewer than `depth`
rows copies them into its site's log instead (`recir_rows_log.add`: dY's
rows, then X's, as many of each as the log holds), and the log is added
into C by one product when it holds `depth` rows (`recir_rows_log.flush`),
and when the loop ends (`close_logs`): one pass over C per block, as for a
product of that many rows. A height of at least `depth` rows is multiplied
in at once. Each thread has its own table and logs; a team's threads keep
every thin row instead, for the team to add when its heights end
(`recir_rows_log.kept`, `team_logs`). The sums are grouped by block rather
than by height: the same bits on every call at one thread count. Without a
table (a function called height by height), or where the log cannot be
allocated, the product is added at once, as before.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i1, i8, i64
from xdsl.ir import SSAValue

from recir.dialects import invoke
from recir.passes.frame_buffers import allocated, declare_heap
from recir.passes.gemm_cached import open_table
from recir.passes.gemm_packing import release, workspace
from recir.passes.gemm_target import host_target
from recir.passes.llvm_functions import call, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter, Index
from recir.passes.native_context import ROW_LOGS
from recir.passes.row_products import GEMM, gemm_call
from recir.passes.rows import RowEmitter, Rows

LOG_SITES = "recir.log_sites"  # a module attribute: its logged outer products
# a table's fields before its entries: the sites, whether it keeps every
# thin product's rows for its team (`team_logs`; else a log is added into C
# once full), whether a thread added into a buffer no entry names, and the
# rows a kept log starts with (the thread's rows of the heights it has few of)
HEADER, KEEP, ASTRAY, FIRST_ROWS = 4, 1, 2, 3
# an entry's i64 fields: the log (or null), rows used, C, m, n, rows the log
# holds, whether rows went into C at once (not logged), and the team's
# buffer at C's place and the number of the input that holds C, plus one
# (`team_logs`; else 0)
ENTRY = 9
LOG, USED, C_AT, M, N, CAPACITY, DIRECT, TARGET, INPUT = range(ENTRY)
ADD, KEPT, FLUSH, BLOCK = ("recir_rows_log.add", "recir_rows_log.kept", "recir_rows_log.flush",
                           "recir_rows_log.block")


def log_rows() -> int:
    """Rows a log holds: one block of the tn kernel's k (`Target.depth`),
    whose product passes over C once, as a product of more rows would per
    block."""
    return host_target().depth


def log_sites(module: ModuleOp) -> int:
    found = module.attributes.get(LOG_SITES)
    return found.value.data if isinstance(found, IntegerAttr) else 0


def memcpy(b: Emitter, target: SSAValue, source: SSAValue, floats: SSAValue) -> None:
    b.op(llvm.CallIntrinsicOp("llvm.memcpy.p0.p0.i64",
                              [target, source, b.mul(floats, 4), b.const(0, i1)], []))


def flush_function(gemm: GEMM) -> llvm.FuncOp:
    """`recir_rows_log.flush(entry)`: the log's rows added into its C (one
    tn product), and the log emptied."""
    function, b, (entry,) = new_function(FLUSH, [PTR])
    used = b.load(entry, USED, i64)

    def add(e: Emitter) -> None:
        data, c = e.load(entry, LOG, PTR), e.load(entry, C_AT, PTR)
        m, n = e.load(entry, M, i64), e.load(entry, N, i64)
        x = e.offset(data, e.mul(m, e.load(entry, CAPACITY, i64)))
        gemm(e, [m, n, used, data, m, x, n, c, n, e.i64(1)])
        e.store(e.i64(0), entry, USED)

    b.when(b.value(arith.AndIOp(b.compare("sgt", used, 0),
                                allocated(b, b.load(entry, LOG, PTR)))), add)
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


def block_function(gemm: GEMM) -> llvm.FuncOp:
    """`recir_rows_log.block(entry, into, lo, hi)`: rows [lo, hi) of `into`
    (an m x n buffer: the team's at the log's C, or C) += the log's
    dY[:, lo:hi]^T X, the log left as it is: a team's thread its block of
    a buffer's rows from every thread's log, or its own log into its C
    (`team_logs`)."""
    function, b, (entry, into, lo, hi) = new_function(BLOCK, [PTR, PTR, i64, i64])
    used = b.load(entry, USED, i64)

    def add(e: Emitter) -> None:
        data = e.load(entry, LOG, PTR)
        m, n = e.load(entry, M, i64), e.load(entry, N, i64)
        x = e.offset(data, e.mul(m, e.load(entry, CAPACITY, i64)))
        gemm(e, [e.sub(hi, lo), n, used, e.offset(data, lo), m, x, n,
                 e.offset(into, e.mul(lo, n)), n, e.i64(1)])

    b.when(b.value(arith.AndIOp(b.value(arith.AndIOp(
        b.compare("sgt", used, 0), b.compare("slt", lo, hi))), allocated(b, into))), add)
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


def named(b: Emitter, entry: SSAValue, c: SSAValue, m: SSAValue, n: SSAValue) -> SSAValue:
    """Whether the entry names this C (at this m, n)."""
    same = b.compare("eq", b.value(llvm.PtrToIntOp(c, i64)), b.load(entry, C_AT, i64))
    for k, key in ((M, m), (N, n)):
        same = b.value(arith.AndIOp(same, b.compare("eq", b.load(entry, k, i64), key)))
    return same


def not_(b: Emitter, value: SSAValue) -> SSAValue:
    return b.value(arith.XOrIOp(value, b.const(1, i1)))


def log_rows_of(e: Emitter, entry: SSAValue, dy: SSAValue, ldy: SSAValue, x: SSAValue,
                ldx: SSAValue, count: SSAValue, full: Callable[[Emitter], None] | None = None
                ) -> None:
    """`count` rows of dY and X copied after the log's used rows (which
    must fit); `full`: called once the log is full."""
    data, m, n = e.load(entry, LOG, PTR), e.load(entry, M, i64), e.load(entry, N, i64)
    capacity = e.load(entry, CAPACITY, i64)
    xs = e.offset(data, e.mul(m, capacity))

    def row(f: Emitter, r: SSAValue) -> None:
        used = f.load(entry, USED, i64)
        memcpy(f, f.offset(data, f.mul(used, m)), f.offset(dy, f.mul(r, ldy)), m)
        memcpy(f, f.offset(xs, f.mul(used, n)), f.offset(x, f.mul(r, ldx)), n)
        f.store(f.add(used, 1), entry, USED)
        if full is not None:
            f.when(f.compare("sge", f.add(used, 1), capacity), full)

    e.each(count, row)


def name_entry(e: Emitter, entry: SSAValue, c: SSAValue, m: SSAValue, n: SSAValue) -> None:
    for k, value in ((C_AT, e.value(llvm.PtrToIntOp(c, i64))), (M, m), (N, n)):
        e.store(value, entry, k)


def add_function(gemm: GEMM) -> llvm.FuncOp:
    """`recir_rows_log.add(table, entry, C, m, n, dY, ldy, X, ldx, count)`:
    C += dY^T X over `count` rows, through the entry's log where there are
    fewer than a block of them (made on first use, for this C: a log of
    another C is added first), added into C once full; a table that keeps
    its rows for the team takes `recir_rows_log.kept` instead."""
    function, b, args = new_function(ADD, [PTR, PTR, PTR, i64, i64, PTR, i64, PTR, i64, i64])
    table, entry, c, m, n, dy, ldy, x, ldx, count = args
    rows = log_rows()

    def classic(b: Emitter) -> None:
        def retarget(e: Emitter) -> None:  # a log of another product: added in, given back
            call(e, FLUSH, entry)
            release(e, e.load(entry, LOG, PTR))
            e.store(e.value(llvm.ZeroOp(result_types=[PTR])), entry, LOG)

        b.when(b.value(arith.AndIOp(allocated(b, b.load(entry, LOG, PTR)),
                                    not_(b, named(b, entry, c, m, n)))), retarget)
        few = b.compare("slt", count, rows)

        def make(e: Emitter) -> None:
            e.store(workspace(e, e.mul(e.add(m, n), rows)), entry, LOG)
            e.store(e.i64(0), entry, USED)
            e.store(e.i64(rows), entry, CAPACITY)
            name_entry(e, entry, c, m, n)

        b.when(b.value(arith.AndIOp(few, not_(b, allocated(b, b.load(entry, LOG, PTR))))), make)
        b.when(b.value(arith.AndIOp(few, allocated(b, b.load(entry, LOG, PTR)))),
               lambda e: log_rows_of(e, entry, dy, ldy, x, ldx, count,
                                     lambda f: call(f, FLUSH, entry)),
               lambda e: gemm(e, [m, n, count, dy, ldy, x, ldx, c, n, e.i64(1)]))

    b.when(b.compare("ne", b.load(table, KEEP, i64), 0), lambda e: call(
        e, KEPT, table, entry, c, m, n, dy, ldy, x, ldx, count), classic)
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


def kept_function(gemm: GEMM) -> llvm.FuncOp:
    """`recir_rows_log.kept(table, entry, C, m, n, dY, ldy, X, ldx, count)`:
    as `add`, for a team's thread whose logs the team adds into the caller's
    buffers (`team_logs`): every thin product's rows kept (the log grows),
    a product of a block of rows or more (or one that finds no room) added
    into C at once and the entry marked `DIRECT`; another C than the
    entry's: its log added into its own C and the table marked `ASTRAY`."""
    function, b, args = new_function(KEPT, [PTR, PTR, PTR, i64, i64, PTR, i64, PTR, i64, i64])
    table, entry, c, m, n, dy, ldy, x, ldx, count = args
    rows = log_rows()

    def retarget(e: Emitter) -> None:
        call(e, FLUSH, entry)
        release(e, e.load(entry, LOG, PTR))
        for k in range(ENTRY):
            e.store(e.i64(0), entry, k)
        e.store(e.i64(1), table, ASTRAY)

    b.when(b.value(arith.AndIOp(b.compare("ne", b.load(entry, C_AT, i64), 0),
                                not_(b, named(b, entry, c, m, n)))), retarget)
    name_entry(b, entry, c, m, n)
    need = b.add(b.load(entry, USED, i64), count)
    capacity = b.load(entry, CAPACITY, i64)

    def grow(e: Emitter) -> None:  # a log of at least twice the rows, the rows moved
        wanted = e.i64(rows)
        for least in (e.mul(capacity, 2), need, e.load(table, FIRST_ROWS, i64)):
            wanted = e.value(arith.MaxSIOp(wanted, least))
        fresh = workspace(e, e.mul(e.add(m, n), wanted))

        def move(f: Emitter) -> None:
            old, used = f.load(entry, LOG, PTR), f.load(entry, USED, i64)
            f.when(allocated(f, old), lambda g: (
                memcpy(g, fresh, old, g.mul(used, m)),
                memcpy(g, g.offset(fresh, g.mul(m, wanted)), g.offset(old, g.mul(m, capacity)),
                       g.mul(used, n))))
            release(f, old)
            f.store(fresh, entry, LOG)
            f.store(wanted, entry, CAPACITY)

        e.when(allocated(e, fresh), move)

    few = b.compare("slt", count, rows)
    b.when(b.value(arith.AndIOp(few, b.compare("sgt", need, capacity))), grow)
    room = b.compare("sle", need, b.load(entry, CAPACITY, i64))

    def at_once(e: Emitter) -> None:
        gemm(e, [m, n, count, dy, ldy, x, ldx, c, n, e.i64(1)])
        e.store(e.i64(1), entry, DIRECT)

    b.when(b.value(arith.AndIOp(few, room)),
           lambda e: log_rows_of(e, entry, dy, ldy, x, ldx, count), at_once)
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


def declare_logs(module: ModuleOp, gemm: GEMM) -> None:
    """`recir_rows_log.add` and what it calls in `module`, once (`gemm`: the
    module's tn call, a team's where its products use one)."""
    names = {op.sym_name.data for op in module.ops if isinstance(op, llvm.FuncOp)}
    if ADD in names:
        return
    declare_heap(module)
    module.body.blocks[0].add_ops([flush_function(gemm), block_function(gemm),
                                   kept_function(gemm), add_function(gemm)])


def logged_outer(b: RowEmitter, module: ModuleOp, rows: int, cols: int, dy: Rows, x: Rows,
                 c: SSAValue) -> None:
    """C (rows x cols, a parameter's gradient) += dY^T X through this
    site's log where the context has a table with it, else at once (a
    table without it marked `ASTRAY`)."""
    site = log_sites(module)
    module.attributes[LOG_SITES] = IntegerAttr(site + 1, i64)
    gemm = gemm_call(module, "tn", b.team)
    declare_logs(module, gemm)
    m, n, ldy, ldx = b.i64(rows), b.i64(cols), b.i64(dy.stride), b.i64(x.stride)
    args = [m, n, dy.count, dy.data, ldy, x.data, ldx, c, n, b.i64(1)]
    table = b.load(b.offset(b.value(invoke.ContextOp()), ROW_LOGS, i8), 0, PTR)

    def astray(f: Emitter) -> None:
        gemm(f, args)
        f.store(f.i64(1), table, ASTRAY)

    def listed(e: Emitter) -> None:
        e.when(e.compare("slt", site, e.load(table, 0, i64)), lambda f: call(
            f, ADD, table, entry_of(f, table, site), c, m, n, dy.data, ldy, x.data, ldx,
            dy.count), astray)

    b.when(allocated(b, table), listed, lambda e: gemm(e, args))


def entry_of(b: Emitter, table: SSAValue, site: Index) -> SSAValue:
    return b.offset(table, b.add(b.mul(site, ENTRY), HEADER), i64)


def open_logs(b: Emitter, ctx: SSAValue, sites: int,
              keep: tuple[SSAValue, SSAValue] | None = None, after: int = 0
              ) -> tuple[SSAValue, SSAValue]:
    """A table of `sites` empty logs (and `after` zeroed fields after them)
    on the function's stack, made the context's `row_logs`; `keep`: whether
    it keeps every thin product's rows, and the rows a log starts with.
    Returns it and the `row_logs` it replaced."""
    table, old = open_table(b, ctx, sites, ROW_LOGS, ENTRY, HEADER, after)
    if keep is not None:
        b.store(b.value(arith.ExtUIOp(keep[0], i64)), table, KEEP)
        b.store(keep[1], table, FIRST_ROWS)
    return table, old


def close_logs(b: Emitter, ctx: SSAValue, table: SSAValue, old: SSAValue, sites: int
               ) -> None:
    """Each log added into its C (unless the team added it into its
    `TARGET`) and given back; the context's `row_logs` as it was."""
    def close(e: Emitter, i: SSAValue) -> None:
        entry = entry_of(e, table, i)
        e.when(e.compare("eq", e.load(entry, TARGET, i64), 0), lambda f: call(f, FLUSH, entry))
        release(e, e.load(entry, LOG, PTR))

    b.each(sites, close)
    b.store(old, b.offset(ctx, ROW_LOGS, i8), 0)
