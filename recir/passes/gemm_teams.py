"""The GEMM kernels' team forms: `recir_gemm_<layout>.team`, one block of C a thread.

A product over rows on a team (`row_products.gemm_call`; `gemm.run` with
threads) calls `recir_gemm_<layout>.team(..., threads, min_work)`: below
`min_work` multiply-adds (a team's start would cost more than the threads
save: `policy.team_min_work`) or with fewer than two register tiles it
calls the kernel itself (as it does on a thread of a team already), else
it starts a libgomp team (`GOMP_parallel`) whose threads each call the
kernel on their own block of C, whole tiles of its rows by whole tiles of
its columns (`grid`: the split whose largest block's multiply-adds and
reads cost least). A team always has all `threads` threads, those without
a block returning at once: libgomp ends the threads of its pool that a
smaller team leaves out and creates them again for the next larger one, a
thread creation per product. No two threads write one element of C, so a
weight's gradient dY^T X (accumulated into the parameter's gradient) needs
no reduction, and the split depends only on (m, n, k, threads): one thread
count gives the same bits on every call. The team's threads need no native
context: the kernels read and write only their operands, and cannot fail.
The forms of every layout are one object per host
(`backend/kernels/compiled_gemm.team_engine`), with `recir_gemm_tn.logs`:
a weight gradient's logs of every thread of a recursive call's team, added
by one team, each thread its block of C through every log.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i32, i64
from xdsl.ir import SSAValue

from recir.passes import gemm_kernels
from recir.passes.convert_invoke_to_gomp import declare
from recir.passes.gemm_target import Target, host_target
from recir.passes.llvm_functions import call, ceil_div, lower_to_llvm, new_function, outside_teams
from recir.passes.loop_builder import PTR, Emitter

FIELDS = 12  # m, n, k, A, lda, B, ldb, C, ldc, accumulate, the grid's rows and columns
POINTERS = (3, 5, 7)  # the fields that hold A, B and C
DECLARATIONS = (("GOMP_parallel", [PTR, PTR, i32, i32], None),
                ("omp_get_thread_num", [], i32), ("omp_get_num_threads", [], i32))


def grains(layout: str, target: Target) -> tuple[int, int]:
    """(rows, columns) of C a thread's block is a multiple of: the kernel's
    register tile, so that splitting leaves no thread a partial tile it
    would not have had anyway."""
    if layout == "nt":
        rows, cols = target.nt_tile
        return rows, max(cols, target.lanes * target.tile[1])
    return target.tile[0], target.lanes * target.tile[1]


def part_size(b: Emitter, size: SSAValue, parts: SSAValue, grain: int) -> SSAValue:
    """A part's length where `size` is cut into `parts` of whole grains."""
    return b.mul(ceil_div(b, ceil_div(b, size, parts), grain), grain)


def span(b: Emitter, size: SSAValue, parts: SSAValue, index: SSAValue, grain: int
         ) -> tuple[SSAValue, SSAValue]:
    """(start, length) of part `index` of `size` cut into `parts` of whole
    grains (the last shorter; an index past the parts: length 0)."""
    per = part_size(b, size, parts, grain)
    start = b.min(b.mul(index, per), size)
    return start, b.sub(b.min(b.add(start, per), size), start)


def block(b: Emitter, layout: str, fields: list[SSAValue], rows: tuple[SSAValue, SSAValue],
          cols: tuple[SSAValue, SSAValue]) -> list[SSAValue]:
    """The kernel's arguments for C's block of `rows` by `cols` ((start, length) each)."""
    _, _, k, a, lda, bm, ldb, c, ldc, acc = fields
    a_step = lda if layout != "tn" else 1  # elements between two rows of op(A)
    b_step = ldb if layout == "nt" else 1  # elements between two columns of op(B)
    a = b.offset(a, b.mul(rows[0], a_step))
    bm = b.offset(bm, b.mul(cols[0], b_step))
    c = b.offset(c, b.add(b.mul(rows[0], ldc), cols[0]))
    return [rows[1], cols[1], k, a, lda, bm, ldb, c, ldc, acc]


def part_function(layout: str, target: Target) -> llvm.FuncOp:
    """`recir_gemm_<layout>.part(data)`, run by each thread of the team:
    the kernel on this thread's block of C (its place in the grid, row
    by row), if it has one."""
    kernel = f"recir_gemm_{layout}"
    function, b, (data,) = new_function(f"{kernel}.part", [PTR])
    fields = [b.load(b.offset(data, i, i64), 0, PTR if i in POINTERS else i64)
              for i in range(FIELDS)]
    rows, cols, some = thread_block(b, layout, target, *fields[:2], *fields[10:])
    b.when(some, lambda e: call(e, kernel, *block(e, layout, fields[:10], rows, cols)))
    b.op(llvm.ReturnOp())
    return function


