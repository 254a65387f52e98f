"""Products over rows: a uniform matrix with every row (`matvec`, `bilinear`).

The one place a product over rows is emitted (`row_gemm`): a call of the
module's generated GEMM kernel (`gemm_kernels.py`, added to the module at
its first use, as tmath.matmul's lowering does). A rows value is a matrix
of `count` rows `stride` elements apart, so the forward's `W x` per row is
X W^T (nt), the backward's `dy W` per row is dY W (nn) and a weight's
gradient, the sum of the rows' outer products, is dY^T X (tn). With
threads (convert-tmath-to-loops{row-threads=T row-team-work=W}), the call is
of the kernel's team form instead (`gemm_teams.py`), which splits C's rows
or columns across a team where the product is large enough to repay one.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import BlockArgument, Operation, SSAValue

from recir.dialects import tmath
from recir.passes import gemm_kernels, gemm_teams
from recir.passes.loop_builder import REASSOC, Emitter
from recir.passes.rows import Lowered, RowEmitter, Rows, each_row, row_at, rows_of
from recir.passes.tmath_kernels import dot, enclosing_module


def row_gemm(b: RowEmitter, op: Operation, layout: str, m: SSAValue | int,
             n: SSAValue | int, k: SSAValue | int, a: tuple[SSAValue, int],
             bm: tuple[SSAValue, int], c: tuple[SSAValue, int], accumulate: bool = False
             ) -> None:
    """C (+)= op(A) op(B) by `recir_gemm_<layout>`, or on the emitter's team
    by `recir_gemm_<layout>.team`: the one place a product over rows is
    emitted. `a`, `bm`, `c` are (data, leading dimension)."""
    args = [b.i64(m), b.i64(n), b.i64(k), a[0], b.i64(a[1]), bm[0], b.i64(bm[1]), c[0],
            b.i64(c[1]), b.i64(int(accumulate))]
    module = enclosing_module(op)
    if b.team.threads < 2:
        b.op(llvm.CallOp(gemm_kernels.declare_in(module, layout), *args))
        return
    name = gemm_teams.declare_team_in(module, layout)
    b.op(llvm.CallOp(name, *args, b.i64(b.team.threads), b.i64(b.team.min_work)))


def row_product(b: RowEmitter, op: Operation, matrix: SSAValue, rows: int, cols: int, x: Rows,
                out: Rows) -> None:
    """out[r] = matrix . x[r] for every row r: X W^T."""
    row_gemm(b, op, "nt", x.count, rows, cols, (x.data, x.stride), (matrix, cols),
             (out.data, out.stride))


def matvec(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    matrix, x = args
    assert isinstance(x, Rows), "a per-row matrix has no row form"
    rows, cols = tmath.shape_of(op.operands[0])
    out = b.rows(x.count, op.results[0].type)
    row_product(b, op, matrix, rows, cols, x, out)
    return out


def matvec_plus(b: RowEmitter, op: Operation, args: Sequence[Lowered], bias: SSAValue) -> Rows:
    """out[r] = matrix . x[r] + bias: the rows start as the bias and the
    product is added into them, so the sum takes no pass of its own."""
    matrix, x = args
    assert isinstance(x, Rows), "a per-row matrix has no row form"
    rows, cols = tmath.shape_of(op.operands[0])
    out = b.rows(x.count, op.results[0].type)
    each_row(b, x.count, lambda inner, r: inner.copy(row_at(inner, out, r), bias, rows))
    row_gemm(b, op, "nt", x.count, rows, cols, (x.data, x.stride), (matrix, cols),
             (out.data, out.stride), accumulate=True)
    return out


def bias_adds(function: Operation) -> dict[Operation, tuple[Operation, SSAValue]]:
    """Each `matvec` over rows whose only use is a `tmath.add` of a uniform
    argument (a bias), with that add and the bias: `matvec_plus` lowers the
    two as one."""
    found: dict[Operation, tuple[Operation, SSAValue]] = {}
    for op in function.walk():
        if not isinstance(op, tmath.MatvecOp) or not op.results[0].has_one_use():
            continue
        add = next(iter(op.results[0].uses)).operation
        if not isinstance(add, tmath.AddOp):
            continue
        bias = add.operands[1] if add.operands[0] is op.results[0] else add.operands[0]
        if bias is not op.results[0] and isinstance(bias, BlockArgument) and isinstance(
                bias.type, TensorType) and bias.type.element_type == f32 and (
                tmath.shape_of(bias) == tmath.shape_of(op.results[0])[1:]):
            found[op] = (add, bias)
    return found


def bilinear(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """r[k] = sum_i x[i] * (V[k, i, :] . y), each row's x and y (or shared)."""
    depth, rows, cols = tmath.shape_of(op.operands[0])
    tensor, x, y = args
    count = b.same_count(op, rows_of(args))
    out = b.rows(count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        xr, yr, target = row_at(inner, x, r), row_at(inner, y, r), row_at(inner, out, r)

        def slab(bk: Emitter, k: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
            def row(bi: Emitter, i: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
                start = bi.offset(tensor, bi.mul(bi.add(bi.mul(k, rows), i), cols))
                term = arith.MulfOp(bi.load(xr, i), dot(bi, start, yr, cols), REASSOC)
                return (bi.value(arith.AddfOp(acc[0], bi.value(term), REASSOC)),)

            bk.store(bk.loop(rows, row, [bk.const(0.0, f32)])[0], target, k)
            return ()

        inner.loop(depth, slab)

    each_row(b, count, each)
    return out
