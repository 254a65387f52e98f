"""Interpreter semantics of `invoke`: a call that runs the callee's region.

A subgraph's region runs in a scope nested in the caller's, so the outer
values it uses (its closure) resolve through the dynamic chain: a subgraph
can only be invoked from inside the region that defines it (the verifier
checks this), whose values are therefore live.
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects import func
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    TerminatorValue,
    impl,
    impl_terminator,
    register_impls,
)

from recir.dialects import invoke


@register_impls
class InvokeFunctions(InterpreterFunctions):
    @impl(invoke.InvokeOp)
    def run_invoke(self, interp: Interpreter, op: invoke.InvokeOp, args: Any):
        target = interp.get_data(InvokeFunctions, "callees", dict)
        name = op.callee.root_reference.data
        callee = target.get(name)
        if callee is None:
            callee = target[name] = invoke.lookup_callee(op, name)
        if isinstance(callee, func.FuncOp):
            return interp.call_op(callee, args)
        assert callee is not None
        return interp.run_ssacfg_region(callee.body, args, name)

    @impl(invoke.JoinOp)
    def run_join(self, interp: Interpreter, op: invoke.JoinOp, args: Any):
        return args  # the interpreter runs invokes one after the other

    @impl(invoke.SpawnBudgetOp)
    def run_spawn_budget(self, interp: Interpreter, op: invoke.SpawnBudgetOp, args: Any):
        return (op.default.value.data,)  # no runtime to choose one: the default

    @impl(invoke.SubgraphOp)
    def run_subgraph(self, interp: Interpreter, op: invoke.SubgraphOp, args: Any):
        return ()  # a definition: it runs only when invoked

    @impl_terminator(invoke.ReturnOp)
    def run_return(
        self, interp: Interpreter, op: invoke.ReturnOp, args: tuple[Any, ...]
    ) -> tuple[TerminatorValue, tuple[Any, ...]]:
        return ReturnedValues(args), ()
