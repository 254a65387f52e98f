"""What a function's forward saves for its backward, and where.

*What* (`plan`, the cost model): a forward value the backward reads is
recomputed in the backward instead of saved when

- its op is cheap: elementwise (the `Elementwise` trait), a slice, a
  concatenation, a fill, or a row gather from a table: one pass over its
  result, O(n), where the products that read it (matvec, outer product) are
  O(n^2). Matrix products, reductions, calls and `scf.if` results are never
  recomputed; and
- each operand is at hand in the backward without saving anything new: an
  argument the backward is given (parameters, structure arrays), a constant,
  a value the backward reads anyway (so it is saved), or a value recomputed
  in turn.

So a frame never grows. In TreeLSTM `h = o * tanh(c)` and `c` itself come
back from the gates and the children's cells, which the backward reads
anyway, and a leaf's embedding row from the table and the word.

*Where* (`FrameLayouts`): a value is saved in the frame of the region that
defines it. The function's body has the frame its `_fwd` returns; each
`scf.if` region that saves anything gets a frame of its own, allocated only
when that branch runs, its pointer in one slot of the enclosing frame that
both branches share. So an invocation pays for the branch it takes: a tree's
leaves do not carry the slots of its inner nodes.

*Rows* (a frontier's batched values, `tensor<?x...>`) have no static size, so
they never go in a frame. The same cost model splits them: a row value made
in one pass over its operands (`rebuilds_row`: the cheap ops above, arith,
and the frontier's moves of rows) is rebuilt in the backward; any other (a
product: matvec, bilinear; a reduction) is saved by being returned. So is a
transcendental (`SLOW`: sigmoid, tanh, exp, log): tens of instructions an
element where a read back is one load, and the backward reads its result (for
its own derivative: sigmoid, tanh, exp; or for the ops it feeds), while a
rebuild reads its operand (often a saved product's row, as many bytes) and
the bias added to it. That is
the batched functions' contract: `@f_fwd` returns the rows it saves after
`@f`'s results (before the frame), and `@f_bwd` takes them as its leading
arguments, before the frame; the frontier schedule keeps them per height (or
depth) between the two.

`forward_function` then builds `@f_fwd`: `@f` with a `tape.new` per frame,
each saved value copied in after its op, and callees' `_fwd` frames saved.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import FunctionType, StringAttr, TensorType
from xdsl.ir import Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import emit_error
from recir.dialects import frontier, invoke, tape, tmath

CHEAP = (tmath.SliceOp, tmath.ConcatOp, tmath.FillOp, tmath.GatherOp)
# rows moved or compared, not computed: one pass over their operands
ROW_MOVES = (frontier.TakeOp, frontier.MergeOp, frontier.PartitionOp, frontier.BroadcastOp,
             frontier.CompareOp, frontier.ExtractRaggedOp, frontier.SizeRaggedOp,
             tmath.ExtractOp)

# elementwise, but costlier to rebuild than to read back (see the module docstring)
SLOW = (tmath.SigmoidOp, tmath.TanhOp, tmath.ExpOp, tmath.LogOp)

# a saved value; an invoke (its child's frame); an scf.if (its taken branch's frame)
Key = SSAValue | Operation


def is_cheap(op: Operation) -> bool:
    """One pass over a tensor result, no more (see the module docstring)."""
    if len(op.results) != 1 or not isinstance(op.results[0].type, TensorType):
        return False
    return isinstance(op, CHEAP) or op.has_trait(tmath.Elementwise)


def rebuilds_row(op: Operation) -> bool:
    """Whether the backward rebuilds a row value of `op` rather than have the
    forward return it: one cheap pass over its operands (see the module
    docstring)."""
    if isinstance(op, SLOW):
        return False
    return (isinstance(op, (*CHEAP, *ROW_MOVES)) or op.has_trait(tmath.Elementwise)
            or op.dialect_name() == "arith")


def plan(function: func.FuncOp, read: Iterable[SSAValue],
         given: Iterable[SSAValue]) -> set[SSAValue]:
    """The values of `function` to recompute, given those the backward `read`
    and those it is `given`. In program order, so an op's operands are
    decided before it."""
    at_hand = {*read, *given}
    recompute: set[SSAValue] = set()
    for op in function.walk():
        if isinstance(op, arith.ConstantOp | tmath.ConstantOp):
            at_hand.update(op.results)
            continue
        if not is_cheap(op) or not all(v in at_hand for v in op.operands):
            continue
        recompute.add(op.results[0])
        at_hand.add(op.results[0])
    return recompute


def drop_unread_rows(bwd: func.FuncOp, rows: list[SSAValue]) -> list[SSAValue]:
    """The saved `rows` `bwd` reads, its unread leading arguments erased: a
    costly row rebuilt only to rebuild another is not read once that one is
    given."""
    block = bwd.body.block
    unread = {v: a for v, a in zip(rows, block.args) if not a.uses}
    for arg in unread.values():
        block.erase_arg(arg)
    bwd.function_type = FunctionType.from_lists(block.arg_types, bwd.function_type.outputs.data)
    return [v for v in rows if v not in unread]


def value_bytes(value: SSAValue) -> tuple[int, int]:
    """(size, alignment) of a saved value in a frame."""
    typ = value.type
    if isinstance(typ, tape.FrameType):
        return 8, 8
    if isinstance(typ, TensorType):
        shape = typ.get_shape()
        if any(d < 0 for d in shape):
            raise emit_error(value.owner if isinstance(value.owner, Operation) else None,
                             f"cannot save a dynamic tensor {typ} for the backward")
        return 4 * math.prod(shape), 16
    return 8, 8


def region_of(value: SSAValue) -> Region:
    """The region whose frame holds `value` when it is saved."""
    owner = value.owner
    region = owner.parent_region() if isinstance(owner, Operation) else owner.parent
    assert isinstance(region, Region), f"{value} is not in a region"
    return region


class FrameLayouts:
    """Byte layout of every frame of one function, built as slots are asked for."""

    def __init__(self, body: Region):
        self.body = body
        self.sizes: dict[Region, int] = {body: 0}
        self.slots: dict[Key, tuple[Region, int]] = {}

    def slot(self, key: Key, region: Region, size: int, align: int) -> int:
        """The offset of `key` in the frame of `region`, allocated on first use."""
        if key not in self.slots:
            if region is not self.body:
                self.branch_slot(region)
            used = self.sizes.get(region, 0)
            offset = -(-used // align) * align
            self.sizes[region] = offset + size
            self.slots[key] = (region, offset)
        return self.slots[key][1]

    def branch_slot(self, region: Region) -> int:
        """The slot of the enclosing frame that holds `region`'s frame."""
        op = region.parent_op()
        assert isinstance(op, scf.IfOp), f"frames for {op} regions are not supported"
        parent = op.parent_region()
        assert parent is not None
        return self.slot(op, parent, 8, 8)

    def size(self, region: Region) -> int:
        return max(self.sizes.get(region, 0), 8)


