"""Functions over rows (`invoke-to-frontier`'s `@f__expand`, `@f__post`) to loops.

`convert-tmath-to-loops` hands a function here when it computes rows (a
`frontier` op, or an op whose result has a leading dynamic dimension) and
holds no invoke, branch or frame: the batched functions are straight-line.
The ABI, which `backend/row_schedule.py` calls:

- a rows value (`tensor<?x...>`, a dynamic structure array too) is passed as
  a pointer to `{i64 rows, ptr data}`, row-major and contiguous; an `i1`
  element is one byte (NumPy's `bool`);
- static tensors are pointers to their data, scalars stay scalars;
- after the inputs come the results' slots: a rows result's descriptor,
  which the function fills (its data lies in the scratch buffer or in an
  argument), a static tensor's buffer; scalar results are returned;
- last come `scratch: ptr` and `scratch_bytes: i64`. Every temporary whose
  row count is known only at run time is bump-allocated from it, each
  64-byte aligned; a `partition` output takes its input's row count (the
  upper bound) and keeps the count it found. The caller sizes the buffer
  (`scratch_bytes_per_row` times its largest frontier) and, where a check
  fails on `SCRATCH_EXHAUSTED`, calls again with a larger one: the
  functions write nothing but their results.

Every index read at run time is checked (`cf.assert`, an error return):
native code never reads outside a buffer. Kernels: `row_kernels.py`
(tmath and arith row forms) and `frontier_kernels.py`. Two pairs of ops are
lowered as one, each sparing a pass over the rows: a product over rows and
the bias added to it (`row_products.matvec_plus`), and a sum of
non-overlapping pads, a slice's gradients (`adjoint_row_kernels.sum_of_pads`).
"""

from __future__ import annotations

from typing import Protocol

from xdsl.dialects import func, scf
from xdsl.dialects.builtin import FunctionType, TensorType, i8, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import emit_error
from recir.dialects import frontier, invoke, tape
from recir.dialects.row_types import is_rows
from recir.passes.adjoint_row_kernels import ADJOINT_ROW_KERNELS, pad_sums, sum_of_pads
from recir.passes.frontier_kernels import FRONTIER_KERNELS
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.row_kernels import ROW_KERNELS
from recir.passes.row_products import bias_adds, matvec_plus
from recir.passes.rows import (
    ALIGN,
    SERIAL,
    RowEmitter,
    Rows,
    RowTeam,
    Scratch,
    element_bytes,
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


def scratch_bytes_per_row(function: func.FuncOp) -> int:
    """An upper bound of the scratch one row of the largest frontier takes:
    every rows result of every op, each with its alignment."""
    total = 0
    for op in function.walk():
        for r in op.results:
            if is_rows(r.type):
                total += row_width(r.type) * element_bytes(r.type.element_type) + ALIGN
    return total


def runs_schedule(function: func.FuncOp) -> bool:
    """A batched entry: the runtime runs its `frontier.schedule`, and the
    ops before it as a function of their own (`recir/frontier_compile.py`)."""
    return any(isinstance(op, frontier.ScheduleOp) for op in function.walk())


def is_row_function(function: func.FuncOp) -> bool:
    """Straight-line code that computes rows (not a recursive function's
    reads of its structure arrays, which take one index at a time)."""
    computes_rows = False
    for op in function.walk():
        if isinstance(op, invoke.InvokeOp | scf.IfOp | tape.NewOp | tape.SaveOp | tape.LoadOp
                      | frontier.ScheduleOp):
            return False
        if op.dialect_name() == "frontier" or any(is_rows(r.type) for r in op.results):
            computes_rows = True
    return computes_rows


class RowFunctionLowering:
    """Lowers one straight-line function over rows (see the module docstring)."""

    def __init__(self, function: func.FuncOp, static: StaticLowering,
                 team: RowTeam = SERIAL):
        """`static` lowers the uniform ops, as in every other function;
        `team` runs its products over rows (`row_products.team_function`)."""
        self.function, self.static, self.team = function, static, team
        self.entry = function.body.blocks[0]
        self.values: dict[SSAValue, Rows] = {}
        self.bias_adds = bias_adds(function)  # matvec -> (its bias add, the bias)
        self.pad_sums = pad_sums(function)  # a sum of pads -> its pads
        self.folded: set[Operation] = {p for pads in self.pad_sums.values() for p in pads}
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
        self.scratch = Scratch(base, capacity, start.i64(0))
        for op in list(entry.ops):
            self.lower_op(op)
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
        kernel = KERNELS.get(type(op))
        if kernel is None:
            raise emit_error(op, "has no native row kernel: the backend cannot lower "
                             "it over rows")
        b = RowEmitter(InsertPoint.before(op), self.static.allocas, self.scratch, self.team)
        result = kernel(b, op, [self.get(v) for v in op.operands])
        results = result if isinstance(result, tuple) else () if result is None else (result,)
        for old, new in zip(op.results, results, strict=True):
            if isinstance(new, Rows):
                self.values[old] = new
            else:
                self.static.replace(old, new)
        self.static.dead.append(op)

    def lower_matvec_plus(self, op: Operation) -> None:
        """A product and the bias added to it, as one kernel."""
        add, bias = self.bias_adds[op]
        b = RowEmitter(InsertPoint.before(op), self.static.allocas, self.scratch, self.team)
        out = matvec_plus(b, op, [self.get(v) for v in op.operands], self.static.get(bias))
        self.values[op.results[0]] = self.values[add.results[0]] = out
        self.folded.add(add)
        self.static.dead.append(op)

    def lower_sum_of_pads(self, op: Operation) -> None:
        """A sum of pads, each pad's rows written at its offset once."""
        pads = self.pad_sums[op]
        b = RowEmitter(InsertPoint.before(op), self.static.allocas, self.scratch, self.team)
        self.values[op.results[0]] = sum_of_pads(b, op, pads,
                                                 [self.get(p.operands[0]) for p in pads])
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


def contiguous(b: RowEmitter, value: Rows, typ: Attribute) -> Rows:
    out = b.rows(value.count, typ)

    def row(inner: Emitter, r: SSAValue, _: object) -> tuple[()]:
        src, dst = row_at(inner, value, r), row_at(inner, out, r)
        inner.loop(value.width, lambda bj, j, __: (
            bj.store(bj.load(src, j, value.elem), dst, j), ())[1])
        return ()

    b.loop(value.count, row)
    return out
