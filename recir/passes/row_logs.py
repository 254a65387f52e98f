"""A weight gradient's outer products over rows, logged and added a block at a time.

A `_bwd` height adds dY^T X into a weight's gradient C (`accumulate_outer`:
a tn product, `row_products.row_gemm`). The kernel reads and writes C once
per block of k (`Target.depth` rows), so a height of fewer rows pays a whole
pass over C for a part of a block's multiply-adds; a height loop's team pays
it on every thread, each for its own copy of C. So where a height loop has
opened a table of logs (`open_logs`: on its stack, pointed to by the
thread's context field `row_logs`), such a product of fewer than `depth`
rows copies them into its site's log instead (`recir_rows_log.add`: dY's
rows, then X's, `LOG_ROWS` of each), and the log is added into C by one
product when it holds `depth` rows (`recir_rows_log.flush`), and when the
loop ends (`close_logs`): one pass over C per block, as for a product of that
many rows. A height of at least `depth` rows is multiplied in at once. Each
thread has its own table and logs, and adds them into its own buffer (a
team's threads: each its copy, `schedule_loops`). The sums are grouped by
block rather than by height: the same bits on every call at one thread
count. Without a table (a function called height by height), or where the
log cannot be allocated, the product is added at once, as before.
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i1, i8, i64
from xdsl.ir import SSAValue

from recir.dialects import invoke
from recir.passes import gemm_cached
from recir.passes.frame_buffers import allocated, declare_heap
from recir.passes.gemm_packing import release, workspace
from recir.passes.gemm_target import host_target
from recir.passes.llvm_functions import call, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import ROW_LOGS
from recir.passes.row_products import GEMM, gemm_call
from recir.passes.rows import RowEmitter, Rows

LOG_SITES = "recir.log_sites"  # a module attribute: its logged outer products
ENTRY = 5  # an entry's i64 fields: the log (or null), rows used, C, m, n
ADD, FLUSH = "recir_rows_log.add", "recir_rows_log.flush"


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
    used = b.load(entry, 1, i64)

    def add(e: Emitter) -> None:
        data, c = e.load(entry, 0, PTR), e.load(entry, 2, PTR)
        m, n = e.load(entry, 3, i64), e.load(entry, 4, i64)
        x = e.offset(data, e.mul(m, log_rows()))
        gemm(e, [m, n, used, data, m, x, n, c, n, e.i64(1)])
        e.store(e.i64(0), entry, 1)

    b.when(b.compare("sgt", used, 0), add)
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


def add_function(gemm: GEMM) -> llvm.FuncOp:
    """`recir_rows_log.add(entry, C, m, n, dY, ldy, X, ldx, count)`: C +=
    dY^T X over `count` rows, through the entry's log where there are fewer
    than a block of them (made on first use, for this C: a log of another C
    is added first)."""
    function, b, args = new_function(ADD, [PTR, PTR, i64, i64, PTR, i64, PTR, i64, i64])
    entry, c, m, n, dy, ldy, x, ldx, count = args
    rows = log_rows()

    def retarget(e: Emitter) -> None:  # a log of another product: added in, given back
        call(e, FLUSH, entry)
        release(e, e.load(entry, 0, PTR))
        e.store(e.value(llvm.ZeroOp(result_types=[PTR])), entry, 0)

    same = b.compare("eq", b.value(llvm.PtrToIntOp(c, i64)), b.load(entry, 2, i64))
    for k, key in ((3, m), (4, n)):
        same = b.value(arith.AndIOp(same, b.compare("eq", b.load(entry, k, i64), key)))
    b.when(b.value(arith.AndIOp(allocated(b, b.load(entry, 0, PTR)),
                              b.value(arith.XOrIOp(same, b.const(1, i1))))), retarget)
    few = b.compare("slt", count, rows)

    def make(e: Emitter) -> None:
        e.store(workspace(e, e.mul(e.add(m, n), rows)), entry, 0)
        for k, value in ((1, e.i64(0)), (2, e.value(llvm.PtrToIntOp(c, i64))), (3, m), (4, n)):
            e.store(value, entry, k)

    b.when(b.value(arith.AndIOp(few, b.value(arith.XOrIOp(allocated(b, b.load(entry, 0, PTR)),
                                                      b.const(1, i1))))), make)
    data = b.load(entry, 0, PTR)

    def logged(e: Emitter) -> None:
        xs = e.offset(data, e.mul(m, rows))

        def row(f: Emitter, r: SSAValue) -> None:
            used = f.load(entry, 1, i64)  # below `rows`: a full log is added at once
            memcpy(f, f.offset(data, f.mul(used, m)), f.offset(dy, f.mul(r, ldy)), m)
            memcpy(f, f.offset(xs, f.mul(used, n)), f.offset(x, f.mul(r, ldx)), n)
            f.store(f.add(used, 1), entry, 1)
            f.when(f.compare("sge", f.add(used, 1), rows), lambda g: call(g, FLUSH, entry))

        e.each(count, row)

    b.when(b.value(arith.AndIOp(few, allocated(b, data))), logged,
           lambda e: gemm(e, [m, n, count, dy, ldy, x, ldx, c, n, e.i64(1)]))
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


def declare_logs(module: ModuleOp, gemm: GEMM) -> None:
    """`recir_rows_log.add` and `.flush` in `module`, once (`gemm`: the
    module's tn call, a team's where its products use one)."""
    names = {op.sym_name.data for op in module.ops if isinstance(op, llvm.FuncOp)}
    if ADD in names:
        return
    declare_heap(module)
    module.body.blocks[0].add_ops([flush_function(gemm), add_function(gemm)])


def logged_outer(b: RowEmitter, module: ModuleOp, rows: int, cols: int, dy: Rows, x: Rows,
                 c: SSAValue) -> None:
    """C (rows x cols, a parameter's gradient) += dY^T X through this
    site's log where the context has a table with it, else at once."""
    site = log_sites(module)
    module.attributes[LOG_SITES] = IntegerAttr(site + 1, i64)
    gemm = gemm_call(module, "tn", b.team)
    declare_logs(module, gemm)
    m, n, ldy, ldx = b.i64(rows), b.i64(cols), b.i64(dy.stride), b.i64(x.stride)
    args = [m, n, dy.count, dy.data, ldy, x.data, ldx, c, n, b.i64(1)]
    table = b.load(b.offset(b.value(invoke.ContextOp()), ROW_LOGS, i8), 0, PTR)

    def listed(e: Emitter) -> None:
        e.when(e.compare("slt", site, e.load(table, 0, i64)), lambda f: call(
            f, ADD, f.offset(table, 1 + ENTRY * site, i64), c, m, n, dy.data, ldy, x.data,
            ldx, dy.count), lambda f: gemm(f, args))

    b.when(allocated(b, table), listed, lambda e: gemm(e, args))


def open_logs(b: Emitter, ctx: SSAValue, sites: int) -> tuple[SSAValue, SSAValue]:
    """A table of `sites` empty logs on the function's stack, made the
    context's `row_logs`; returns it and the `row_logs` it replaced."""
    return gemm_cached.open_table(b, ctx, sites, ROW_LOGS, ENTRY)


def close_logs(b: Emitter, ctx: SSAValue, table: SSAValue, old: SSAValue, sites: int
               ) -> None:
    """Each log added into its C and given back; the context's `row_logs`
    as it was."""
    def close(e: Emitter, i: SSAValue) -> None:
        entry = e.offset(table, e.add(e.mul(i, ENTRY), 1), i64)
        e.when(allocated(e, e.load(entry, 0, PTR)), lambda f: call(f, FLUSH, entry))
        release(e, e.load(entry, 0, PTR))

    b.each(sites, close)
    b.store(old, b.offset(ctx, ROW_LOGS, i8), 0)
