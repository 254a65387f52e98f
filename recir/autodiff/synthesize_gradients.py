"""synthesize-gradients: reverse mode through recursion, with activation frames.

For every function `@f` reachable from the entry it adds

- `@f_fwd(args) -> (results, !tape.frame)`: `@f`'s body, calling the `_fwd`
  of its callees, saving into a fresh frame what the backward needs and the
  frames of its children. Each invocation writes only its own frame, and the
  frames form a tree shaped like the call tree, so a value saved by one of
  the many runs of an op reaches exactly the backward run that needs it.
  What the backward reads but can cheaply rebuild from what it reads anyway
  is recomputed there instead, and an `scf.if` branch that saves anything
  has a frame of its own (`saving.py`).
- `@f_bwd(frame, d_results, passthrough args, gradient accumulators)
  -> d(other float args)`: the reverse sweep of `@f`'s body, one rule per op
  (`rules.py`), invoking its callees' `_bwd` in reverse order: recursive
  where `@f` is, mutually recursive where it is. `scf.if` is mirrored on the
  saved condition.

Parameter gradients are accumulated in place into buffers passed down from
the entry (`adjoint.accumulate*`), never summed up the call tree; once
invocations run concurrently, each thread gets its own buffers.

Finally `@<entry>_grad(args, accumulators) -> results` runs the forward, seeds
the loss result (option `loss`, default the last) with 1, runs the backward,
and adds d loss / d arg into one accumulator per f32 tensor argument.

Options: `entry` (default: the only public function), `loss`, `wrapper`
(false: no `_grad`, as for a frontier's `@f__post`, whose loss is one row
per invocation and whose backward the frontier schedule runs). Rows
(`row_types.py`) cannot go in a frame: the entry's `_fwd` returns the costly
ones (`saving.rebuilds_row`) before its frame, its `_bwd` takes them first,
and the rest are rebuilt (all of an invoked function's). A
`frontier.schedule` gets a `frontier.schedule_grad`, which runs the schedule
backwards through those functions' `_fwd`/`_bwd`.
"""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    FunctionType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import IsTerminator
from xdsl.transforms.dead_code_elimination import region_dce

from recir.autodiff import analysis, saving
from recir.autodiff.analysis import is_float, is_float_tensor
from recir.autodiff.rules import (VJP_RULES, Bilinear, Contribution, Emit, Outer, Row, RowSum,
                                  Sides, parameter_only)
from recir.autodiff.saving import FrameLayouts, region_of
from recir.diagnostics import RecirError, emit_error
from recir.dialects import adjoint, frontier, invoke, tape, tmath
from recir.dialects.row_types import is_rows


@dataclass
class Scope:
    """One region of the backward: the forward region it mirrors, its block,
    cotangents, primal values loaded in it and, once read, that region's frame."""

    region: Region
    block: Block
    frame: SSAValue | None = None
    parent: Scope | None = None
    cot: dict[SSAValue, SSAValue] = field(default_factory=dict)
    loads: ChainMap[SSAValue, SSAValue] = field(default_factory=ChainMap)

    def inner(self, region: Region, block: Block) -> Scope:
        return Scope(region, block, None, self, {}, self.loads.new_child())


