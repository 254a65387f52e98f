"""Interpreter semantics of `invoke`: a call that runs the callee's region.

A subgraph's region runs in a scope nested in the one where it was defined,
so the outer values it uses (its closure) resolve lexically: a subgraph can
only be invoked from inside the region that defines it (the verifier checks
this), whose values are therefore live. (Nested in the caller's, a lookup
walked every frame of the recursion: a chain of depth d took d^2 steps.)

An invocation made again with the same arguments while it is still running
never ends (the code is deterministic): a cycle in a tree's structure
arrays, or recursion without a base case that keeps its arguments. It is an
error at once, where native code reports the stack it exhausts; recursion
whose arguments change stops at the interpreter's frame limit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
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

from recir.diagnostics import emit_error
from recir.dialects import invoke


def argument_key(value: Any) -> Any:
    """Numbers by value, arrays and frames by identity (the caller holds them)."""
    return value if isinstance(value, int | float | np.generic) else ("id", id(value))


DEFINES = "recir_subgraphs"  # a scope's attribute: the subgraphs defined in it


def defining_scope(scope: Any, subgraph: invoke.SubgraphOp) -> Any:
    """The scope `subgraph` was defined in, up the lexical chain from
    `scope` (a few scopes: each invocation's parent is its definition's);
    `scope` itself where none is found."""
    found = scope
    while found is not None and subgraph not in found.__dict__.get(DEFINES, ()):
        found = found.parent
    return scope if found is None else found


@register_impls
class InvokeFunctions(InterpreterFunctions):
    @impl(invoke.InvokeOp)
    def run_invoke(self, interp: Interpreter, op: invoke.InvokeOp, args: Any):
        target = interp.get_data(InvokeFunctions, "callees", dict)
        name = op.callee.root_reference.data
        callee = target.get(name)
        if callee is None:
            callee = target[name] = invoke.lookup_callee(op, name)
        running = interp.get_data(InvokeFunctions, "running", set)
        key = (name, *map(argument_key, args))
        if key in running:
            shown = ", ".join(str(a) for a in args if isinstance(a, int | float | np.generic))
            raise emit_error(op, f"recursion in @{name} never ends: it is invoked again "
                                 f"with the same arguments ({shown}) while that call runs "
                                 f"(a cycle in its input?)")
        running.add(key)
        caller = interp._ctx  # pyright: ignore[reportPrivateUsage]
        try:
            if isinstance(callee, func.FuncOp):
                return interp.call_op(callee, args)
            assert callee is not None
            interp._ctx = defining_scope(caller, callee)  # pyright: ignore[reportPrivateUsage]
            return interp.run_ssacfg_region(callee.body, args, name)
        finally:
            interp._ctx = caller  # pyright: ignore[reportPrivateUsage]
            running.discard(key)

    @impl(invoke.JoinOp)
    def run_join(self, interp: Interpreter, op: invoke.JoinOp, args: Any):
        return args  # the interpreter runs invokes one after the other

    @impl(invoke.SpawnBudgetOp)
    def run_spawn_budget(self, interp: Interpreter, op: invoke.SpawnBudgetOp, args: Any):
        return (op.default.value.data,)  # no runtime to choose one: the default

    @impl(invoke.SubgraphOp)
    def run_subgraph(self, interp: Interpreter, op: invoke.SubgraphOp, args: Any):
        scope = interp._ctx  # pyright: ignore[reportPrivateUsage]
        scope.__dict__.setdefault(DEFINES, set()).add(op)  # (where its invocations nest)
        return ()  # a definition: it runs only when invoked

    @impl_terminator(invoke.ReturnOp)
    def run_return(
        self, interp: Interpreter, op: invoke.ReturnOp, args: tuple[Any, ...]
    ) -> tuple[TerminatorValue, tuple[Any, ...]]:
        return ReturnedValues(args), ()
