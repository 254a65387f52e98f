"""Loop kernels for the `frontier` ops inside the batched functions (see `row_lowering.py`).

Row numbers and tree ids read at run time are checked before any read they
address (`checked`: one unsigned compare, so a negative index fails too);
`partition` writes at most its input's row count, which is what its outputs
are allocated for, and keeps the counts it found.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import i1, i8, i32, i64
from xdsl.ir import Operation, SSAValue

from recir.dialects import frontier
from recir.passes.loop_builder import Emitter
from recir.passes.row_kernels import RowKernel, per_row
from recir.passes.rows import Gathered, Lowered, RowEmitter, Rows, row_at
from recir.passes.tmath_kernels import checked


def take(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """result[i] = source[rows[i]]."""
    source, index = args
    assert isinstance(source, Rows)
    assert isinstance(index, Rows)
    out = b.rows(index.count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        at = checked(inner, op, inner.load(index.data, r, i32), source.count)
        inner.move(row_at(inner, out, r), row_at(inner, source, at), out.width, out.elem)

    b.each(index.count, each)
    return out


def take_in_place(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Gathered:
    """`take` as a view its one reader follows: every row number checked
    here, before any row is read, and no rows copied."""
    source, index = args
    assert isinstance(source, Rows) and not isinstance(source, Gathered)
    assert isinstance(index, Rows)

    def each(inner: Emitter, r: SSAValue) -> None:
        checked(inner, op, inner.load(index.data, r, i32), source.count)

    b.each(index.count, each)
    return Gathered(index.count, source.data, source.width, source.stride, source.elem,
                    index.data)


def partition(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> tuple[Rows, Rows]:
    """The rows where the predicate holds and where it does not, ascending:
    both written branch-free, each at its own count."""
    predicate = args[0]
    assert isinstance(predicate, Rows)
    typ = op.results[0].type
    taken, others = b.rows(predicate.count, typ), b.rows(predicate.count, typ)

    def each(inner: Emitter, r: SSAValue, counts: Sequence[SSAValue]) -> Sequence[SSAValue]:
        row = inner.value(arith.TruncIOp(r, i32))
        inner.store(row, taken.data, counts[0])
        inner.store(row, others.data, counts[1])
        held = inner.value(arith.ExtUIOp(inner.value(arith.CmpiOp(
            inner.load(predicate.data, r, i8), inner.const(0, i8), "ne")), i64))
        return (inner.add(counts[0], held),
                inner.add(counts[1], inner.value(arith.SubiOp(inner.i64(1), held))))

    found = b.loop(predicate.count, each, [b.i64(0), b.i64(0)])
    return (Rows(found[0], taken.data, 1, 1, taken.elem),
            Rows(found[1], others.data, 1, 1, others.elem))


def merge(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """The inverse of partition: each side's rows to its row numbers. Where
    one side is every row in order (a height of leaves only, or of inner
    nodes only: every height of a tree), the result is that side's rows
    themselves, not a copy."""
    lhs, lhs_rows, rhs, rhs_rows = args
    assert all(isinstance(a, Rows) for a in args)
    b.same_count(op, [lhs, lhs_rows])  # type: ignore[list-item]
    b.same_count(op, [rhs, rhs_rows])  # type: ignore[list-item]
    total = b.add(lhs.count, rhs.count)  # type: ignore[union-attr]
    out = b.rows(total, op.results[0].type)
    sides = ((lhs, lhs_rows), (rhs, rhs_rows))

    def copies(e: Emitter) -> None:
        for side, numbers in sides:
            def each(inner: Emitter, r: SSAValue, side=side, numbers=numbers) -> None:
                at = checked(inner, op, inner.load(numbers.data, r, i32), total)
                inner.move(row_at(inner, out, at), row_at(inner, side, r), out.width, out.elem)

            e.each(side.count, each)  # type: ignore[union-attr]

    if any(side.stride != side.width for side, _ in sides):  # type: ignore[union-attr]
        copies(b)
        return out
    whole = [b.binary(arith.AndIOp, b.compare("eq", side.count, total),  # type: ignore
                      in_order(b, numbers)) for side, numbers in sides]  # type: ignore
    b.when(b.binary(arith.OrIOp, *whole), lambda _: None, copies)
    data = b.value(arith.SelectOp(whole[0], lhs.data, b.value(  # type: ignore[union-attr]
        arith.SelectOp(whole[1], rhs.data, out.data))))  # type: ignore[union-attr]
    return Rows(total, data, out.width, out.stride, out.elem)


def in_order(b: Emitter, numbers: Rows) -> SSAValue:
    """Whether `numbers` are 0, 1, ... (an `i1`)."""
    def each(inner: Emitter, r: SSAValue, held: Sequence[SSAValue]) -> Sequence[SSAValue]:
        same = inner.compare("eq", inner.to_i64(inner.load(numbers.data, r, i32)), r)
        return (inner.binary(arith.AndIOp, held[0], same),)

    return b.loop(numbers.count, each, [b.const(1, i1)])[0]


def broadcast(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """A uniform scalar or tensor as a row (`per_row`: every row of one as
    long as `like`); an `i1` is stored as a byte."""
    value = args[0]
    return b.value(arith.ExtUIOp(value, i8)) if value.type == i1 else value


def compare(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """One row's `arith.cmpi`/`cmpf` (`per_row`); the `i1` is stored as a byte."""
    assert isinstance(op, frontier.CmpiOp | frontier.CmpfOp)
    make = arith.CmpiOp if isinstance(op, frontier.CmpiOp) else arith.CmpfOp
    return b.value(arith.ExtUIOp(b.value(make(*args, op.predicate.value.data)), i8))