class Synthesis:
    def __init__(self, module: ModuleOp, entry: str, loss: int, wrapper: bool = True):
        self.module = module
        self.functions = analysis.functions_of(module)
        self.entry = entry or self.only_public()
        if self.entry not in self.functions:
            raise RecirError(f"error: synthesize-gradients: no function @{self.entry}")
        if self.functions[self.entry].is_declaration:
            raise emit_error(self.functions[self.entry], "is a declaration: it has no "
                             "body to differentiate")
        self.loss, self.wrapper = loss, wrapper
        # per function, the rows its `_fwd` returns and its `_bwd` takes first
        self.saved_rows: dict[str, list[SSAValue]] = {}
        self.names = analysis.reachable(self.functions, self.entry)
        self.passthrough = analysis.passthrough(self.functions, self.names)
        for name in self.names:
            for suffix in ("_fwd", "_bwd", "_grad"):
                if name + suffix in self.functions:
                    raise RecirError(f"error: synthesize-gradients: @{name}{suffix} exists")

    def only_public(self) -> str:
        public = [n for n, f in self.functions.items() if f.sym_visibility != StringAttr(
            "private")]
        if len(public) != 1:
            raise RecirError("error: synthesize-gradients: name the entry function "
                             f"(entry=...), found {len(public)} public functions")
        return public[0]

    def run(self) -> None:
        for name in self.names:
            for function in FunctionGradient(self, self.functions[name]).build():
                self.module.body.blocks[0].add_op(function)
        if self.wrapper:
            self.module.body.blocks[0].add_op(self.grad_wrapper())

    def bwd_type(self, name: str) -> FunctionType:
        f = self.functions[name]
        keep = sorted(self.passthrough[name])
        inputs = [*(v.type for v in self.saved_rows.get(name, [])), tape.FRAME,
                  *(t for t in f.function_type.outputs if is_float(t)),
                  *(f.args[p].type for p in keep),
                  *(f.args[p].type for p in keep if is_float_tensor(f.args[p].type))]
        outputs = [a.type for i, a in enumerate(f.args)
                   if i not in self.passthrough[name] and is_float(a.type)]
        return FunctionType.from_lists(inputs, outputs)

    def grad_wrapper(self) -> func.FuncOp:
        f = self.functions[self.entry]
        outputs = list(f.function_type.outputs)
        if not -len(outputs) <= self.loss < len(outputs):  # (not wrapped around)
            raise emit_error(f, f"result {self.loss} is out of range: @{self.entry} has "
                             f"{len(outputs)} results")
        loss = self.loss % len(outputs)
        if not is_float(outputs[loss]) or (isinstance(outputs[loss], TensorType) and not (
                is_rows(outputs[loss]) and len(outputs[loss].get_shape()) == 1)):
            raise emit_error(f, f"result {self.loss} must be an f32 loss (or rows of one, "
                             "summed) to differentiate")
        args = list(f.function_type.inputs)
        block = Block(arg_types=[*args, *(t for t in args if is_float_tensor(t))])
        e = Emit(InsertPoint.at_end(block))
        inputs = block.args[:len(args)]
        saved = [v.type for v in self.saved_rows.get(self.entry, [])]
        fwd = e.op(invoke.InvokeOp(f"{self.entry}_fwd", inputs,
                                   [*outputs, *saved, tape.FRAME]))
        seeds = [e.seed(t, i == loss, fwd.results[i]) for i, t in enumerate(outputs)
                 if is_float(t)]
        e.op(invoke.InvokeOp(f"{self.entry}_bwd", [*fwd.results[len(outputs):], *seeds,
                                                    *inputs, *block.args[len(args):]], []))
        e.op(func.ReturnOp(*fwd.results[:len(outputs)]))
        return func.FuncOp(f"{self.entry}_grad", (block.arg_types, outputs),
                           Region(block))


