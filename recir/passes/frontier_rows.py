"""Rewrite a block of per-invocation ops into one straight-line block over rows.

The core of `invoke-to-frontier`: each op whose operands are per invocation
(kind B, `frontier_segments.py`) becomes its row form (`row_types.py`) by
its rule in `ROW_RULES` (JAX's `vmap` rules, one per op); uniform ops (kind
U: parameters, constants) are cloned once, where first needed, and shared by
every row. An `scf.if`
with a per-row predicate becomes a `frontier.partition` of the rows, both
branches run inline on their sub-rows (a value from outside a branch is
taken by the branch's row numbers when first read there), and the results
are merged back. Per-tree arrays (kind R) are read by each row's tree.
Invokes are left to the caller (`on_invoke`): the expansion records them,
the bottom-up function gathers the children's rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float32Type,
    IntegerAttr,
    TensorType,
)
from xdsl.ir import Block, Operation, SSAValue

from recir.diagnostics import RecirError, emit_error
from recir.dialects import frontier, invoke, tmath
from recir.dialects.row_types import ROW_ARITH, rows_type

SAME_OP = (*tmath.ELEMENTWISE_BINARY, *tmath.ELEMENTWISE_UNARY, *ROW_ARITH, tmath.SoftmaxOp,
           tmath.SumOp, tmath.MaxOp, tmath.ArgmaxOp, tmath.MatvecOp, tmath.BilinearOp,
           tmath.ConcatOp, tmath.SliceOp, tmath.GatherOp, tmath.SoftmaxCrossEntropyOp,
           tmath.FillOp)
SHARED = {tmath.MatvecOp: "matrix", tmath.BilinearOp: "tensor", tmath.GatherOp: "table"}
EITHER = (*tmath.ELEMENTWISE_BINARY, tmath.BilinearOp)


def outer_operands(op: Operation) -> list[SSAValue]:
    """The values `op` (its regions included) reads from outside it."""
    return [v for o in op.walk() for v in o.operands if not op.is_ancestor(v.owner)]


@dataclass
class Rows:
    """The rows a block runs on: `rows` numbers them among the parent's rows
    and `top` among the function's (None at the top)."""

    parent: Rows | None
    rows: SSAValue | None
    top: SSAValue | None
    like: SSAValue  # any value with one row per row here
    local: dict[SSAValue, SSAValue] = field(default_factory=dict)

    def branch(self, rows: SSAValue, builder: RowBuilder) -> Rows:
        top = rows if self.top is None else builder.emit(frontier.TakeOp(self.top, rows))
        return Rows(self, rows, top, rows)


