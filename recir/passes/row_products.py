"""Products over rows: a uniform matrix with every row (`matvec`, `bilinear`).

The one place a product over rows is emitted (`row_product`): the forward's
matrix products and, through it, what a faster GEMM kernel would replace.
Register blocks of ROW_BLOCK matrix rows by INPUT_BLOCK input rows give
ROW_BLOCK x INPUT_BLOCK independent sums per loop, each load serving
several (16 of the 32 vector registers AVX-512 has).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from recir.dialects import tmath
from recir.passes.loop_builder import REASSOC, Emitter
from recir.passes.rows import Lowered, RowEmitter, Rows, each_row, row_at, rows_of
from recir.passes.tmath_kernels import ROW_BLOCK, dot, dots

# Rows of the input per block of `row_product`: with ROW_BLOCK matrix rows,
# ROW_BLOCK x INPUT_BLOCK independent sums, each load serving several.
INPUT_BLOCK = 4


def dot_block(b: Emitter, lhs: Sequence[SSAValue], rhs: Sequence[SSAValue],
              n: int) -> list[list[SSAValue]]:
    """sum_i l[i] * r[i] for every pair of `lhs` and `rhs` rows, in one loop."""
    def body(inner: Emitter, i: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
        left = [inner.load(p, i) for p in lhs]
        right = [inner.load(p, i) for p in rhs]
        sums = iter(acc)
        return [inner.value(arith.AddfOp(next(sums), inner.value(
            arith.MulfOp(x, y, REASSOC)), REASSOC)) for x in left for y in right]

    flat = b.loop(n, body, [b.const(0.0, f32)] * (len(lhs) * len(rhs)))
    return [list(flat[k * len(rhs):(k + 1) * len(rhs)]) for k in range(len(lhs))]


def row_product(b: Emitter, matrix: SSAValue, rows: int, cols: int, x: Rows, out: Rows) -> None:
    """out[r] = matrix . x[r] for every row r: the one place a product over
    rows is emitted. Blocks of ROW_BLOCK matrix rows by INPUT_BLOCK input
    rows; the input rows left over take one at a time, as do the matrix's."""
    blocked = rows - rows % ROW_BLOCK
    whole = b.value(arith.SubiOp(x.count, b.value(arith.RemUIOp(x.count, b.i64(INPUT_BLOCK)))))

    def block(bk: Emitter, k: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
        first = bk.mul(k, ROW_BLOCK)
        starts = [bk.offset(matrix, bk.mul(bk.add(first, d), cols)) for d in range(ROW_BLOCK)]

        def group(inner: Emitter, g: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
            r0 = inner.mul(g, INPUT_BLOCK)
            rs = [inner.add(r0, j) for j in range(INPUT_BLOCK)]
            sums = dot_block(inner, starts, [row_at(inner, x, r) for r in rs], cols)
            for j, r in enumerate(rs):
                target = row_at(inner, out, r)
                for d in range(ROW_BLOCK):
                    inner.store(sums[d][j], target, inner.add(first, d))
            return ()

        bk.loop(bk.value(arith.DivUIOp(whole, bk.i64(INPUT_BLOCK))), group)

        def each(inner: Emitter, t: SSAValue) -> None:
            r = inner.add(whole, t)
            target = row_at(inner, out, r)
            for d, total in enumerate(dots(inner, starts, row_at(inner, x, r), cols)):
                inner.store(total, target, inner.add(first, d))

        each_row(bk, bk.value(arith.SubiOp(x.count, whole)), each)
        return ()

    b.loop(blocked // ROW_BLOCK, block)

    def rest(inner: Emitter, r: SSAValue) -> None:
        source, target = row_at(inner, x, r), row_at(inner, out, r)
        for m in range(blocked, rows):
            inner.store(dot(inner, inner.offset(matrix, m * cols), source, cols), target, m)

    if blocked < rows:
        each_row(b, x.count, rest)


def matvec(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    matrix, x = args
    assert isinstance(x, Rows), "a per-row matrix has no row form"
    rows, cols = tmath.shape_of(op.operands[0])
    out = b.rows(x.count, op.results[0].type)
    row_product(b, matrix, rows, cols, x, out)
    return out


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
