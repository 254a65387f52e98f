"""convert-tmath-to-loops: tensor values become buffers, tmath ops become loops.

Every static f32 tensor becomes an `!llvm.ptr` to row-major data in a stack
buffer (`llvm.alloca` at the top of the function: no allocation on the hot
path); a dynamic `tensor<?xi32>` structure array becomes a pointer to a
`{i64 length, ptr data}` descriptor, so reads from it can be bounds-checked.
Functions take tensor results as trailing out-parameters (destination passing)
and keep scalar results; `invoke.invoke` sites allocate those buffers, and
`scf.if` results that are tensors are copied into a buffer by each branch.
Activation frames (`!tape.frame`) become pointers too; `tape.save`/`tape.load`
become copies and views at byte offsets, and `tape.new` stays (retyped) for
convert-recir-to-llvm, which owns the per-call arena.
Kernels live in `tmath_kernels.py`. Functions over rows (`invoke-to-frontier`'s
batched functions) are lowered by `row_lowering.py`; a batched entry, whose
`frontier.schedule` the runtime runs from the IR before this pass, is erased.

In a module with concurrent invokes, accumulating calls may overlap: dense
gradients go to the running thread's copy of their buffer
(`adjoint.thread_copy`, indexed by the entry argument the buffer came from)
and embedding rows are added under a row lock (`adjoint.lock_row`).

Option `defer-outer-bytes=N` (default -1: never): in a module whose largest
outer-product target is at least N bytes, each `adjoint.accumulate_outer`
into a buffer passed down from a public function's argument becomes a
record in the running thread's log for that argument (`adjoint.log_reserve`,
then `dy` and `x` copied in), which the runtime adds with one product after
the call. Adding each invocation's outer product at once reads and writes
the whole buffer: from L2 where the weights fit (TreeLSTM h=150, U's
gradient 900 KB: deferring was slower), from memory where the largest
does not (h=256, 2.6 MB: deferring every weight's products was faster,
the smaller ones included).

Options `row-threads=T` and `row-team-work=W` (defaults 1 and -1): the
functions over rows run each product over rows with at least W multiply-adds
on a team of up to T threads (`gemm_teams.team_function`; W from `policy.team_min_work`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import FunctionType, ModuleOp, StringAttr, TensorType, i8
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import emit_error
from recir.dialects import adjoint, invoke, tape, tmath
from recir.passes.adjoint_kernels import ADJOINT_KERNELS, accumulate_row
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.pass_options import at_least
from recir.dialects.row_types import is_row_function
from recir.passes.row_lowering import RowFunctionLowering, runs_schedule
from recir.passes.rows import RowTeam
from recir.passes.tmath_kernels import KERNELS as TMATH_KERNELS
from recir.passes.tmath_kernels import size

KERNELS = TMATH_KERNELS | ADJOINT_KERNELS


def is_tensor(typ: Attribute) -> bool:
    return isinstance(typ, TensorType)


def is_pointer(typ: Attribute) -> bool:
    """Tensors and frames become `!llvm.ptr`."""
    return is_tensor(typ) or isinstance(typ, tape.FrameType)


def scalar_type(typ: Attribute) -> Attribute:
    return PTR if isinstance(typ, tape.FrameType) else typ


def lowered_signature(typ: FunctionType) -> FunctionType:
    inputs = [PTR if is_pointer(t) else t for t in typ.inputs]
    outs = [PTR for t in typ.outputs if is_tensor(t)]
    scalars = [scalar_type(t) for t in typ.outputs if not is_tensor(t)]
    return FunctionType.from_lists([*inputs, *outs], scalars)


class FunctionLowering:
    """Lowers one function; old ops die together at the end."""

    def __init__(self, function: func.FuncOp, slots: dict[SSAValue, int] | None = None,
                 logged: dict[SSAValue, int] | None = None):
        """`slots`: in parallel code, the entry argument each argument came
        from; `logged`: the same where outer products are deferred."""
        self.function, self.slots, self.logged = function, slots, logged
        self.entry = function.body.blocks[0]
        self.allocas = InsertPoint.at_start(self.entry)
        self.buffers: dict[SSAValue, SSAValue] = {}
        self.dead: list[Operation] = []

    def get(self, value: SSAValue) -> SSAValue:
        return self.buffers.get(value, value)

    def emitter(self, op: Operation) -> Emitter:
        return Emitter(InsertPoint.before(op), self.allocas)

    def replace(self, old: SSAValue, new: SSAValue) -> None:
        if is_tensor(old.type):
            self.buffers[old] = new
        else:
            old.replace_all_uses_with(new)

    def replace_results(self, op: Operation, result: object) -> None:
        """`op`'s results by a kernel's: one value, a tuple, or None (an
        accumulation writes through `acc`); `op` dies with the others."""
        results = result if isinstance(result, tuple) else () if result is None else (result,)
        for old, new in zip(op.results, results, strict=True):
            self.replace(old, new)
        self.dead.append(op)

    def run(self) -> None:
        signature = self.signature = self.function.function_type
        old_args = [a for a in self.entry.args if is_pointer(a.type)]
        for arg in old_args:
            self.replace(arg, self.entry.insert_arg(PTR, arg.index))
        self.outs = [self.entry.insert_arg(PTR, len(self.entry.args))
                     for t in signature.outputs if is_tensor(t)]
        self.lower_block(self.entry)
        for op in reversed(self.dead):
            op.detach()
            op.erase(safe_erase=False)
        for arg in old_args:
            self.entry.erase_arg(arg)
        self.function.function_type = lowered_signature(signature)

    def lower_block(self, block: Block) -> None:
        for op in list(block.ops):
            self.lower_op(op)

    def lower_op(self, op: Operation) -> None:
        if isinstance(op, adjoint.AccumulateOuterOp) and self.logged is not None and \
                self.logged.get(op.operands[0], -1) >= 0:
            self.log_outer(op, self.logged[op.operands[0]])
        elif type(op) in KERNELS:
            self.lower_kernel(op)
        elif isinstance(op, invoke.InvokeOp):
            self.lower_invoke(op)
        elif isinstance(op, invoke.JoinOp):
            self.lower_join(op)
        elif isinstance(op, scf.IfOp):
            self.lower_if(op)
        elif isinstance(op, func.ReturnOp):
            self.lower_return(op)
        elif isinstance(op, scf.YieldOp):
            return
        elif type(op) in TAPE:
            TAPE[type(op)](self, self.emitter(op), op)
            self.dead.append(op)
        else:
            self.lower_other(op)

    def lower_kernel(self, op: Operation) -> None:
        """`op` by its kernel; on a team, an accumulation into a table the
        threads share locks its rows, others add into the thread's copy."""
        operands = [self.get(v) for v in op.operands]
        kernel = KERNELS[type(op)]
        if self.slots is not None and isinstance(op, adjoint.AccumulateRowOp):
            kernel = partial(accumulate_row, locked=True)  # the threads share the table
        elif self.slots is not None and isinstance(op, adjoint.AccumulateBase):
            operands[0] = self.thread_copy(op, operands[0])
        self.replace_results(op, kernel(self.emitter(op), op, operands))

    def log_outer(self, op: adjoint.AccumulateOuterOp, slot: int) -> None:
        """A record `dy ++ x` in this thread's log for `slot`."""
        rows, cols = tmath.shape_of(op.operands[0])
        b = self.emitter(op)
        room = b.value(adjoint.LogReserveOp(slot, 4 * (rows + cols)))
        b.copy(room, self.get(op.operands[1]), rows)
        b.copy(b.offset(room, rows), self.get(op.operands[2]), cols)
        self.dead.append(op)

    def thread_copy(self, op: Operation, buffer: SSAValue) -> SSAValue:
        assert self.slots is not None
        slot = self.slots.get(op.operands[0])
        if slot is None or slot < 0:
            raise emit_error(op, "accumulates into a buffer that is not passed down "
                             "unchanged from one argument of a public function, so "
                             "concurrent calls cannot each get their own copy")
        elements = math.prod(tmath.shape_of(op.operands[0]))
        return self.emitter(op).value(adjoint.ThreadCopyOp(buffer, slot, elements))

    def lower_other(self, op: Operation) -> None:
        if any(is_tensor(v.type) for v in (*op.operands, *op.results)):
            raise emit_error(op, "has tensor operands or results the native "
                             "backend cannot lower")
        for region in op.regions:
            for block in region.blocks:
                self.lower_block(block)

    def lower_invoke(self, op: invoke.InvokeOp) -> None:
        b = self.emitter(op)
        outs = {r: b.alloca(size(r)) for r in op.res if is_tensor(r.type)}
        scalars = [r for r in op.res if r not in outs]
        args = [*(self.get(a) for a in op.args), *outs.values()]
        call = invoke.InvokeOp(op.callee, args, [scalar_type(r.type) for r in scalars])
        call.concurrent = op.concurrent
        b.op(call)
        for old, new in [*outs.items(), *zip(scalars, call.res)]:
            self.replace(old, new)
        self.dead.append(op)

    def lower_join(self, op: invoke.JoinOp) -> None:
        """Tensors were written into the caller's buffers: only scalars join."""
        scalars = [(old, v) for old, v in zip(op.joined, op.spawned) if not is_tensor(v.type)]
        for old, value in zip(op.joined, op.spawned):
            if is_tensor(value.type):
                self.buffers[old] = self.get(value)
        join = self.emitter(op).op(invoke.JoinOp([v for _, v in scalars]))
        for (old, _), new in zip(scalars, join.results):
            old.replace_all_uses_with(new)
        self.dead.append(op)

    def lower_if(self, op: scf.IfOp) -> None:
        b = self.emitter(op)
        buffers = [b.alloca(size(r)) if is_tensor(r.type) else None for r in op.results]
        for region in op.regions:
            for block in region.blocks:
                self.lower_block(block)
                self.lower_yield(block, buffers)
        scalars = [r for r, buf in zip(op.results, buffers) if buf is None]
        regions = [op.detach_region(r) for r in list(op.regions)]
        new = scf.IfOp(op.cond, [scalar_type(r.type) for r in scalars], *regions)
        b.op(new)
        new_scalars = iter(new.results)
        for result, buf in zip(op.results, buffers):
            self.replace(result, buf if buf is not None else next(new_scalars))
        self.dead.append(op)

    def lower_yield(self, block: Block, buffers: list[SSAValue | None]) -> None:
        assert isinstance(block.last_op, scf.YieldOp)
        self.copy_out(block.last_op, buffers)

    def lower_return(self, op: func.ReturnOp) -> None:
        outs = iter(self.outs)
        self.copy_out(op, [next(outs) if is_tensor(t) else None for t in self.signature.outputs])

    def copy_out(self, op: scf.YieldOp | func.ReturnOp, buffers: list[SSAValue | None]) -> None:
        """Copies each tensor `op` passes on into its buffer; `op` then
        passes on the scalars only."""
        b = self.emitter(op)
        for buf, value in zip(buffers, op.operands):
            if buf is not None:
                b.copy(buf, self.get(value), size(value))
        kept = [v for v, buf in zip(op.operands, buffers) if buf is None]
        Rewriter.replace_op(op, type(op)(*kept))