class RowBuilder:
    """Appends the row form of ops to `block`; `kinds` are the plan's."""

    def __init__(self, block: Block, kinds: dict[SSAValue, str],
                 runs: Callable[[Operation], bool], merges: Callable[[scf.IfOp], bool],
                 on_invoke: Callable[[Rows, invoke.InvokeOp], None]):
        """`runs`: whether this function runs an op; `merges`: whether it
        needs an `scf.if`'s results (the expansion does not need those of
        a branch holding invokes)."""
        self.block, self.kinds, self.on_invoke = block, kinds, on_invoke
        self.runs, self.merges = runs, merges
        self.uniform: dict[SSAValue, SSAValue] = {}
        self.ragged: dict[SSAValue, tuple[SSAValue, SSAValue]] = {}  # flat, offsets
        self.per_tree: dict[SSAValue, SSAValue] = {}  # one row per tree
        self.tree: SSAValue | None = None  # each row's tree, at the top
        self.top: Rows | None = None
        self.lifted: dict[scf.IfOp, list[tuple[SSAValue, int]]] = {}
        self.source: Operation | None = None  # the op being rewritten

    def emit(self, op: Operation) -> SSAValue:
        self.add(op)
        return op.results[0]

    def add(self, op: Operation) -> None:
        """Append `op`, located at the op it comes from (errors point there)."""
        if self.source is not None:
            op.location = self.source.location
        self.block.add_op(op)

    # -- values ---------------------------------------------------------
    def uniform_value(self, value: SSAValue) -> SSAValue:
        """The shared value, its defining ops cloned here on first use."""
        found = self.uniform.get(value)
        if found is not None:
            return found
        op = value.owner
        if not isinstance(op, Operation):
            raise RecirError(f"error: frontier batching: uniform argument {value} is not "
                             "passed along (internal)")
        clone = op.clone(value_mapper={v: self.uniform_value(v) for v in outer_operands(op)})
        self.block.add_op(clone)
        for old, new in zip(op.results, clone.results, strict=True):
            self.uniform[old] = new
        return self.uniform[value]

    def get(self, at: Rows, value: SSAValue) -> SSAValue:
        """`value`'s rows at `at`: taken down from where it was made."""
        chain: list[Rows] = []
        found: Rows | None = at
        while found is not None and value not in found.local:
            chain.append(found)
            found = found.parent
        if found is None:
            found = self.materialize(value)
            chain.pop()
        result = found.local[value]
        for inner in reversed(chain):
            assert inner.rows is not None
            result = inner.local[value] = self.emit(frontier.TakeOp(result, inner.rows))
        return result

    def materialize(self, value: SSAValue) -> Rows:
        """A per-tree value read at the top by each row's tree."""
        assert self.top is not None
        per_tree = self.per_tree.get(value)
        if per_tree is None or self.tree is None:
            raise RecirError(f"error: frontier batching: {value} has no rows here (internal)")
        self.top.local[value] = self.emit(frontier.TakeOp(per_tree, self.tree))
        return self.top

    def operand(self, at: Rows, value: SSAValue) -> tuple[SSAValue, bool]:
        """The new value and whether it is rows."""
        if self.kinds.get(value) == "U":
            return self.uniform_value(value), False
        if value in self.ragged:
            raise emit_error(self.source, "reads a per-tree array of dynamic shape, which "
                             "frontier batching reads by tmath.extract and tmath.size only")
        return self.get(at, value), True

    def rows_of(self, at: Rows, value: SSAValue) -> SSAValue:
        """`value` as rows: a uniform value is broadcast."""
        new, rows = self.operand(at, value)
        return new if rows else self.emit(frontier.BroadcastOp(new, at.like))

    # -- blocks ---------------------------------------------------------
    def run_block(self, at: Rows, block: Block) -> None:
        for op in block.ops:
            if op is block.last_op and isinstance(op, scf.YieldOp | func.ReturnOp):
                return
            if not self.runs(op) or self.is_uniform(op):
                continue
            self.source = op
            if isinstance(op, invoke.InvokeOp):
                self.on_invoke(at, op)
            elif isinstance(op, scf.IfOp):
                self.branch(at, op)
            else:
                for old, new in zip(op.results, self.row_form(at, op), strict=True):
                    at.local[old] = new

    def is_uniform(self, op: Operation) -> bool:
        return bool(op.results) and all(self.kinds.get(r) == "U" for r in op.results)

    def branch(self, at: Rows, op: scf.IfOp) -> None:
        """Partition by the predicate, run each side on its rows, merge."""
        partition = frontier.PartitionOp(self.rows_of(at, op.cond))
        self.add(partition)
        taken, others = partition.results
        sides = [at.branch(taken, self), at.branch(others, self)]
        for side, region in zip(sides, op.regions, strict=True):
            self.run_block(side, region.block)
        self.source = op
        if self.merges(op):
            yields = [region.block.last_op.operands for region in op.regions]  # type: ignore[union-attr]
            for i, result in enumerate(op.results):
                lhs, rhs = (self.rows_of(side, y[i]) for side, y in zip(sides, yields))
                at.local[result] = self.emit(frontier.MergeOp(lhs, taken, rhs, others))
        for value, region in self.lifted.get(op, []):
            inside, other = sides[region], sides[1 - region]
            zero = self.emit(frontier.BroadcastOp(self.zero(value), other.like))
            at.local[value] = self.emit(frontier.MergeOp(  # a merge is symmetric
                self.get(inside, value), inside.like, zero, other.like))

    def zero(self, value: SSAValue) -> SSAValue:
        typ = value.type
        if isinstance(typ, TensorType):
            return self.emit(tmath.ConstantOp(DenseIntOrFPElementsAttr.from_list(typ, [0.0])))
        if isinstance(typ, Float32Type):
            return self.emit(arith.ConstantOp.from_float_and_width(0.0, typ))
        return self.emit(arith.ConstantOp(IntegerAttr(0, typ)))  # type: ignore[arg-type]

    # -- ops ------------------------------------------------------------
    def row_form(self, at: Rows, op: Operation) -> list[SSAValue]:
        new = self.row_op(at, op)
        self.add(new)
        return list(new.results)

    def row_op(self, at: Rows, op: Operation) -> Operation:
        rule = ROW_RULES.get(type(op))
        if rule is None:
            raise emit_error(op, "has no row form: frontier batching cannot run it on "
                             "many invocations at once")
        return rule(self, at, op)

    def shared(self, op: Operation, value: SSAValue, what: str) -> SSAValue:
        if self.kinds.get(value) != "U":
            raise emit_error(op, f"has no row form for a per-invocation {what}")
        return self.uniform_value(value)

    def structure_read(self, at: Rows, op: tmath.ExtractOp | tmath.SizeOp) -> Operation:
        """A structure array: shared (U) or one per tree (ragged, R)."""
        source = op.input
        if source in self.ragged:
            if self.tree is None:
                raise emit_error(op, "reads a per-tree array outside the recursive function: "
                                 "frontier batching reads them only inside it")
            flat, offsets = self.ragged[source]
            tree = self.get(at, self.tree)
            if isinstance(op, tmath.SizeOp):
                return frontier.SizeRaggedOp.create(operands=[offsets, tree],
                                                    result_types=[rows_type(op.result.type)])
            return frontier.ExtractRaggedOp(flat, offsets, tree, self.rows_of(at, op.index))
        if isinstance(op, tmath.SizeOp) or self.kinds.get(source) != "U":
            raise emit_error(op, "has no row form for a per-invocation array")
        return tmath.ExtractOp(self.uniform_value(source), self.rows_of(at, op.index))