def thread_block(b: Emitter, layout: str, target: Target, m: SSAValue, n: SSAValue,
                 across: SSAValue, down: SSAValue
                 ) -> tuple[tuple[SSAValue, SSAValue], tuple[SSAValue, SSAValue], SSAValue]:
    """This thread's block of C in the grid (`across` parts of its rows by
    `down` of its columns, row by row): its rows and columns ((start,
    length) each) and whether it has one."""
    thread = b.to_i64(b.value(llvm.CallOp("omp_get_thread_num", return_type=i32)))
    row_grain, col_grain = grains(layout, target)
    rows = span(b, m, across, b.value(arith.DivSIOp(thread, down)), row_grain)
    cols = span(b, n, down, b.value(arith.RemSIOp(thread, down)), col_grain)
    some = b.value(arith.AndIOp(b.compare("sgt", rows[1], 0), b.compare("sgt", cols[1], 0)))
    return rows, cols, some


def grid(b: Emitter, layout: str, target: Target, m: SSAValue, n: SSAValue,
         team: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(parts of C's rows, parts of its columns) for a team of `team`: the
    split whose largest block costs least, its multiply-adds (rows x
    columns a step of k) and the elements of A and B its thread brings in
    (rows + columns a step, `Target.moved_macs` each; each thread packs
    the part of B its columns need). Rows alone made every thread pack all
    of B: on 16 cores a 400-row height's product by a 1280 x 512 weight ran
    at 407 GFLOP/s, NumPy's at 870 (docs/benchmarks.md)."""
    row_grain, col_grain = grains(layout, target)

    def try_rows(e: Emitter, i: SSAValue, best: Sequence[SSAValue]) -> list[SSAValue]:
        across = e.add(i, 1)
        down = e.value(arith.DivSIOp(team, across))
        rows = e.min(part_size(e, m, across, row_grain), m)
        cols = e.min(part_size(e, n, down, col_grain), n)
        cost = e.add(e.mul(rows, cols), e.mul(e.add(rows, cols), target.moved_macs))
        better = e.compare("slt", cost, best[0])
        return [e.value(arith.SelectOp(better, pick, kept))
                for pick, kept in ((cost, best[0]), (across, best[1]))]

    _, across = b.loop(team, try_rows, [b.i64(2**62), b.i64(1)])
    return across, b.value(arith.DivSIOp(team, across))


def team_function(layout: str, target: Target) -> llvm.FuncOp:
    """`recir_gemm_<layout>.team(..., threads, min_work)`: the kernel on
    one thread, or on a team of at most `threads`, one block of C each."""
    kernel = f"recir_gemm_{layout}"
    function, b, args = new_function(f"{kernel}.team", [*gemm_kernels.SIGNATURE, i64, i64])
    m, n, k, threads, min_work = args[0], args[1], args[2], args[10], args[11]
    b.when(team_pays(b, layout, target, m, n, k, threads, min_work),
           lambda e: start_team(e, layout, target, f"{kernel}.part", args[:10], threads),
           lambda e: call(e, kernel, *args[:10]))
    b.op(llvm.ReturnOp())
    return function


def team_pays(b: Emitter, layout: str, target: Target, m: SSAValue, n: SSAValue,
              k: SSAValue, threads: SSAValue, min_work: SSAValue) -> SSAValue:
    """Whether C (m x n, over k) goes to a team: two register tiles of its
    rows or columns to share, `min_work` multiply-adds, and not already on
    a team's thread."""
    row_grain, col_grain = grains(layout, target)
    most = b.value(arith.MaxSIOp(b.value(arith.DivSIOp(m, b.i64(row_grain))),
                                 b.value(arith.DivSIOp(n, b.i64(col_grain)))))
    pays = b.value(arith.AndIOp(b.compare("sge", b.min(threads, most), 2),
                                b.compare("sge", b.mul(b.mul(m, n), k), min_work)))
    return b.value(arith.AndIOp(pays, outside_teams(b)))


def start_team(b: Emitter, layout: str, target: Target, part: str, fields: Sequence[SSAValue],
               threads: SSAValue) -> None:
    """`part(data)` on a libgomp team of `threads`, `data` the fields and
    then the grid for C (its m and n the first two fields)."""
    values = [*fields, *grid(b, layout, target, fields[0], fields[1], threads)]
    data = b.alloca(len(values), i64)
    for i, value in enumerate(values):
        b.store(value, b.offset(data, i, i64), 0)
    b.op(llvm.CallOp("GOMP_parallel", b.value(llvm.AddressOfOp(part, PTR)), data,
                     b.value(arith.TruncIOp(threads, i32)), b.const(0, i32)))


LOGS = "recir_gemm_tn.logs"
SEGMENT = 5  # a segment's i64 fields: A, lda, B, ldb, k
LOGS_FIELDS = 8  # m, n, C, ldc, the segments, their count, the grid's rows and columns


def logs_part_function(target: Target) -> llvm.FuncOp:
    """`recir_gemm_tn.logs.part(data)`: this thread's block of C plus
    A^T B of every segment in turn (the tn kernel, accumulating)."""
    function, b, (data,) = new_function(f"{LOGS}.part", [PTR])
    m, n, c, ldc, segments, count, across, down = (
        b.load(b.offset(data, i, i64), 0, PTR if i in (2, 4) else i64)
        for i in range(LOGS_FIELDS))
    rows, cols, some = thread_block(b, "tn", target, m, n, across, down)
    b.when(some, lambda e: add_segments(e, segments, count, [m, n, c, ldc], rows, cols))
    b.op(llvm.ReturnOp())
    return function


def add_segments(b: Emitter, segments: SSAValue, count: SSAValue, fields: list[SSAValue],
                 rows: tuple[SSAValue, SSAValue], cols: tuple[SSAValue, SSAValue]) -> None:
    """C's block of `rows` by `cols` += A^T B of each segment, in order."""
    m, n, c, ldc = fields

    def one(e: Emitter, s: SSAValue, _: Sequence[SSAValue]) -> list[SSAValue]:
        at = e.mul(s, SEGMENT)
        a, lda, bm, ldb, k = (e.load(e.offset(segments, e.add(at, i), i64), 0,
                                     PTR if i in (0, 2) else i64) for i in range(SEGMENT))
        call(e, "recir_gemm_tn", *block(e, "tn", [m, n, k, a, lda, bm, ldb, c, ldc, e.i64(1)],
                                        rows, cols))
        return []

    b.loop(count, one)


def logs_team_function(target: Target) -> llvm.FuncOp:
    """`recir_gemm_tn.logs(m, n, C, ldc, segments, count, k, threads,
    min_work)`: C (m x n) += A^T B summed over `count` segments (i64[count]
    [SEGMENT]: a log's rows of dY and of X, k rows in all): each thread of a
    team its block of C through every segment, so C is read and written
    once, not once a segment (a thread's log each); on one thread below
    `min_work` multiply-adds. Each element's sums run in the segments' order
    on one thread: one thread count gives the same bits on every call."""
    function, b, args = new_function(LOGS, [i64, i64, PTR, i64, PTR, i64, i64, i64, i64])
    m, n, c, ldc, segments, count, k, threads, min_work = args
    whole = ((b.i64(0), m), (b.i64(0), n))
    b.when(team_pays(b, "tn", target, m, n, k, threads, min_work),
           lambda e: start_team(e, "tn", target, f"{LOGS}.part", args[:6], threads),
           lambda e: add_segments(e, segments, count, [m, n, c, ldc], *whole))
    b.op(llvm.ReturnOp())
    return function


def declare_team_in(module: ModuleOp, layout: str) -> str:
    """`recir_gemm_<layout>.team` declared in `module` (once), and the name
    to call: its code is the host's team object (`team_module`)."""
    gemm_kernels.declare_in(module, layout)
    return gemm_kernels.declare_linked(module, team_name(layout),
                                       [*gemm_kernels.SIGNATURE, i64, i64], gemm_kernels.TEAMS)


def team_name(layout: str) -> str:
    return f"recir_gemm_{layout}.team"


def team_module(layouts: Sequence[str], target: Target | None = None) -> ModuleOp:
    """The team forms of the layouts' kernels, with the OpenMP functions
    they call (the kernels themselves declared: the kernel object's)."""
    target = target or host_target()
    module = ModuleOp([declare(*d) for d in DECLARATIONS])
    for layout in layouts:
        gemm_kernels.declare_in(module, layout)
        module.body.blocks[0].add_ops([lower_to_llvm(part_function(layout, target)),
                                       lower_to_llvm(team_function(layout, target))])
    names = {team_name(layout) for layout in layouts}
    if "tn" in layouts:  # a weight gradient's logs, added by one team (`outer_logs`)
        module.body.blocks[0].add_ops([lower_to_llvm(logs_part_function(target)),
                                       lower_to_llvm(logs_team_function(target))])
        names.add(LOGS)
    for op in module.ops:
        if isinstance(op, llvm.FuncOp) and op.sym_name.data in names:
            op.linkage = llvm.LinkageAttr("external")
    return module
