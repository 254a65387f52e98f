"""Functions over rows (`invoke-to-frontier`'s `@f__expand`, `@f__post`) to loops.

`convert-tmath-to-loops` hands a function here when it computes rows (a
`frontier` op, or an op whose result has a leading dynamic dimension) and
holds no invoke, branch or frame: the batched functions are straight-line.
The ABI, which `backend/frontier_schedule.NativeRowFunction` calls:

- a rows value (`tensor<?x...>`, a dynamic structure array too) is passed as
  a pointer to `{i64 rows, ptr data}`, row-major and contiguous; an `i1`
  element is one byte (NumPy's `bool`);
- static tensors are pointers to their data, scalars stay scalars;
- after the inputs come the results' slots: a rows result's descriptor,
  which the function fills (its data lies in the scratch buffer, in an
  argument or in the slot's room), a static tensor's buffer; scalar results
  are returned. On entry a descriptor holds the room the caller has for the
  result (rows that fit and their address; 0 rows: none), where the op that
  makes it may write it directly (`result_rooms`): the caller's copy is saved;
- last come `scratch: ptr` and `scratch_bytes: i64`. Every temporary whose
  row count is known only at run time lies in a slot of it (`rows.Scratch`:
  its row bytes, rounded up to 64, times the rows the buffer holds), and a
  slot is handed out again after the last use of every value whose rows lie
  in it (`rows.ScratchLiveness`), so the buffer a row needs is the most bytes
  live at once, not the sum of all temporaries; a `partition` output takes
  its input's row count (the upper bound) and keeps the count it found. The
  caller sizes the buffer (the module's `SCRATCH_PER_ROW` entry times its
  largest frontier) and, where a check fails on `SCRATCH_EXHAUSTED`, calls
  again with a larger one: the functions write nothing but their results.

Every index read at run time is checked (`cf.assert`, an error return):
native code never reads outside a buffer. Kernels: `row_kernels.py`
(tmath and arith row forms) and `frontier_kernels.py`. Two pairs of ops are
lowered as one, each sparing a pass over the rows: a product over rows and
the bias added to it (`row_matvec.matvec_plus`), and a sum of
non-overlapping pads, a slice's gradients (`adjoint_row_kernels.sum_of_pads`).
A `take` read only by a concatenation or a fused chain is not copied: they
read its source's rows through its row numbers (`in_place_takes`), on a team
too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    TensorType,
    i1,
    i8,
    i64,
)
from xdsl.ir import Attribute, Operation, OpResult, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import emit_error
from recir.dialects import frontier, tape, tmath
from recir.dialects.row_types import is_rows
from recir.passes.adjoint_row_kernels import ADJOINT_ROW_KERNELS, pad_sums, sum_of_pads
from recir.passes.frontier_kernels import FRONTIER_KERNELS, in_order, take_in_place
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.packed_weights import mark_static_weights
from recir.passes.row_kernels import ROW_KERNELS
from recir.passes.row_matvec import matvec_plus
from recir.passes.row_products import bias_adds
from recir.passes.rows import (
    SERIAL,
    RowEmitter,
    Rows,
    RowTeam,
    Scratch,
    ScratchLiveness,
    clear_of_reads,
    row_at,
    row_width,
    storage,
)
from recir.passes.tmath_kernels import size

KERNELS = FRONTIER_KERNELS | ROW_KERNELS | ADJOINT_ROW_KERNELS


class StaticLowering(Protocol):
    """`convert_tmath_to_loops.FunctionLowering`: the uniform ops' lowering."""

    buffers: dict[SSAValue, SSAValue]
    dead: list[Operation]
    allocas: InsertPoint

    def get(self, value: SSAValue) -> SSAValue: ...
    def replace(self, old: SSAValue, new: SSAValue) -> None: ...
    def lower_op(self, op: Operation) -> None: ...


SCRATCH_PER_ROW = "recir.scratch_per_row"  # a module attribute: function -> bytes a row


