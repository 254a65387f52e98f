"""VJP_RULES: one vector-Jacobian rule per differentiable op, in a table.

A rule gets an `Emit` (builds ops in the backward), the forward op, the
cotangent of its result and `primal` (a forward value as seen from the
backward), and returns `(operand index, contribution)` pairs. A contribution
is a value, or a lazy product that `synthesize-gradients` either accumulates
straight into a parameter's gradient (`Outer`, `Row`, `Bilinear`: no
materialised outer product, no dense embedding gradient per node) or rejects.
Ops with no float results need no rule; a float op without one is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, TensorType, f32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import RecirError, emit_error
from recir.dialects import adjoint, frontier, tmath
from recir.dialects.row_types import is_rows, row_type, rows_type


@dataclass(frozen=True)
class Outer:
    """d(matrix) += a ⊗ b."""

    a: SSAValue
    b: SSAValue


@dataclass(frozen=True)
class Row:
    """d(table)[index, :] += value. Where `index` is one side of a partition
    (a cond branch's rows of a value from before the cond), `rest` is the
    other side's and `first` whether `index` is the partition's first: a
    value that is not a table takes `scattered` instead."""

    index: SSAValue
    value: SSAValue
    rest: SSAValue | None = None
    first: bool = True

    def scattered(self, e: Emit, row: Attribute, other: Row | None = None) -> SSAValue:
        """The cotangent of every row as rows: `value` at `index`, and at
        `rest` the other side's (`other`: the partition's other side taken
        too, its rows at this one's `rest`) or zeros (`row`'s)."""
        assert self.rest is not None
        rest = other.value if other is not None else e(frontier.BroadcastOp(e.zero(row),
                                                                           self.rest))
        ends = [(self.value, self.index), (rest, self.rest)]
        (lhs, lhs_rows), (rhs, rhs_rows) = ends if self.first else ends[::-1]
        return e(frontier.MergeOp(lhs, lhs_rows, rhs, rhs_rows))


class Sides:
    """The cotangents that are one side of a partition scattered: where the
    other side's follows, the two make one merge instead of two and an add."""

    def __init__(self) -> None:
        self.open: dict[SSAValue, Row] = {}

    def scattered(self, e: Emit, cot: dict[SSAValue, SSAValue], value: SSAValue, c: Row
                  ) -> SSAValue | None:
        """`c` as rows of `value`, to add to its cotangent in `cot`; None
        where it was joined to the other side's there (`cot` updated)."""
        old, row = cot.get(value), row_type(value.type)
        other = self.open.pop(old, None) if old is not None else None
        if other is not None and (other.index, other.rest) == (c.rest, c.index):
            cot[value] = c.scattered(e, row, other)
            return None
        found = c.scattered(e, row)
        if old is None:
            self.open[found] = c
        return found


@dataclass(frozen=True)
class Bilinear:
    """d(V)[k, i, j] += dr[k] x[i] y[j]."""

    dr: SSAValue
    x: SSAValue
    y: SSAValue


@dataclass(frozen=True)
class RowSum:
    """d(uniform value) += Σ_rows value: a value shared by every row of a
    frontier (`frontier.broadcast`)."""

    value: SSAValue


Contribution = SSAValue | Outer | Row | Bilinear | RowSum

# what a model author changes where only a parameter can take a contribution
MADE_MATRIX = ("makes a matrix that is then multiplied (`@`), read by row (`rf.gather`) or "
               "used by `rf.bilinear`, which recir differentiates only on a parameter "
               'itself: apply this op to their result instead (`(p["w"] @ x) * 2`, not '
               '`(p["w"] * 2) @ x`) or make the matrix a parameter of its own')
SAME_AT_EVERY_NODE = ("computes, inside the recursive function, a value that is the same "
                      "at every node (it does not depend on the node), which "
                      'batching="frontier" cannot differentiate there: compute it before '
                      "the `recir.SubGraph` block and use the result inside, or use "
                      'batching="recursive" or "auto"')