def tree_span(b: Emitter, op: Operation, offsets: Rows, tree: Rows,
              r: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(start, length) of row r's tree in a ragged array, its id checked."""
    trees = b.value(arith.MaxSIOp(b.value(arith.SubiOp(offsets.count, b.i64(1))),
                                  b.i64(0)))  # no offsets: no tree
    t = checked(b, op, b.load(tree.data, r, i32), trees)
    start = b.to_i64(b.load(offsets.data, t, i32))
    end = b.to_i64(b.load(offsets.data, b.add(t, 1), i32))
    return start, b.value(arith.SubiOp(end, start))


def extract_ragged(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """values[offsets[tree] + index] per row: the index checked against its
    tree's length, and the sum against the flat array's (offsets may be bad)."""
    values, offsets, tree, index = args
    assert isinstance(values, Rows)
    assert isinstance(offsets, Rows)
    assert isinstance(tree, Rows)
    assert isinstance(index, Rows)
    count = b.same_count(op, [tree, index])
    out = b.rows(count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        start, length = tree_span(inner, op, offsets, tree, r)
        within = checked(inner, op, inner.load(index.data, r, i32), length)
        at = checked(inner, op, inner.add(start, within), values.count)
        inner.store(inner.load(values.data, at, out.elem), out.data, r)

    b.each(count, each)
    return out


def size_ragged(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    offsets, tree = args
    assert isinstance(offsets, Rows)
    assert isinstance(tree, Rows)
    out = b.rows(tree.count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        _, length = tree_span(inner, op, offsets, tree, r)
        inner.store(inner.value(arith.TruncIOp(length, i32)), out.data, r)

    b.each(tree.count, each)
    return out


FRONTIER_KERNELS: dict[type[Operation], RowKernel] = {
    frontier.TakeOp: take,
    frontier.PartitionOp: partition,
    frontier.MergeOp: merge,
    frontier.BroadcastOp: per_row(broadcast),
    frontier.CmpiOp: per_row(compare),
    frontier.CmpfOp: per_row(compare),
    frontier.ExtractRaggedOp: extract_ragged,
    frontier.SizeRaggedOp: size_ragged,
}