def scratch_per_row(module: ModuleOp) -> dict[str, int]:
    """Each lowered row function's scratch bytes per row of its largest
    frontier (`rows.Scratch.finish`), taken off the module."""
    found = module.attributes.pop(SCRATCH_PER_ROW, None)
    if not isinstance(found, DictionaryAttr):
        return {}
    return {name: value.value.data for name, value in found.data.items()
            if isinstance(value, IntegerAttr)}


def runs_schedule(function: func.FuncOp) -> bool:
    """A batched entry: the runtime runs its `frontier.schedule`, and the
    ops before it as a function of their own (`recir/frontier_compile.py`)."""
    return any(isinstance(op, frontier.ScheduleOp) for op in function.walk())


class RowFunctionLowering:
    """Lowers one straight-line function over rows (see the module docstring)."""

    def __init__(self, function: func.FuncOp, static: StaticLowering,
                 team: RowTeam = SERIAL):
        """`static` lowers the uniform ops, as in every other function;
        `team` runs its products over rows (`gemm_teams.team_function`)."""
        self.function, self.static, self.team = function, static, team
        self.entry = function.body.blocks[0]
        self.values: dict[SSAValue, Rows] = {}
        self.bias_adds = bias_adds(function)  # matvec -> (its bias add, the bias)
        mark_static_weights(function)  # products whose weight a packed copy may serve
        self.pad_sums = pad_sums(function)  # a sum of pads -> its pads
        self.folded: set[Operation] = {p for pads in self.pad_sums.values() for p in pads}
        self.in_place = in_place_takes(function)
        # (and the adds lowered with their product)

    def get(self, value: SSAValue) -> Rows | SSAValue:
        found = self.values.get(value)
        return found if found is not None else self.static.get(value)

    def run(self) -> None:
        signature = self.function.function_type
        entry, first = self.entry, self.entry.first_op
        assert first is not None
        start = Emitter(InsertPoint.before(first), self.static.allocas)
        old_args = [a for a in entry.args if isinstance(a.type, TensorType | tape.FrameType)]
        for arg in old_args:
            new = entry.insert_arg(PTR, arg.index)
            if isinstance(arg.type, tape.FrameType):  # a backward's frame: unread
                arg.replace_all_uses_with(new)
            elif is_rows(arg.type):
                self.values[arg] = self.descriptor(start, new, arg.type)
            else:
                self.static.buffers[arg] = new
        self.outs = [entry.insert_arg(PTR, len(entry.args))
                     for t in signature.outputs if isinstance(t, TensorType)]
        base = entry.insert_arg(PTR, len(entry.args))
        capacity = entry.insert_arg(i64, len(entry.args))
        self.scratch = Scratch(start, base, capacity)
        self.rooms = self.result_rooms(start, signature.outputs)
        ops = list(entry.ops)
        self.liveness = ScratchLiveness(ops, self.pad_sums)
        for k, op in enumerate(ops):
            self.lower_op(op)
            for offset, length in self.liveness.dead(k):
                self.scratch.release(offset, length)
        self.record_per_row(self.scratch.finish())
        for op in reversed(self.static.dead):
            op.detach()
            op.erase(safe_erase=False)
        for arg in old_args:
            entry.erase_arg(arg)
        inputs = [PTR if isinstance(t, TensorType | tape.FrameType) else t
                  for t in signature.inputs]
        scalars = [t for t in signature.outputs if not isinstance(t, TensorType)]
        self.function.function_type = FunctionType.from_lists(
            [*inputs, *(PTR for _ in self.outs), PTR, i64], scalars)

    def result_rooms(self, b: Emitter, outputs: Sequence[Attribute]
                     ) -> dict[Operation, dict[int, tuple[Callable[[Emitter], SSAValue],
                                                          SSAValue, SSAValue]]]:
        """For the ops whose rows may be written straight to a result's room
        (the rows and address its slot holds on entry: the caller's table or
        buffer), which of their allocations and when: a `PLACED` op's result
        returned, always where it fits; a side of a merge that is returned,
        where its side is every row in order (the merge is then that side).
        Per op: allocation number -> (whether, rows there, address)."""
        returned = self.entry.last_op
        assert isinstance(returned, func.ReturnOp)
        rooms: dict[Operation, dict[int, tuple[Callable[[Emitter], SSAValue], SSAValue,
                                               SSAValue]]] = {}
        placed: set[SSAValue] = set()
        read: dict[SSAValue, tuple[SSAValue, SSAValue]] = {}  # a slot's room, read once

        def place(value: SSAValue, whether: Callable[[Emitter], SSAValue], out: SSAValue
                  ) -> None:
            owner = value.owner
            if not (isinstance(owner, PLACED) and owner.parent_block() is self.entry
                    and value not in placed and isinstance(value, OpResult)):
                return
            if out not in read:
                read[out] = (b.load(out, 0, i64), b.load(b.offset(out, 8, i8), 0, PTR))
            placed.add(value)
            rooms.setdefault(owner, {})[value.index] = (whether, *read[out])

        tensors = [v for v in returned.arguments if isinstance(v.type, TensorType)]
        for value, out in zip(tensors, self.outs, strict=True):
            if not is_rows(value.type):
                continue
            merge = value.owner
            if not isinstance(merge, frontier.MergeOp):
                place(value, lambda e: e.const(1, i1), out)
                continue
            lhs, lhs_rows, rhs, rhs_rows = merge.operands
            for side, numbers, other in ((lhs, lhs_rows, rhs_rows), (rhs, rhs_rows, lhs_rows)):
                place(side, lambda e, numbers=numbers, other=other: self.whole(e, numbers, other),
                      out)
        return rooms

    def whole(self, e: Emitter, numbers: SSAValue, other: SSAValue) -> SSAValue:
        """Whether a merge's side numbered `numbers` is every row in order
        (its other side, numbered `other`, has none), where both are lowered."""
        mine, theirs = self.values.get(numbers), self.values.get(other)
        if mine is None or theirs is None:
            return e.const(0, i1)
        return e.binary(arith.AndIOp, e.compare("eq", theirs.count, 0), in_order(e, mine))

    def record_per_row(self, per_row: int) -> None:
        module = self.function.parent_op()
        assert isinstance(module, ModuleOp)
        found = module.attributes.get(SCRATCH_PER_ROW)
        entries = dict(found.data) if isinstance(found, DictionaryAttr) else {}
        entries[self.function.sym_name.data] = IntegerAttr(per_row, i64)
        module.attributes[SCRATCH_PER_ROW] = DictionaryAttr(entries)

    def settle(self, op: Operation, results: Sequence[SSAValue]) -> None:
        """Which slots `op`'s results lie in (`ScratchLiveness.record`)."""
        self.liveness.record(op, results, self.values.get, self.scratch.taken())

    @staticmethod
    def descriptor(b: Emitter, pointer: SSAValue, typ: Attribute) -> Rows:
        assert isinstance(typ, TensorType)
        count = b.load(pointer, 0, i64)
        data = b.load(b.offset(pointer, 8, i8), 0, PTR)
        width = row_width(typ)
        return Rows(count, data, width, width, storage(typ.element_type))

    def lower_op(self, op: Operation) -> None:
        if isinstance(op, func.ReturnOp):
            self.lower_return(op)
            return
        involved = any(isinstance(v.type, TensorType) and is_rows(v.type)
                       for v in (*op.operands, *op.results))
        if not involved:
            self.static.lower_op(op)
            return
        if op in self.folded:
            self.static.dead.append(op)
            return
        if op in self.bias_adds:
            self.lower_matvec_plus(op)
            return
        if op in self.pad_sums:
            self.lower_sum_of_pads(op)
            return
        kernel = take_in_place if op in self.in_place else KERNELS.get(type(op))
        if kernel is None:
            raise emit_error(op, "has no native row kernel: the backend cannot lower "
                             "it over rows")
        b = RowEmitter(InsertPoint.before(op), self.static.allocas, self.scratch, self.team)
        args = [self.get(v) for v in op.operands]
        self.scratch.placing = clear_of_reads(b, op, self.rooms.get(op, {}), args)
        result = kernel(b, op, args)
        results = result if isinstance(result, tuple) else () if result is None else (result,)
        for old, new in zip(op.results, results, strict=True):
            if isinstance(new, Rows):
                self.values[old] = new
            else:
                self.static.replace(old, new)
        self.settle(op, op.results)
        self.static.dead.append(op)

    def lower_matvec_plus(self, op: Operation) -> None:
        """A product and the bias added to it, as one kernel."""
        add, bias = self.bias_adds[op]
        b = RowEmitter(InsertPoint.before(op), self.static.allocas, self.scratch, self.team)
        args = [self.get(v) for v in op.operands]
        self.scratch.placing = clear_of_reads(b, op, self.rooms.get(op, {}), args)
        out = matvec_plus(b, op, args, self.static.get(bias))
        self.values[op.results[0]] = self.values[add.results[0]] = out
        self.settle(op, [op.results[0], add.results[0]])
        self.folded.add(add)
        self.static.dead.append(op)

    def lower_sum_of_pads(self, op: Operation) -> None:
        """A sum of pads, each pad's rows written at its offset once."""
        pads = self.pad_sums[op]
        b = RowEmitter(InsertPoint.before(op), self.static.allocas, self.scratch, self.team)
        self.values[op.results[0]] = sum_of_pads(b, op, pads,
                                                 [self.get(p.operands[0]) for p in pads])
        self.settle(op, op.results)
        self.static.dead.append(op)

    def lower_return(self, op: func.ReturnOp) -> None:
        b = RowEmitter(InsertPoint.before(op), self.static.allocas, self.scratch, self.team)
        outs = iter(self.outs)
        kept: list[SSAValue] = []
        for value in op.arguments:
            lowered = self.get(value)
            if not isinstance(value.type, TensorType):
                kept.append(lowered)
                continue
            out = next(outs)
            if not isinstance(lowered, Rows):
                b.move(out, lowered, size(value))
                continue
            if lowered.stride != lowered.width:  # a slice view: made contiguous
                lowered = contiguous(b, lowered, value.type)
            b.store(lowered.count, out, 0)
            b.store(lowered.data, b.offset(out, 8, i8), 0)
        Rewriter.replace_op(op, func.ReturnOp(*kept))


