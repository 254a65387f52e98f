"""Loop kernels for the row forms of `tmath` and `arith` ops (see `row_lowering.py`).

Each op's per-invocation meaning is applied to every row; a uniform operand
(a parameter: a static buffer) is the same for every row. A kernel gets a
`RowEmitter` before the op and the operands lowered (`Rows`, buffers,
scalars) and returns the result. The product of a matrix with every row is
emitted in one place, `row_products.row_gemm`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import TensorType, f32, i32
from xdsl.ir import Operation, SSAValue

from recir.dialects import tmath
from recir.passes.loop_builder import REASSOC, Emitter
from recir.passes.row_products import bilinear, each_row_on_team, matvec
from recir.passes.rows import (
    Lowered,
    RowEmitter,
    Rows,
    each_row,
    row_at,
    rows_of,
    storage,
)
from recir.passes.tmath_kernels import (
    SCALAR,
    checked,
    fused_elements,
    maximum,
    reduce,
    sum_exp_shifted,
)

RowKernel = Callable[[RowEmitter, Operation, Sequence[Lowered]], Lowered | tuple[Lowered, ...]]

ARITH_ROWS = (arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp,
              arith.XOrIOp, arith.MaxSIOp, arith.MinSIOp, arith.AddfOp, arith.SubfOp,
              arith.MulfOp, arith.DivfOp, arith.NegfOp)


def copy_row(b: Emitter, dst: SSAValue, src: SSAValue, width: int, elem=f32) -> None:
    b.move(dst, src, width, elem)


def elem_of(value: SSAValue) -> object:
    typ = value.type
    return storage(typ.element_type if isinstance(typ, TensorType) else typ)


def elementwise(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """One loop over the rows (split on the emitter's team where it pays),
    one over each row's elements."""
    count = b.same_count(op, rows_of(args))
    out = b.rows(count, op.results[0].type)
    elems = [elem_of(v) for v in op.operands]
    scalar = SCALAR.get(type(op))

    def row(inner: Emitter, r: SSAValue, values: Sequence[Lowered]) -> None:
        sources = [row_at(inner, a, r) for a in values[:-1]]
        target = row_at(inner, values[-1], r)

        def element(bj: Emitter, j: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
            values = [bj.load(s, j, e) for s, e in zip(sources, elems)]
            result = scalar(bj, values) if scalar else bj.value(type(op)(*values))
            bj.store(result, target, j)
            return ()

        inner.loop(out.width, element)

    each_row_on_team(b, op, count, out.width, [*args, out], row)
    return out


def fused(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> tuple[Rows, ...]:
    """`tmath.fused` on every element of every row: one pass over the rows
    for the whole elementwise chain, its rows split on the emitter's team
    where the chain's work (rows x width x ops) pays for one."""
    assert isinstance(op, tmath.FusedOp)
    count = b.same_count(op, rows_of(args))
    outs = [b.rows(count, r.type) for r in op.outputs]
    body = op.body.blocks[0]

    def row(inner: Emitter, r: SSAValue, values: Sequence[Lowered]) -> None:
        sources = [row_at(inner, a, r) for a in values[:len(args)]]
        targets = [row_at(inner, o, r) for o in values[len(args):]]
        inner.loop(outs[0].width, fused_elements(body, sources, targets))

    ops = sum(1 for inner_op in body.ops if not isinstance(inner_op, tmath.YieldOp))
    each_row_on_team(b, op, count, outs[0].width * max(ops, 1), [*args, *outs], row)
    return tuple(outs)


def concat(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    parts = rows_of(args)
    assert len(parts) == len(args), "concat over rows takes rows only"
    count = b.same_count(op, parts)
    out = b.rows(count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue, values: Sequence[Lowered]) -> None:
        target, start = row_at(inner, values[-1], r), 0
        for part in values[:-1]:
            assert isinstance(part, Rows)
            copy_row(inner, inner.offset(target, start), row_at(inner, part, r), part.width)
            start += part.width

    each_row_on_team(b, op, count, out.width, [*parts, out], each)
    return out


def slice_view(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """Each row's slice along its first axis, as a view with the input's stride."""
    assert isinstance(op, tmath.SliceOp)
    source = args[0]
    assert isinstance(source, Rows)
    inner_shape = tmath.shape_of(op.input)[2:]
    inner = 1
    for d in inner_shape:
        inner *= d
    result_width = _width(op.results[0].type)
    start = b.offset(source.data, op.offset.value.data * inner, source.elem)
    return Rows(source.count, start, result_width, source.stride, source.elem)


def _width(typ: object) -> int:
    assert isinstance(typ, TensorType)
    width = 1
    for d in typ.get_shape()[1:]:
        width *= d
    return width


def gather(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """Row r is the table's row index[r], checked."""
    table, index = args
    assert isinstance(index, Rows)
    shape = tmath.shape_of(op.operands[0])
    out = b.rows(index.count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        at = checked(inner, op, inner.load(index.data, r, i32), shape[0])
        source = inner.offset(table, inner.mul(at, out.width))
        copy_row(inner, row_at(inner, out, r), source, out.width)

    each_row(b, index.count, each)
    return out


def extract(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Lowered:
    """A shared vector (static, or a dynamic array) read at each row's index,
    or a dynamic array read at one index."""
    array, index = args
    elem = elem_of(op.results[0])
    shape = tmath.shape_of(op.operands[0])
    length: SSAValue | int = array.count if isinstance(array, Rows) else shape[0]
    data = array.data if isinstance(array, Rows) else array
    if not isinstance(index, Rows):
        return b.load(data, checked(b, op, index, length), elem)
    out = b.rows(index.count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        at = checked(inner, op, inner.load(index.data, r, i32), length)
        inner.store(inner.load(data, at, elem), out.data, r)

    each_row(b, index.count, each)
    return out


def size_of(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> SSAValue:
    array = args[0]
    assert isinstance(array, Rows)
    return b.value(arith.TruncIOp(array.count, op.results[0].type))


def per_row_scalar(b: RowEmitter, op: Operation, x: Rows,
                   body: Callable[[Emitter, SSAValue], SSAValue]) -> Rows:
    """A rows result of one scalar per row, `body` of each row's data."""
    out = b.rows(x.count, op.results[0].type)
    each_row(b, x.count, lambda inner, r: inner.store(body(inner, row_at(inner, x, r)),
                                                     out.data, r))
    return out


def sum_rows(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    x = args[0]
    assert isinstance(x, Rows)
    return per_row_scalar(b, op, x, lambda inner, row: reduce(
        inner, row, x.width, inner.const(0.0, f32),
        lambda bi, acc, v: bi.value(arith.AddfOp(acc, v, REASSOC))))


def max_rows(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    x = args[0]
    assert isinstance(x, Rows)
    return per_row_scalar(b, op, x, lambda inner, row: maximum(inner, row, x.width))


def argmax_rows(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """The first index of each row's largest element."""
    x = args[0]
    assert isinstance(x, Rows)

    def best(inner: Emitter, row: SSAValue) -> SSAValue:
        def body(bi: Emitter, i: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
            v = bi.load(row, i)
            better = bi.value(arith.CmpfOp(v, acc[0], "ogt"))
            return (bi.value(arith.SelectOp(better, v, acc[0])),
                    bi.value(arith.SelectOp(better, i, acc[1])))

        found = inner.loop(x.width, body, [inner.load(row, 0), inner.i64(0)])[1]
        return inner.value(arith.TruncIOp(found, i32))

    return per_row_scalar(b, op, x, best)


def softmax_rows(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    x = args[0]
    assert isinstance(x, Rows)
    out = b.rows(x.count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        row, target = row_at(inner, x, r), row_at(inner, out, r)
        shift = maximum(inner, row, x.width)
        scale = inner.value(arith.DivfOp(inner.const(1.0, f32),
                                         sum_exp_shifted(inner, row, x.width, shift)))

        def element(bj: Emitter, j: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
            e = bj.value(math.ExpOp(bj.value(arith.SubfOp(bj.load(row, j), shift))))
            bj.store(bj.value(arith.MulfOp(e, scale)), target, j)
            return ()

        inner.loop(x.width, element)

    each_row(b, x.count, each)
    return out


def softmax_xent_rows(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """log(sum exp(x - m)) - (x[label] - m) for each row and its label."""
    x, label = args
    assert isinstance(x, Rows)
    count = b.same_count(op, rows_of(args))
    out = b.rows(count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        row = row_at(inner, x, r)
        at = inner.load(label.data, r, i32) if isinstance(label, Rows) else label
        picked = inner.load(row, checked(inner, op, at, x.width))
        shift = maximum(inner, row, x.width)
        log_total = inner.value(math.LogOp(sum_exp_shifted(inner, row, x.width, shift)))
        loss = inner.value(arith.SubfOp(log_total, inner.value(arith.SubfOp(picked, shift))))
        inner.store(loss, out.data, r)

    each_row(b, count, each)
    return out


def fill_rows(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    value = args[0]
    assert isinstance(value, Rows)
    out = b.rows(value.count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        v, target = inner.load(value.data, r), row_at(inner, out, r)
        inner.loop(out.width, lambda bj, j, _: (bj.store(v, target, j), ())[1])

    each_row(b, value.count, each)
    return out


ROW_KERNELS: dict[type[Operation], RowKernel] = {
    **{op: elementwise for op in SCALAR},
    **{op: elementwise for op in ARITH_ROWS},
    tmath.FusedOp: fused,
    tmath.MatvecOp: matvec,
    tmath.BilinearOp: bilinear,
    tmath.ConcatOp: concat,
    tmath.SliceOp: slice_view,
    tmath.GatherOp: gather,
    tmath.ExtractOp: extract,
    tmath.SizeOp: size_of,
    tmath.SumOp: sum_rows,
    tmath.MaxOp: max_rows,
    tmath.ArgmaxOp: argmax_rows,
    tmath.SoftmaxOp: softmax_rows,
    tmath.SoftmaxCrossEntropyOp: softmax_xent_rows,
    tmath.FillOp: fill_rows,
}
