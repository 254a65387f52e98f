"""Loop kernels for the `adjoint` ops, merged into convert-tmath-to-loops' table.

Products are written as axpy loops over rows (unit stride innermost), so
LLVM vectorizes them like the forward kernels; accumulation kernels write
through the argument's pointer and return nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from recir.dialects import adjoint, tmath
from recir.passes.loop_builder import Emitter
from recir.passes.tmath_kernels import (
    Kernel,
    allocating,
    axpy,
    checked,
    each_vector,
    elementwise,
    row_size,
    rows_dotted,
    size,
    zero_fill,
)

Accumulate = Callable[[Emitter, Operation, Sequence[SSAValue]], None]


def vecmat(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    dy, w, out = args
    rows, cols = tmath.shape_of(op.operands[1])
    zero_fill(b, out, cols)

    b.each(rows, lambda inner, r: axpy(inner, out, inner.load(dy, r),
                                       inner.offset(w, inner.mul(r, cols)), cols))


def transpose(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    source, out = args
    rows, cols = tmath.shape_of(op.operands[0])

    b.each(rows, lambda bi, i: bi.each(cols, lambda bj, j: bj.store(
        bj.load(source, bj.add(bj.mul(i, cols), j)), out, bj.add(bj.mul(j, rows), i))))


def pad(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    assert isinstance(op, adjoint.PadOp)
    source, out = args
    zero_fill(b, out, size(op.result))
    start = op.offset.value.data * row_size(op.result)
    b.copy(b.offset(out, start), source, size(op.input))


def onehot(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    index, scale, out = args
    n = size(op.results[0])
    zero_fill(b, out, n)
    b.store(scale, out, checked(b, op, index, n))


def bilinear_grad(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    """Σ_k dr[k] V[k] y (lhs: V's vectors dotted with y as one matrix,
    `rows_dotted`, as the forward does, then a slab per k scaled in) or
    Σ_k dr[k] V[k]ᵀ x (rhs), row by row."""
    depth, rows, cols = tmath.shape_of(op.operands[0])
    v, dr, other, out = args
    lhs = isinstance(op, adjoint.BilinearLhsOp)
    zero_fill(b, out, rows if lhs else cols)
    if lhs:
        slabs = rows_dotted(b, v, other, depth * rows, cols)
        b.each(depth, lambda bk, k: axpy(bk, out, bk.load(dr, k),
                                         bk.offset(slabs, bk.mul(k, rows)), rows))
        return

    def term(bi: Emitter, k: SSAValue, i: SSAValue, start: SSAValue) -> None:
        scale = bi.value(arith.MulfOp(bi.load(dr, k), bi.load(other, i)))
        axpy(bi, out, scale, start, cols)

    each_vector(b, v, (depth, rows, cols), term)


def accumulate(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    axpy(b, args[0], b.const(1.0, f32), args[1], size(op.operands[0]))


def accumulate_outer(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    acc, lhs, rhs = args
    rows, cols = tmath.shape_of(op.operands[0])

    b.each(rows, lambda inner, r: axpy(inner, inner.offset(acc, inner.mul(r, cols)),
                                       inner.load(lhs, r), rhs, cols))


def accumulate_row(b: Emitter, op: Operation, args: Sequence[SSAValue],
                   locked: bool = False, length: SSAValue | None = None) -> None:
    """acc[index] += value; `length`: the table's rows where they are many."""
    acc, index, value = args
    rows, cols = tmath.shape_of(op.operands[0])[0], size(op.operands[2])
    row = checked(b, op, index, rows if length is None else length)
    if locked:
        b.op(adjoint.LockRowOp(row))
    axpy(b, b.offset(acc, b.mul(row, cols)), b.const(1.0, f32), value, cols)
    if locked:
        b.op(adjoint.UnlockRowOp(row))


def accumulate_bilinear(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    acc, dr, x, y = args
    cols = tmath.shape_of(op.operands[0])[2]
    each_vector(b, acc, tmath.shape_of(op.operands[0]), lambda bi, k, i, start: axpy(
        bi, start, bi.value(arith.MulfOp(bi.load(dr, k), bi.load(x, i))), y, cols))


ADJOINT_INTO: dict[type[Operation], Kernel] = {
    # relu_grad is elementwise: its scalar body is in tmath_kernels.SCALAR
    adjoint.ReluGradOp: elementwise,
    adjoint.VecmatOp: vecmat,
    adjoint.TransposeOp: transpose,
    adjoint.PadOp: pad,
    adjoint.OnehotOp: onehot,
    adjoint.BilinearLhsOp: bilinear_grad,
    adjoint.BilinearRhsOp: bilinear_grad,
}
ADJOINT_KERNELS: dict[type[Operation], Kernel | Accumulate] = {
    **{op: allocating(into) for op, into in ADJOINT_INTO.items()},
    adjoint.AccumulateOp: accumulate,
    adjoint.AccumulateOuterOp: accumulate_outer,
    adjoint.AccumulateRowOp: accumulate_row,
    adjoint.AccumulateBilinearOp: accumulate_bilinear,
}