def parameter_only(value: SSAValue, c: Contribution) -> RecirError:
    """The error for `c`, which only a parameter's accumulator takes, given
    to `value`, located where the user made it."""
    where = value.owner if isinstance(value.owner, Operation) else None
    made = isinstance(c, Outer | Row | Bilinear)  # (else rows for a uniform value)
    return emit_error(where, MADE_MATRIX if made else SAME_AT_EVERY_NODE)


class Emit:
    """Appends ops at an insertion point and returns their first result."""

    def __init__(self, point: InsertPoint):
        self.point = point

    def op(self, op: Operation) -> Operation:
        Rewriter.insert_op(op, self.point)
        return op

    def __call__(self, op: Operation) -> SSAValue:
        return self.op(op).results[0]

    def zero(self, typ: Attribute) -> SSAValue:
        if isinstance(typ, TensorType):
            return self(tmath.ConstantOp(DenseIntOrFPElementsAttr.from_list(typ, [0.0])))
        return self(arith.ConstantOp(FloatAttr(0.0, f32)))

    def seed(self, typ: Attribute, one: bool, like: SSAValue) -> SSAValue:
        """1 or 0 of `typ`; of rows, one per row of `like` (rows' losses sum)."""
        if not is_rows(typ):
            return self.scalar(1.0) if one else self.zero(typ)
        value = self.scalar(1.0) if one else self.zero(row_type(typ))
        return self(frontier.BroadcastOp(value, like))

    def scalar(self, value: float) -> SSAValue:
        return self(arith.ConstantOp(FloatAttr(value, f32)))

    def fill(self, scalar: SSAValue, like: SSAValue) -> SSAValue:
        return self(tmath.FillOp(scalar, like.type))

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self(tmath.AddOp(a, b) if isinstance(a.type, TensorType) else arith.AddfOp(a, b))

    def onehot(self, index: SSAValue, scale: SSAValue, like: SSAValue) -> SSAValue:
        return self(adjoint.OnehotOp.create(operands=[index, scale], result_types=[like.type]))


Primal = Callable[[SSAValue], SSAValue]
Rule = Callable[[Emit, Operation, SSAValue, Primal], list[tuple[int, Contribution]]]


def add(e, op, dy, p):
    return [(0, dy), (1, dy)]


def ops_like(op: Operation) -> tuple[type[Operation], type[Operation], type[Operation]]:
    """(neg, mul, div) of `op`'s dialect: the same rules serve tmath's ops and
    arith's f32 ones (on scalars, or on rows: `ROW_ARITH`)."""
    if isinstance(op, arith.FloatingPointLikeBinaryOperation | arith.NegfOp):
        return arith.NegfOp, arith.MulfOp, arith.DivfOp
    return tmath.NegOp, tmath.MulOp, tmath.DivOp


def sub(e, op, dy, p):
    negate, _, _ = ops_like(op)
    return [(0, dy), (1, e(negate(dy)))]


def mul(e, op, dy, p):
    _, times, _ = ops_like(op)
    return [(0, e(times(dy, p(op.rhs)))), (1, e(times(dy, p(op.lhs))))]


def div(e, op, dy, p):
    negate, times, over = ops_like(op)
    da = e(over(dy, p(op.rhs)))
    return [(0, da), (1, e(negate(e(times(da, p(op.result))))))]


def neg(e, op, dy, p):
    return [(0, e(ops_like(op)[0](dy)))]


def sigmoid(e, op, dy, p):
    y = p(op.result)  # dy * y * (1 - y) = dy * (y - y*y)
    return [(0, e(tmath.MulOp(dy, e(tmath.SubOp(y, e(tmath.MulOp(y, y)))))))]


def tanh(e, op, dy, p):
    y = p(op.result)  # dy * (1 - y*y) = dy - dy*y*y
    return [(0, e(tmath.SubOp(dy, e(tmath.MulOp(dy, e(tmath.MulOp(y, y)))))))]


def relu(e, op, dy, p):
    grad = adjoint.ReluGradOp.create(operands=[p(op.result), dy], result_types=[dy.type])
    return [(0, e(grad))]