def lower_new(lowering: FunctionLowering, b: Emitter, op: tape.NewOp) -> None:
    new = tape.NewOp.create(properties=dict(op.properties), result_types=[PTR])
    lowering.replace(op.frame, b.value(new))


def lower_save(lowering: FunctionLowering, b: Emitter, op: tape.SaveOp) -> None:
    """Tensors are copied into the frame: their buffer dies with the call."""
    where = b.offset(op.frame, op.offset.value.data, i8)
    value = lowering.get(op.value)
    if is_tensor(op.value.type):
        b.copy(where, value, size(op.value))
    else:
        b.store(value, where, 0)


def lower_load(lowering: FunctionLowering, b: Emitter, op: tape.LoadOp) -> None:
    """Tensors are read in place: a frame outlives the backward that reads it."""
    where = b.offset(op.frame, op.offset.value.data, i8)
    typ = op.result.type
    lowering.replace(op.result, where if is_tensor(typ) else b.load(where, 0, scalar_type(typ)))


TAPE = {tape.NewOp: lower_new, tape.SaveOp: lower_save, tape.LoadOp: lower_load}


@dataclass(frozen=True)
class ConvertTmathToLoopsPass(ModulePass):
    name = "convert-tmath-to-loops"
    defer_outer_bytes: int = -1
    row_threads: int = 1
    row_team_work: int = -1

    def __post_init__(self) -> None:
        at_least(self, defer_outer_bytes=-1, row_threads=1, row_team_work=-1)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        concurrent = any(isinstance(inner, invoke.InvokeOp) and inner.concurrent is not None
                         for inner in op.walk())
        largest = max((4 * size(inner.operands[0]) for inner in op.walk()
                       if isinstance(inner, adjoint.AccumulateOuterOp)), default=-1)
        outer = 0 <= self.defer_outer_bytes <= largest
        found = entry_slots(op) if concurrent or outer else None
        slots = found if concurrent else None
        logged = found if outer else None
        for function in list(op.ops):
            if isinstance(function, func.FuncOp) and function.body.blocks:
                if runs_schedule(function):  # run from the IR before lowering,
                    op.body.blocks[0].erase_op(function)  # by `frontier_compile.py`
                    continue
                if is_row_function(function):  # invoke-to-frontier's batched functions
                    team = RowTeam(self.row_threads, self.row_team_work)
                    RowFunctionLowering(function, FunctionLowering(function), team).run()
                    continue
                FunctionLowering(function, slots, logged).run()


def entry_slots(module: ModuleOp) -> dict[SSAValue, int]:
    """For each function argument, the public function's argument it is passed
    down from unchanged (-1 where two call sites disagree)."""
    functions = {f.sym_name.data: f for f in module.ops
                 if isinstance(f, func.FuncOp) and f.body.blocks}
    slots: dict[SSAValue, int] = {}
    todo = [f for f in functions.values() if f.sym_visibility != StringAttr("private")]
    for f in todo:
        slots.update((a, i) for i, a in enumerate(f.body.blocks[0].args))
    while todo:
        for call in todo.pop().walk():
            callee = functions.get(call.callee.string_value()) if isinstance(
                call, invoke.InvokeOp) else None
            if callee is None:
                continue
            for param, value in zip(callee.body.blocks[0].args, call.args):
                slot = slots.get(value, -1)
                if slots.get(param, slot) != slot:
                    slot = -1
                if slots.get(param) != slot:
                    slots[param] = slot
                    todo.append(callee)
    return slots