# kernels that allocate their results' rows, in order, and nothing else: the
# ops whose results may be written straight to a result's room
PLACED = (tmath.FusedOp, tmath.MatvecOp)
IN_PLACE_READERS = (tmath.ConcatOp, tmath.FusedOp)  # kernels that read rows by `row_at` only


def in_place_takes(function: func.FuncOp) -> set[Operation]:
    """The `frontier.take`s of rows read only by ops whose kernels read
    them row by row (`IN_PLACE_READERS`): each is lowered as a view of its
    source (`frontier_kernels.take_in_place`), not a copy; a team's
    outlined loop gets the row numbers beside the rows (`rows_functions`)."""
    found: set[Operation] = set()
    for op in function.body.blocks[0].ops:
        if isinstance(op, frontier.TakeOp) and is_rows(op.operands[0].type) and all(
                isinstance(use.operation, IN_PLACE_READERS)
                and use.operation.parent_block() is op.parent_block()
                for use in op.results[0].uses):
            found.add(op)
    return found


def contiguous(b: RowEmitter, value: Rows, typ: Attribute) -> Rows:
    out = b.rows(value.count, typ)

    def row(inner: Emitter, r: SSAValue) -> None:
        src, dst = row_at(inner, value, r), row_at(inner, out, r)
        inner.each(value.width, lambda bj, j: bj.store(bj.load(src, j, value.elem), dst, j))

    b.each(value.count, row)
    return out
