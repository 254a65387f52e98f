"""Loop kernels for the `adjoint` ops whose row form is not `row_kernels.per_row`'s.

`synthesize-gradients` on `@f__post` gives `@f__post_bwd`, straight-line code
over rows (see `row_lowering.py`). A gradient into a uniform buffer (a
parameter) is the sum over the rows: `accumulate` adds every row (its kernel
on each row, `per_row`), `accumulate_outer` adds the sum of the rows' outer
products (dY^T X, a product over rows: `row_products.row_gemm`, through a
height loop's log of them where it keeps one: `row_logs`), `accumulate_row`
scatter-adds rows at checked row numbers into a table (a parameter's, or a
rows argument's: the children's result gradients). Accumulations write in
place and return None. Where the function is lowered for a team, its heights'
rows may be split across one (`schedule_loops`): a parameter's table is then
shared by the threads, and each row is added under its row lock
(`adjoint.lock_row`, as the recursive path's embedding rows); the children's
rows are each one invocation's, and a dense parameter gradient is each
thread's own copy.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import TensorType, f32, i32
from xdsl.ir import Operation, SSAValue

from recir.dialects import adjoint, tmath
from recir.passes.adjoint_kernels import accumulate_row as static_accumulate_row
from recir.passes.loop_builder import Emitter
from recir.passes.row_kernels import ROW_KERNELS, RowKernel, rows_of
from recir.passes.row_logs import logged_outer
from recir.passes.row_products import each_row_on_team, row_gemm, slab_rows
from recir.passes.rows import Lowered, RowEmitter, Rows, plain_rows, row_at
from recir.passes.tmath_kernels import axpy, enclosing_module, zero_fill


def vecmat(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """out[r] = dy[r] . W for every row: dY W."""
    dy, w = args
    assert isinstance(dy, Rows)
    rows, cols = tmath.shape_of(op.operands[1])
    out = b.rows(dy.count, op.results[0].type)
    row_gemm(b, op, "nn", dy.count, cols, rows, (dy.data, dy.stride), (w, cols),
             (out.data, out.stride))
    return out


def is_sum(fused: tmath.FusedOp) -> bool:
    """The body adds all its arguments, each once, and yields the total."""
    block = fused.body.block
    *adds, ret = list(block.ops)
    if not isinstance(ret, tmath.YieldOp) or len(ret.operands) != 1 or len(fused.outputs) != 1:
        return False
    if len(adds) != len(block.args) - 1 or not all(isinstance(a, tmath.AddOp) for a in adds):
        return False
    values = [*block.args, *(a.results[0] for a in adds)]
    return all(v.has_one_use() for v in values) and (
        ret.operands[0] is values[-1] if adds else True)


def pad_sums(function: Operation) -> dict[Operation, list[adjoint.PadOp]]:
    """Each sum (`tmath.add`, or a `tmath.fused` of adds) of `adjoint.pad`s
    (their only use) whose ranges do not overlap (a slice's gradients:
    `sum_of_pads` writes them side by side), with its pads."""
    found: dict[Operation, list[adjoint.PadOp]] = {}
    for op in function.walk():
        if isinstance(op, tmath.AddOp) and op.operands[0] is not op.operands[1]:
            pads = [v.owner for v in op.operands]
        elif isinstance(op, tmath.FusedOp) and is_sum(op):
            pads = [v.owner for v in op.inputs]
        else:
            continue
        if not all(isinstance(p, adjoint.PadOp) and p.result.has_one_use() for p in pads):
            continue
        spans = sorted((p.offset.value.data, p.offset.value.data + tmath.shape_of(
            p.operands[0])[1]) for p in pads)  # type: ignore[union-attr]
        if all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])):
            found[op] = pads  # type: ignore[assignment]
    return found


def sum_of_pads(b: RowEmitter, op: Operation, pads: Sequence[adjoint.PadOp],
                sources: Sequence[Lowered]) -> Rows:
    """The pads' sum without the pads: each source row copied to its offset,
    the columns none covers zeroed."""
    count = b.same_count(op, rows_of(sources))
    out = b.rows(count, op.results[0].type)
    shape = tmath.shape_of(op.results[0])[1:]
    unit = out.width // shape[0]
    spans = []
    for pad, source in zip(pads, sources, strict=True):
        assert isinstance(source, Rows)
        start = pad.offset.value.data * unit
        spans.append((start, start + source.width))
        b.each(count, lambda inner, r, start=start, source=source: inner.move(
            inner.offset(row_at(inner, out, r), start), row_at(inner, source, r), source.width))
    ends = [0, *(end for _, end in sorted(spans))]
    starts = [*(start for start, _ in sorted(spans)), out.width]
    for lo, hi in zip(ends, starts):
        if lo < hi:
            b.each(count, lambda inner, r, lo=lo, hi=hi: zero_fill(
                inner, inner.offset(row_at(inner, out, r), lo), hi - lo))
    return out


def accumulate_outer(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> None:
    acc, lhs, rhs = args
    assert isinstance(lhs, Rows)
    assert isinstance(rhs, Rows)
    assert not isinstance(acc, Rows), "an outer product accumulates into a parameter"
    b.same_count(op, [lhs, rhs])
    rows, cols = tmath.shape_of(op.operands[0])
    logged_outer(b, enclosing_module(op), rows, cols, lhs, rhs, acc)


def accumulate_row(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> None:
    """acc[index[r]] += value[r] (the static kernel on each row), each row
    number checked against the table: a parameter's (on a team, shared by
    its threads: under the row's lock) or a rows argument's."""
    acc, index, value = args
    assert isinstance(index, Rows)
    assert isinstance(value, Rows)
    b.same_count(op, [index, value])
    table, length = (acc.data, acc.count) if isinstance(acc, Rows) else (acc, None)
    assert not isinstance(acc, Rows) or acc.stride == acc.width, "a table is contiguous"
    shared = not isinstance(acc, Rows) and b.team.threads > 1
    b.each(index.count, lambda inner, r: static_accumulate_row(
        inner, op, [table, inner.load(index.data, r, i32), row_at(inner, value, r)], shared,
        length))


def scaled_by_slab(b: RowEmitter, op: Operation, dr: Rows, x: Rows) -> Rows:
    """z[r, k * rows + i] = dr[r, k] x[r, i]: each row's outer product, the
    rows' factor of a bilinear form's right gradient and of V's."""
    depth, rows, _ = tmath.shape_of(op.operands[0])
    z = b.rows(dr.count, TensorType(f32, [-1, depth * rows]))

    def row(e: Emitter, r: SSAValue, values: Sequence[Lowered]) -> None:
        at, scale, xr = (row_at(e, value, r) for value in values)

        def slab(ek: Emitter, k: SSAValue) -> None:
            to, by = ek.offset(at, ek.mul(k, rows)), ek.load(scale, k)
            ek.each(rows, lambda ei, i: ei.store(
                ei.value(arith.MulfOp(by, ei.load(xr, i))), to, i))

        e.each(depth, slab)

    each_row_on_team(b, op, dr.count, depth * rows, [z, dr, x], row)
    return z


