"""lower-invoke-to-call-return: invokes to one static tagged-dataflow graph.

The static-recursion thesis's transformation (Yaghi's, as Kostopoulou uses
it): each public `func.func` becomes a `dataflow.graph` in which its body and
the body of every function it reaches through `invoke.invoke` are placed once.
The call sites of each callee are numbered (0, 1, ... in placement order);
an invoke becomes one `dataflow.call` per argument, feeding the callee's
per-parameter `dataflow.merge`, and one `dataflow.return` per result, reading
the callee's result. `scf.if` becomes a `dataflow.switch` per value a branch
reads from outside it and a `dataflow.join` per result; constants become
`dataflow.gate`s on a token of their scope (the first argument, switched into
branches). Run `capture-outer-refs` first: subgraphs must be closed functions.

No options.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnrealizedConversionCastOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import SymbolTable

from recir.diagnostics import emit_error
from recir.dialects import dataflow as df
from recir.dialects import invoke


@dataclass
class Scope:
    """A region being placed: values defined in it, its trigger, its switches."""

    parent: Scope | None
    trigger: SSAValue | None = None
    values: dict[SSAValue, SSAValue] = field(default_factory=dict[SSAValue, SSAValue])
    pred: SSAValue | None = None  # the branch's predicate, in the parent scope
    side: int = 0  # 0: then (the switch's true output), 1: else
    switches: dict[SSAValue, df.SwitchOp] | None = None  # shared by both branches


@dataclass
class Callee:
    """A function placed once in the graph: its parameter merges and results."""

    func: func.FuncOp
    merges: list[df.MergeOp]
    sites: list[list[SSAValue]]  # per parameter, the calls feeding its merge
    results: list[SSAValue]  # placeholders until the body is placed


class GraphBuilder:
    """Places the entry's body and then each reachable callee's, in order."""

    def __init__(self, module: ModuleOp):
        self.module = module
        self.ops: list[Operation] = []
        self.callees: dict[str, Callee] = {}
        self.queue: list[str] = []

    def emit(self, op: Operation) -> Operation:
        self.ops.append(op)
        return op

    def build(self, entry: func.FuncOp) -> df.GraphOp:
        graph = df.GraphOp(entry.sym_name.data, entry.function_type)
        block = graph.body.block
        for new, old in zip(block.args, entry.args, strict=True):
            new.name_hint = old.name_hint
        scope = Scope(None)
        scope.values = dict(zip(entry.args, block.args, strict=True))
        if not block.args:
            raise emit_error(entry, "an entry without arguments cannot be lowered to "
                             "dataflow: no token would start it")
        scope.trigger = block.args[0]
        results = self.place_body(entry, scope)
        while self.queue:
            self.place_callee(self.callees[self.queue.pop(0)])
        for callee in self.callees.values():
            for merge, calls in zip(callee.merges, callee.sites, strict=True):
                merge.operands = calls
        block.add_ops([*self.ops, df.OutputOp(*results)])
        return graph

    def place_callee(self, callee: Callee) -> None:
        scope = Scope(None)
        scope.values = {a: m.output for a, m in zip(callee.func.args, callee.merges,
                                                    strict=True)}
        scope.trigger = callee.merges[0].output
        for arg, merge in zip(callee.func.args, callee.merges, strict=True):
            merge.output.name_hint = arg.name_hint
        self.ops.extend(callee.merges)
        results = self.place_body(callee.func, scope)
        for holder, value in zip(callee.results, results, strict=True):
            holder.replace_all_uses_with(value)
            holder.owner.erase()
        callee.results = results

    def place_body(self, fn: func.FuncOp, scope: Scope) -> list[SSAValue]:
        ret = fn.body.block.last_op
        if not isinstance(ret, func.ReturnOp):
            raise emit_error(fn, "body must end with 'func.return'")
        for op in fn.body.block.ops:
            if op is not ret:
                self.place(op, scope)
        return [self.lookup(v, scope, ret) for v in ret.arguments]

    def place(self, op: Operation, scope: Scope) -> None:
        if isinstance(op, invoke.InvokeOp):
            return self.place_invoke(op, scope)
        if isinstance(op, scf.IfOp):
            return self.place_if(op, scope)
        if isinstance(op, invoke.JoinOp):  # a call's tokens arrive when it is done
            scope.values.update((r, self.lookup(v, scope, op))
                                for r, v in zip(op.joined, op.spawned, strict=True))
            return None
        if isinstance(op, invoke.SubgraphOp):
            raise emit_error(op, "run capture-outer-refs before "
                             "lower-invoke-to-call-return")
        if isinstance(op, func.CallOp | scf.ForOp | scf.WhileOp):
            raise emit_error(op, "is not supported by the dataflow lowering "
                             "(use invoke.invoke and scf.if)")
        if not op.operands and not op.regions:  # a constant: gate it
            static = self.emit(op.clone())
            trigger = self.trigger(scope)
            for old, new in zip(op.results, static.results, strict=True):
                scope.values[old] = self.emit(df.GateOp(new, trigger)).results[0]
            return None
        new = op.clone()
        new.operands = [self.lookup(v, scope, op) for v in op.operands]
        self.emit(new)
        scope.values.update(zip(op.results, new.results, strict=True))
        return None

    def place_invoke(self, op: invoke.InvokeOp, scope: Scope) -> None:
        callee = self.callee(op)
        site = len(callee.sites[0])
        name = op.callee.root_reference.data
        for j, arg in enumerate(op.args):
            call = self.emit(df.CallOp(self.lookup(arg, scope, op), name, site))
            callee.sites[j].append(call.results[0])
        for res, result in zip(op.res, callee.results, strict=True):
            ret = self.emit(df.ReturnOp(result, name, site))
            ret.results[0].name_hint = res.name_hint
            scope.values[res] = ret.results[0]

    def callee(self, op: invoke.InvokeOp) -> Callee:
        name = op.callee.root_reference.data
        if name in self.callees:
            return self.callees[name]
        target = SymbolTable.lookup_symbol(self.module, name)
        if not isinstance(target, func.FuncOp):
            raise emit_error(op, f"callee @{name} is not a func.func "
                             "(run capture-outer-refs first)")
        if target.is_declaration:
            raise emit_error(op, f"callee @{name} is a declaration: the graph needs "
                             "its body")
        if not target.args:
            raise emit_error(op, f"callee @{name} takes no arguments: no token "
                             "could carry its activation's tag")
        types = target.function_type
        self.callees[name] = Callee(
            target,
            [df.MergeOp([], t) for t in types.inputs.data],
            [[] for _ in types.inputs.data],
            [UnrealizedConversionCastOp(operands=[[]], result_types=[[t]]).results[0]
             for t in types.outputs.data],
        )
        self.queue.append(name)
        return self.callees[name]

    def place_if(self, op: scf.IfOp, scope: Scope) -> None:
        pred = self.lookup(op.cond, scope, op)
        switches: dict[SSAValue, df.SwitchOp] = {}
        branches: list[list[SSAValue]] = []
        for side, region in enumerate((op.true_region, op.false_region)):
            if not region.blocks:
                branches.append([])
                continue
            inner = Scope(scope, pred=pred, side=side, switches=switches)
            yield_op = region.block.last_op
            assert isinstance(yield_op, scf.YieldOp)
            for child in region.block.ops:
                if child is not yield_op:
                    self.place(child, inner)
            branches.append([self.lookup(v, inner, yield_op)
                             for v in yield_op.arguments])
        for res, *inputs in zip(op.results, *branches, strict=True):
            join = self.emit(df.JoinOp(inputs))
            join.results[0].name_hint = res.name_hint
            scope.values[res] = join.results[0]

    def lookup(self, value: SSAValue, scope: Scope, user: Operation) -> SSAValue:
        """The token for `value` in `scope`, switched in from enclosing scopes."""
        if value in scope.values:
            return scope.values[value]
        if scope.parent is None:
            raise emit_error(user, "uses a value defined outside its function "
                             "(run capture-outer-refs first)")
        return self.switched(self.lookup(value, scope.parent, user), scope)

    def switched(self, outer: SSAValue, scope: Scope) -> SSAValue:
        assert scope.switches is not None and scope.pred is not None
        switch = scope.switches.get(outer)
        if switch is None:
            switch = scope.switches[outer] = df.SwitchOp(scope.pred, outer)
            self.emit(switch)
        return switch.results[scope.side]

    def trigger(self, scope: Scope) -> SSAValue:
        if scope.trigger is None:
            assert scope.parent is not None
            scope.trigger = self.switched(self.trigger(scope.parent), scope)
        return scope.trigger


@dataclass(frozen=True)
class LowerInvokeToCallReturnPass(ModulePass):
    name = "lower-invoke-to-call-return"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = [f for f in op.ops if isinstance(f, func.FuncOp)]
        # every graph built before any is placed: a graph takes its function's
        # name, which a later graph's invokes of that public function look up
        graphs = [(GraphBuilder(op).build(f), f) for f in funcs
                  if f.sym_visibility != StringAttr("private") and not f.is_declaration]
        for graph, f in graphs:
            op.body.block.insert_op_before(graph, f)
        for f in funcs:
            f.detach()