def exp(e, op, dy, p):
    return [(0, e(tmath.MulOp(dy, p(op.result))))]


def log(e, op, dy, p):
    return [(0, e(tmath.DivOp(dy, p(op.input))))]


def nothing(e, op, dy, p):
    return []


def fill(e, op, dy, p):
    return [(0, e(tmath.SumOp(dy)))]


def matvec(e, op, dy, p):
    dx = adjoint.VecmatOp.create(operands=[dy, p(op.matrix)], result_types=[op.vector.type])
    return [(0, Outer(dy, p(op.vector))), (1, e(dx))]


def matmul(e, op, dy, p):
    def transpose(v: SSAValue) -> SSAValue:
        rows, cols = tmath.shape_of(v)
        return e(adjoint.TransposeOp.create(operands=[v], result_types=[
            TensorType(f32, [cols, rows])]))

    return [(0, e(tmath.MatmulOp(dy, transpose(p(op.rhs))))),
            (1, e(tmath.MatmulOp(transpose(p(op.lhs)), dy)))]


def bilinear(e, op, dy, p):
    v, x, y = p(op.tensor), p(op.lhs), p(op.rhs)
    dx = adjoint.BilinearLhsOp.create(operands=[v, dy, y], result_types=[x.type])
    dyy = adjoint.BilinearRhsOp.create(operands=[v, dy, x], result_types=[y.type])
    return [(0, Bilinear(dy, x, y)), (1, e(dx)), (2, e(dyy))]


def concat(e, op, dy, p):
    parts, offset = [], 0
    for i, value in enumerate(op.inputs):
        rows = tmath.shape_of(value)[1 if is_rows(value) else 0]  # each row's first axis
        parts.append((i, e(tmath.SliceOp(dy, offset, rows))))
        offset += rows
    return parts


def slice_(e, op, dy, p):
    pad = adjoint.PadOp.create(operands=[dy], result_types=[op.input.type],
                               properties={"offset": op.offset})
    return [(0, e(pad))]


def gather(e, op, dy, p):
    return [(0, Row(p(op.index), dy))]


def extract(e, op, dy, p):
    """Over rows, a shared vector read at each row's own index (`s[label[i]]`)
    takes a one-hot per row, summed as a broadcast's (one static one-hot of
    the rows' indices: a garbled op)."""
    index = p(op.index)
    if not is_rows(index):
        return [(0, e.onehot(index, dy, op.input))]
    rows = rows_type(op.input.type)
    return [(0, RowSum(e(adjoint.OnehotOp.create(operands=[index, dy], result_types=[rows]))))]


def sum_(e, op, dy, p):
    return [(0, e.fill(dy, op.input))]


def max_(e, op, dy, p):
    x = p(op.input)
    if len(tmath.shape_of(x)) != 1 + is_rows(x):
        raise emit_error(op, "has a gradient rule for vectors (or rows of them) only")
    return [(0, e.onehot(e(tmath.ArgmaxOp(x)), dy, x))]


def softmax(e, op, dy, p):
    y = p(op.result)  # y * (dy - sum(dy * y))
    s = e(tmath.SumOp(e(tmath.MulOp(dy, y))))
    return [(0, e(tmath.MulOp(y, e(tmath.SubOp(dy, e.fill(s, y))))))]


def softmax_xent(e, op, dl, p):
    logits = p(op.logits)  # (softmax(logits) - onehot(label)) * dl
    probs = e(tmath.MulOp(e(tmath.SoftmaxOp(logits)), e.fill(dl, logits)))
    return [(0, e(tmath.SubOp(probs, e.onehot(p(op.label), dl, logits))))]


def select(e, op, dy, p):
    zero = e.zero(dy.type)
    cond = p(op.cond)
    return [(1, e(arith.SelectOp(cond, dy, zero))), (2, e(arith.SelectOp(cond, zero, dy)))]