def bilinear_lhs(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Lowered:
    """dx[r] = Σ_k dr[r, k] V[k] y[r]: every y times V's rows as one
    product (as the forward's), then each row's slabs scaled in."""
    v, dr, y = args
    if not plain_rows(dr, y):
        return BY_ROW[type(op)](b, op, args)  # type: ignore[return-value]
    depth, rows, _ = tmath.shape_of(op.operands[0])

    def row(e: Emitter, at: SSAValue, slabs: SSAValue, scale: SSAValue) -> None:
        zero_fill(e, at, rows)
        e.each(depth, lambda ek, k: axpy(ek, at, ek.load(scale, k),
                                         ek.offset(slabs, ek.mul(k, rows)), rows))

    return slab_rows(b, op, v, y, dr, row)


def bilinear_rhs(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Lowered:
    """dy[r] = Σ_k dr[r, k] V[k]ᵀ x[r] = z[r] M (M: V's rows): one product."""
    v, dr, x = args
    if not plain_rows(dr, x):
        return BY_ROW[type(op)](b, op, args)  # type: ignore[return-value]
    depth, rows, cols = tmath.shape_of(op.operands[0])
    b.same_count(op, [dr, x])
    z = scaled_by_slab(b, op, dr, x)
    out = b.rows(z.count, op.results[0].type)
    row_gemm(b, op, "nn", z.count, cols, depth * rows, (z.data, z.stride), (v, cols),
             (out.data, out.stride))
    return out


def accumulate_bilinear(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> None:
    """dV += Σ_r dr[r] ⊗ x[r] ⊗ y[r] = zᵀ Y: one product into the
    parameter's gradient (on a team, each thread's own copy)."""
    acc, dr, x, y = args
    if isinstance(acc, Rows) or not plain_rows(dr, x, y):
        BY_ROW[type(op)](b, op, args)
        return
    depth, rows, cols = tmath.shape_of(op.operands[0])
    b.same_count(op, [dr, x, y])
    z = scaled_by_slab(b, op, dr, x)
    row_gemm(b, op, "tn", depth * rows, cols, z.count, (z.data, z.stride), (y.data, y.stride),
             (acc, cols), accumulate=True)


# the per-row forms, where an operand is uniform or gathered
BY_ROW = {kind: ROW_KERNELS[kind] for kind in (
    adjoint.BilinearLhsOp, adjoint.BilinearRhsOp, adjoint.AccumulateBilinearOp)}

ADJOINT_ROW_KERNELS: dict[type[Operation], RowKernel] = {
    adjoint.VecmatOp: vecmat,
    adjoint.AccumulateOuterOp: accumulate_outer,  # type: ignore[dict-item]
    adjoint.AccumulateRowOp: accumulate_row,  # type: ignore[dict-item]
    adjoint.BilinearLhsOp: bilinear_lhs,
    adjoint.BilinearRhsOp: bilinear_rhs,
    adjoint.AccumulateBilinearOp: accumulate_bilinear,  # type: ignore[dict-item]
}