def forward_function(f: func.FuncOp, layouts: FrameLayouts,
                     rows: Iterable[SSAValue] = ()) -> func.FuncOp:
    """`@f_fwd`: `f` saving what `layouts` places, returning the saved `rows`
    after its results, then its frame."""
    mapping: dict[SSAValue, SSAValue] = {}
    clone = f.clone(value_mapper=mapping)
    ops = dict(zip(f.walk(), clone.walk()))
    frames = new_frames(f, layouts, ops)
    # values first: a save after an invoke follows its result to the `_fwd` call
    slots = sorted(layouts.slots.items(), key=lambda s: isinstance(s[0], Operation))
    for key, (region, offset) in slots:
        frame = frames[region]
        if isinstance(key, invoke.InvokeOp):
            call_forward(ops[key], frame, offset)
        elif isinstance(key, SSAValue):
            value = mapping.get(key, key)
            after = value.owner if isinstance(value.owner, Operation) else frame.owner
            assert isinstance(after, Operation)
            save = tape.SaveOp(value, frame, offset)
            Rewriter.insert_op(save, InsertPoint.after(after))
    ret = clone.body.block.last_op
    assert ret is not None
    rows = list(rows)
    ret.operands = [*ret.operands, *(mapping[v] for v in rows), frames[f.body]]
    typ = f.function_type
    clone.function_type = FunctionType.from_lists(
        typ.inputs.data, [*typ.outputs.data, *(v.type for v in rows), tape.FRAME])
    clone.sym_name = StringAttr(f"{f.sym_name.data}_fwd")
    clone.sym_visibility = StringAttr("private")
    return clone


def new_frames(f: func.FuncOp, layouts: FrameLayouts,
               ops: dict[Operation, Operation]) -> dict[Region, SSAValue]:
    """A `tape.new` at the start of each region with a frame, the clone's body
    first; a branch's frame is saved into the enclosing one."""
    top = tape.NewOp(layouts.size(f.body))
    Rewriter.insert_op(top, InsertPoint.at_start(ops[f].regions[0].block))
    frames: dict[Region, SSAValue] = {f.body: top.frame}
    for op in f.walk():  # enclosing ops first
        if not isinstance(op, scf.IfOp) or op not in layouts.slots:
            continue
        parent, offset = layouts.slots[op]
        for index, region in enumerate(op.regions):
            if region not in layouts.sizes:
                continue
            new = tape.NewOp(layouts.size(region))
            block = ops[op].regions[index].block
            Rewriter.insert_op(new, InsertPoint.at_start(block))
            Rewriter.insert_op(tape.SaveOp(new.frame, frames[parent], offset),
                               InsertPoint.after(new))
            frames[region] = new.frame
    return frames


def call_forward(op: Operation, frame: SSAValue, offset: int) -> None:
    """The clone of an invoke whose frame the backward reads: call `_fwd`."""
    assert isinstance(op, invoke.InvokeOp)
    call = invoke.InvokeOp(f"{op.callee.string_value()}_fwd", op.args,
                           [*(r.type for r in op.res), tape.FRAME])
    call.location = op.location  # its errors point at the user's line
    Rewriter.insert_op(call, InsertPoint.before(op))
    for old, new in zip(op.res, call.results):
        old.replace_all_uses_with(new)
    op.detach()
    op.erase()
    save = tape.SaveOp(call.results[-1], frame, offset)
    Rewriter.insert_op(save, InsertPoint.after(call))