# a float min/max's cotangent flows to the operand it takes: the lhs where it
# compares so with the rhs, or where the NaN-tested operand is NaN (maximumf's
# lhs: the NaN it propagates; maxnumf's rhs: the NaN it ignores); a tie
# (-0.0 and +0.0 too) takes the lhs, as `tmath.max`'s argmax the first
EXTREMA = {arith.MaximumfOp: ("oge", 0), arith.MinimumfOp: ("ole", 0),
           arith.MaxnumfOp: ("oge", 1), arith.MinnumfOp: ("ole", 1)}


def extremum(e, op, dy, p):
    """A select of the cotangent on scalars; on rows, a partition by the
    same test, each side's rows of it merged with zeros (rows have no select)."""
    rows = is_rows(dy)
    if isinstance(dy.type, TensorType) and not (rows and len(tmath.shape_of(dy)) == 1):
        raise emit_error(op, "has a gradient rule for scalars (or rows of them) only")
    predicate, tested = EXTREMA[type(op)]
    a, b = p(op.lhs), p(op.rhs)
    nan = (a, b)[tested]
    compare = frontier.CmpfOp if rows else arith.CmpfOp
    code = arith.CMPF_COMPARISON_OPERATIONS.index
    lhs = e(arith.OrIOp(e(compare(a, b, code(predicate))), e(compare(nan, nan, code("uno")))))
    if not rows:
        zero = e.zero(dy.type)
        return [(0, e(arith.SelectOp(lhs, dy, zero))), (1, e(arith.SelectOp(lhs, zero, dy)))]
    yes, no = e.op(frontier.PartitionOp(lhs)).results
    zero = e.zero(f32)
    return [(0, e(frontier.MergeOp(e(frontier.TakeOp(dy, yes)), yes,
                                   e(frontier.BroadcastOp(zero, no)), no))),
            (1, e(frontier.MergeOp(e(frontier.BroadcastOp(zero, yes)), yes,
                                   e(frontier.TakeOp(dy, no)), no)))]


def take(e, op, dy, p):
    """The inverse of a row gather is a scatter-add (into a table's gradient;
    by a partition's side, into a value's rows: `Row.scattered`)."""
    part = op.rows.owner
    if isinstance(part, frontier.PartitionOp):
        side = part.results.index(op.rows)
        return [(0, Row(p(op.rows), dy, p(part.results[1 - side]), side == 0))]
    return [(0, Row(p(op.rows), dy))]


def merge(e, op, dy, p):
    return [(0, e(frontier.TakeOp(dy, p(op.lhs_rows)))),
            (2, e(frontier.TakeOp(dy, p(op.rhs_rows))))]


def broadcast(e, op, dy, p):
    return [(0, RowSum(dy))]


VJP_RULES: dict[type[Operation], Rule] = {
    tmath.AddOp: add, tmath.SubOp: sub, tmath.MulOp: mul, tmath.DivOp: div,
    tmath.NegOp: neg, tmath.SigmoidOp: sigmoid, tmath.TanhOp: tanh, tmath.ReluOp: relu,
    tmath.ExpOp: exp, tmath.LogOp: log, tmath.ConstantOp: nothing, tmath.FillOp: fill,
    tmath.MatvecOp: matvec, tmath.MatmulOp: matmul, tmath.BilinearOp: bilinear,
    tmath.ConcatOp: concat, tmath.SliceOp: slice_, tmath.GatherOp: gather,
    tmath.ExtractOp: extract, tmath.SumOp: sum_, tmath.MaxOp: max_,
    tmath.SoftmaxOp: softmax, tmath.SoftmaxCrossEntropyOp: softmax_xent,
    arith.AddfOp: add, arith.SubfOp: sub, arith.MulfOp: mul, arith.DivfOp: div,
    arith.NegfOp: neg, arith.SelectOp: select, arith.ConstantOp: nothing,
    arith.SIToFPOp: nothing, arith.UIToFPOp: nothing,
    **{kind: extremum for kind in EXTREMA},
    frontier.TakeOp: take, frontier.MergeOp: merge, frontier.BroadcastOp: broadcast,
}