# -- the row rules, one per op (JAX's `vmap` rules) ----------------------
RowRule = Callable[[RowBuilder, Rows, Any], Operation]


def same_op(b: RowBuilder, at: Rows, op: Operation) -> Operation:
    """The op itself on rows (its properties kept): operand 0 of a `SHARED`
    op must be uniform; an operand of an `EITHER` op stays as it is where it
    is uniform (the row form broadcasts it); any other is rows."""
    operands = []
    for k, value in enumerate(op.operands):
        if k == 0 and type(op) in SHARED:
            operands.append(b.shared(op, value, SHARED[type(op)]))
        elif isinstance(op, EITHER):
            operands.append(b.operand(at, value)[0])
        else:
            operands.append(b.rows_of(at, value))
    return type(op).create(operands=operands, result_types=[rows_type(r.type) for r in
                                                            op.results],
                           properties=dict(op.properties), attributes=dict(op.attributes))


def compare(b: RowBuilder, at: Rows, op: arith.CmpiOp | arith.CmpfOp) -> Operation:
    """xDSL's arith types a comparison's result as i1 only: frontier's has rows."""
    cls = frontier.CmpiOp if isinstance(op, arith.CmpiOp) else frontier.CmpfOp
    return cls(b.rows_of(at, op.lhs), b.rows_of(at, op.rhs), op.predicate.value.data)


ROW_RULES: dict[type[Operation], RowRule] = {
    **{t: same_op for t in SAME_OP},
    tmath.ExtractOp: RowBuilder.structure_read,
    tmath.SizeOp: RowBuilder.structure_read,
    arith.CmpiOp: compare,
    arith.CmpfOp: compare,
}