class FunctionGradient:
    """Builds `@f_bwd`, then `@f_fwd` saving what the backward asked for.

    The backward is built twice: the first build finds the forward values
    (and costly rows) it reads; `saving.plan` picks those cheap to rebuild
    from the others; the second build recomputes those, loads the rest from
    the frames, and takes the entry's costly rows as arguments.
    """

    def __init__(self, synthesis: Synthesis, function: func.FuncOp):
        self.s, self.f = synthesis, function
        self.name = function.sym_name.data
        self.keep = synthesis.passthrough[self.name]
        self.varied = analysis.varied(function, self.keep)
        self.recompute: set[SSAValue] = set()
        self.read: dict[SSAValue, None] = {}
        self.costly_rows: dict[SSAValue, None] = {}
        self.saved: dict[SSAValue, SSAValue] = {}
        self.sides = Sides()
        self.layouts = FrameLayouts(function.body)

    def build(self) -> list[func.FuncOp]:
        self.backward().erase()
        self.recompute = saving.plan(self.f, self.read, self.given)
        if self.name == self.s.entry:
            self.s.saved_rows[self.name] = list(self.costly_rows)
        self.layouts = FrameLayouts(self.f.body)
        bwd = self.backward()
        rows = saving.drop_unread_rows(bwd, self.s.saved_rows.get(self.name, []))
        self.s.saved_rows[self.name] = rows
        return [saving.forward_function(self.f, self.layouts, rows), bwd]

    # the backward

    def backward(self) -> func.FuncOp:
        typ = self.s.bwd_type(self.name)
        block = Block(arg_types=typ.inputs)
        rows = self.s.saved_rows.get(self.name, [])
        self.saved = dict(zip(rows, block.args))
        self.frame = block.args[len(rows)]
        args = iter(block.args[len(rows) + 1:])
        d_results = [next(args) for t in self.f.function_type.outputs if is_float(t)]
        keep = sorted(self.keep)
        self.given = {self.f.args[p]: next(args) for p in keep}
        self.accs = {self.f.args[p]: next(args) for p in keep
                     if is_float_tensor(self.f.args[p].type)}
        scope = Scope(self.f.body, block, self.frame)
        e = Emit(InsertPoint.at_end(block))
        body = self.f.body.blocks[0]
        returned = [v for v in body.last_op.operands if is_float(v.type)]
        for value, d in zip(returned, d_results):
            self.contribute(scope, value, d, e)
        self.sweep(body, scope, e)
        outs = [scope.cot.get(a) or e.zero(a.type) for i, a in enumerate(self.f.args)
                if i not in self.keep and is_float(a.type)]
        e.op(func.ReturnOp(*outs))
        region = Region(block)
        region_dce(region)
        return func.FuncOp(f"{self.name}_bwd", typ, region, visibility="private")

    def sweep(self, block: Block, scope: Scope, e: Emit) -> None:
        for op in reversed(list(block.ops)):
            if op.has_trait(IsTerminator):
                continue
            if isinstance(op, invoke.InvokeOp):
                self.invoke_backward(op, scope, e)
            elif isinstance(op, frontier.ScheduleOp):
                self.schedule_backward(op, scope, e)
            elif isinstance(op, scf.IfOp):
                self.if_backward(op, scope, e)
            elif any(is_float(r.type) for r in op.results):
                self.op_backward(op, scope, e)

    def op_backward(self, op: Operation, scope: Scope, e: Emit) -> None:
        if len(op.results) != 1 or (dy := scope.cot.get(op.results[0])) is None:
            return
        rule = VJP_RULES.get(type(op))
        if rule is None:
            raise emit_error(op, "has no gradient rule")
        for index, contribution in rule(e, op, dy, lambda v: self.primal(v, scope, e)):
            self.contribute(scope, op.operands[index], contribution, e)

    def invoke_backward(self, op: invoke.InvokeOp, scope: Scope, e: Emit) -> None:
        callee = op.callee.string_value()
        floats = [r for r in op.res if is_float(r.type)]
        if all(scope.cot.get(r) is None for r in floats):
            return
        g, keep = self.s.functions[callee], sorted(self.s.passthrough[callee])
        region = op.parent_region()
        assert region is not None
        offset = self.layouts.slot(op, region, 8, 8)
        child = e(tape.LoadOp(self.frame_of(region, scope), offset, tape.FRAME))
        ds = [scope.cot.get(r) or e.zero(r.type) for r in floats]
        given = [self.primal(op.args[p], scope, e) for p in keep]
        accs = [self.accs[op.args[p]] for p in keep if is_float_tensor(g.args[p].type)]
        typ = self.s.bwd_type(callee)
        call = e.op(invoke.InvokeOp(f"{callee}_bwd", [child, *ds, *given, *accs],
                                    typ.outputs.data))
        call.location = op.location
        others = [p for p, a in enumerate(g.args) if p not in keep and is_float(a.type)]
        for p, d in zip(others, call.results):
            self.contribute(scope, op.args[p], d, e)

    def schedule_backward(self, op: frontier.ScheduleOp, scope: Scope, e: Emit) -> None:
        """A frontier schedule's gradient is the runtime's schedule run
        backwards (`frontier.schedule_grad`), through the `_fwd`/`_bwd` of
        its batched functions."""
        floats = [r for r in op.outputs if is_float(r.type)]
        if all(scope.cot.get(r) is None for r in floats):
            return
        moving = [self.primal(v, scope, e) for v in op.moving]
        shared = [self.primal(v, scope, e) for v in op.shared]
        ds = [scope.cot.get(r) or e.seed(r.type, False, moving[0]) for r in floats]
        grad = e.op(frontier.ScheduleGradOp(op, ds, moving, shared))
        operands = [v for v in (*op.moving, *op.shared) if is_float_tensor(v.type)]
        for value, d in zip(operands, grad.results, strict=True):
            self.contribute(scope, value, d, e)

    def if_backward(self, op: scf.IfOp, scope: Scope, e: Emit) -> None:
        douts = [scope.cot.get(r) for r in op.results]
        if all(d is None for d in douts):
            return
        targets = self.free_values(op)
        cond = self.primal(op.cond, scope, e)
        regions = []
        for fwd_region in op.regions:
            fwd_block = fwd_region.blocks[0]
            block = Block()
            inner = scope.inner(fwd_region, block)
            ie = Emit(InsertPoint.at_end(block))
            for value, d in zip(fwd_block.last_op.operands, douts):
                if d is not None:
                    self.contribute(inner, value, d, ie)
            self.sweep(fwd_block, inner, ie)
            ie.op(scf.YieldOp(*(inner.cot.get(t) or ie.zero(t.type) for t in targets)))
            regions.append(Region(block))
        new = e.op(scf.IfOp(cond, [t.type for t in targets], *regions))
        for t, d in zip(targets, new.results):
            self.contribute(scope, t, d, e)

    def free_values(self, op: scf.IfOp) -> list[SSAValue]:
        """Float values from outside `op` that its regions use and that need
        a cotangent: the backward `scf.if` yields theirs."""
        seen: dict[SSAValue, None] = {}
        for inner in op.walk():
            for v in inner.operands:
                owner = v.owner if isinstance(v.owner, Operation) else v.owner.parent_op()
                inside = owner is not None and op.is_ancestor(owner) and owner is not op
                if not inside and v in self.varied and v not in self.accs and is_float(v.type):
                    seen[v] = None
        return list(seen)

    def contribute(self, scope: Scope, value: SSAValue, c: Contribution, e: Emit) -> None:
        if value in self.accs:
            e.op(self.accumulate(self.accs[value], c))
            return
        if value not in self.varied or not is_float(value.type):
            return
        if isinstance(c, Row) and c.rest is not None and is_rows(value.type) and (
                c := self.sides.scattered(e, scope.cot, value, c)) is None:
            return
        if not isinstance(c, SSAValue) or is_rows(c) and not is_rows(value):
            raise parameter_only(value, c)
        old = scope.cot.get(value)
        scope.cot[value] = c if old is None else e.add(old, c)

    @staticmethod
    def accumulate(acc: SSAValue, c: Contribution) -> Operation:
        if isinstance(c, Outer):
            return adjoint.AccumulateOuterOp.create(operands=[acc, c.a, c.b])
        if isinstance(c, Row):
            return adjoint.AccumulateRowOp.create(operands=[acc, c.index, c.value])
        if isinstance(c, Bilinear):
            return adjoint.AccumulateBilinearOp.create(operands=[acc, c.dr, c.x, c.y])
        if isinstance(c, RowSum):
            return adjoint.AccumulateOp.create(operands=[acc, c.value])
        return adjoint.AccumulateOp.create(operands=[acc, c])

    def primal(self, value: SSAValue, scope: Scope, e: Emit) -> SSAValue:
        """`value` of the forward, in the backward: given, rebuilt or loaded."""
        if value in self.given:
            return self.given[value]
        if value in self.saved:
            return self.saved[value]
        if value in scope.loads:
            return scope.loads[value]
        owner = value.owner
        if isinstance(owner, arith.ConstantOp | tmath.ConstantOp):
            loaded = e(owner.clone())
        elif is_rows(value) and isinstance(owner, Operation) and not owner.regions:
            if not saving.rebuilds_row(owner):
                self.costly_rows[value] = None
            return self.recompute_rows(owner, scope, e)[value.index]  # type: ignore[attr-defined]
        elif value in self.recompute:
            assert isinstance(owner, Operation)
            operands = {v: self.primal(v, scope, e) for v in owner.operands}
            loaded = e(owner.clone(operands, clone_name_hints=False))
        else:
            self.read[value] = None
            region = region_of(value)
            offset = self.layouts.slot(value, region, *saving.value_bytes(value))
            loaded = e(tape.LoadOp(self.frame_of(region, scope), offset, value.type))
        scope.loads[value] = loaded
        return loaded

    def recompute_rows(self, op: Operation, scope: Scope, e: Emit) -> list[SSAValue]:
        """Rows (a frontier's values) have no static size to save in a frame:
        the backward rebuilds those not given from its arguments (pure,
        loop-free ops of a batched function)."""
        clone = op.clone(value_mapper={v: self.primal(v, scope, e) for v in op.operands})
        e.op(clone)
        for old, new in zip(op.results, clone.results, strict=True):
            scope.loads[old] = new
        return list(clone.results)

    def frame_of(self, region: Region, scope: Scope) -> SSAValue:
        """The frame of forward `region` in the backward: the function's, or a
        branch's, loaded at the start of the backward region mirroring it."""
        while scope.region is not region:
            assert scope.parent is not None, "a value from outside the function"
            scope = scope.parent
        if scope.frame is None:
            assert scope.parent is not None
            parent = self.frame_of(scope.parent.region, scope.parent)
            load = tape.LoadOp(parent, self.layouts.branch_slot(region), tape.FRAME)
            Rewriter.insert_op(load, InsertPoint.at_start(scope.block))
            scope.frame = load.result
        return scope.frame


@dataclass(frozen=True)
class SynthesizeGradientsPass(ModulePass):
    name = "synthesize-gradients"

    entry: str = ""
    loss: int = -1
    wrapper: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        Synthesis(op, self.entry, self.loss, self.wrapper).run()

