"""Matrix products over rows split across an OpenMP team.

`recir_gemm_<layout>.team(m, n, k, A, lda, B, ldb, C, ldc, accumulate,
threads, min_work)` is `recir_gemm_<layout>` (`gemm_kernels.py`) on up to
`threads` threads. It calls the kernel itself where the product has fewer
than `min_work` multiply-adds (a team's start would cost more than the
threads save: `policy.team_min_work`) or too few tiles for two threads.
Otherwise it starts a libgomp team (`GOMP_parallel`) running
`recir_gemm_<layout>.part`, in which each thread calls the kernel on its own
block of C: whole register tiles of C's rows where there are enough rows for
the team, else of its columns. No two threads write one element of C, so a
weight's gradient dY^T X (tn, accumulated into the parameter's gradient)
needs no reduction, and each element is computed by one kernel call whose
shape depends only on (m, n, k, threads): one thread count gives the same
bits on every call.

The team's threads need no native context: the kernels read and write only
their operands, and cannot fail.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i32, i64
from xdsl.ir import Operation, SSAValue

from recir.passes.convert_invoke_to_gomp import declare
from recir.passes.gemm_kernels import SIGNATURE, declare_in
from recir.passes.gemm_target import Target, host_target
from recir.passes.llvm_functions import call, ceil_div, lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter

FIELDS = 11  # m, n, k, A, lda, B, ldb, C, ldc, accumulate, by_rows: 8 bytes each
POINTERS = (3, 5, 7)  # the fields that hold A, B and C
DECLARATIONS = (("GOMP_parallel", [PTR, PTR, i32, i32], None),
                ("omp_get_thread_num", [], i32), ("omp_get_num_threads", [], i32))


@dataclass(frozen=True)
class RowTeam:
    """How a function's products over rows are run: on up to `threads`
    threads where they have at least `min_work` multiply-adds."""

    threads: int = 1
    min_work: int = -1


SERIAL = RowTeam()


def grains(layout: str, target: Target) -> tuple[int, int]:
    """(rows, columns) of C a thread's block is a multiple of: the kernel's
    register tile, so that splitting leaves no thread a partial tile it
    would not have had anyway."""
    if layout == "nt":
        rows, cols = target.nt_tile
        return rows, max(cols, target.lanes * target.tile[1])
    return target.tile[0], target.lanes * target.tile[1]


def block(b: Emitter, layout: str, fields: list[SSAValue], start: SSAValue,
          length: SSAValue, by_rows: SSAValue) -> list[SSAValue]:
    """The kernel's arguments for C's rows (or columns) [start, start + length)."""
    m, n, k, a, lda, bm, ldb, c, ldc, acc = fields

    def pick(rows: SSAValue, cols: SSAValue) -> SSAValue:
        return b.value(arith.SelectOp(by_rows, rows, cols))

    a_step = lda if layout != "tn" else 1  # elements between two rows of op(A)
    b_step = ldb if layout == "nt" else 1  # elements between two columns of op(B)
    zero = b.i64(0)
    a = b.offset(a, pick(b.mul(start, a_step), zero))
    bm = b.offset(bm, pick(zero, b.mul(start, b_step)))
    c = b.offset(c, pick(b.mul(start, ldc), start))
    return [pick(length, m), pick(n, length), k, a, lda, bm, ldb, c, ldc, acc]


def part_function(layout: str, target: Target) -> llvm.FuncOp:
    """`recir_gemm_<layout>.part(data)`, run by each thread of the team:
    the kernel on this thread's block of C, if it has one."""
    kernel = f"recir_gemm_{layout}"
    function, b, (data,) = new_function(f"{kernel}.part", [PTR])
    fields = [b.load(b.offset(data, i, i64), 0, PTR if i in POINTERS else i64)
              for i in range(FIELDS)]
    by_rows = b.compare("ne", fields[-1], 0)
    thread = b.to_i64(b.value(llvm.CallOp("omp_get_thread_num", return_type=i32)))
    team = b.to_i64(b.value(llvm.CallOp("omp_get_num_threads", return_type=i32)))
    row_grain, col_grain = grains(layout, target)
    size = b.value(arith.SelectOp(by_rows, fields[0], fields[1]))
    grain = b.value(arith.SelectOp(by_rows, b.i64(row_grain), b.i64(col_grain)))
    per = b.mul(ceil_div(b, ceil_div(b, size, team), grain), grain)
    start = b.min(b.mul(thread, per), size)
    length = b.sub(b.min(b.add(start, per), size), start)
    args = block(b, layout, fields[:-1], start, length, by_rows)
    b.when(b.compare("sgt", length, 0), lambda e: call(e, kernel, *args))
    b.op(llvm.ReturnOp())
    return function


def team_function(layout: str, target: Target) -> llvm.FuncOp:
    """`recir_gemm_<layout>.team(..., threads, min_work)`: the kernel on
    one thread, or on a team of at most `threads`, one block of C each."""
    kernel = f"recir_gemm_{layout}"
    function, b, args = new_function(f"{kernel}.team", [*SIGNATURE, i64, i64])
    m, n, k, threads, min_work = args[0], args[1], args[2], args[10], args[11]
    row_grain, col_grain = grains(layout, target)
    row_blocks = b.value(arith.DivSIOp(m, b.i64(row_grain)))
    col_blocks = b.value(arith.DivSIOp(n, b.i64(col_grain)))
    most = b.value(arith.MaxSIOp(row_blocks, col_blocks))
    team = b.min(threads, most)
    work = b.mul(b.mul(m, n), k)
    pays = b.value(arith.AndIOp(b.compare("sge", team, 2), b.compare("sge", work, min_work)))

    def on_team(e: Emitter) -> None:
        data = e.alloca(FIELDS, i64)
        for i, value in enumerate([*args[:10], e.value(arith.ExtUIOp(
                e.compare("sge", row_blocks, team), i64))]):
            e.store(value, e.offset(data, i, i64), 0)
        part = e.value(llvm.AddressOfOp(f"{kernel}.part", PTR))
        e.op(llvm.CallOp("GOMP_parallel", part, data,
                         e.value(arith.TruncIOp(team, i32)), e.const(0, i32)))

    b.when(pays, on_team, lambda e: call(e, kernel, *args[:10]))
    b.op(llvm.ReturnOp())
    return function


def declare_team_in(module: ModuleOp, layout: str, target: Target | None = None) -> str:
    """`recir_gemm_<layout>` and its team functions added to `module` (once;
    internal there), with the OpenMP functions they call; the name to call."""
    target = target or host_target()
    declare_in(module, layout, target)
    name = f"recir_gemm_{layout}.team"
    names = {op.sym_name.data for op in module.ops if isinstance(op, llvm.FuncOp)}
    if name in names:
        return name
    made: list[Operation] = [declare(*d) for d in DECLARATIONS if d[0] not in names]
    made += [lower_to_llvm(part_function(layout, target)),
             lower_to_llvm(team_function(layout, target))]
    module.body.blocks[0].add_ops(made)
    return name
