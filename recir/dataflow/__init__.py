"""Executors for the static tagged-dataflow form (`lower-invoke-to-call-return`).

`lower(module)` closes and lowers an invoke-IR module to `dataflow.graph`s;
`run(module, name, args, engine=...)` runs one graph by token passing and
returns its results with the counters (`Stats`). The `static` engine routes
activations by tags through one graph (the thesis's Call/Return); the
`dynamic` engine instantiates a fresh copy of a callee's state per call (the
thesis's dynamic call expansion). Both are interpreters, in Python, on
purpose: the static form is an alternative execution model to study and
compare, not recir's fast path (that is the native invoke path), and one
token loop for both keeps the comparison fair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.traits import SymbolTable

from recir.dataflow.engine import DEAD, Stats, execute
from recir.dataflow.graph import Graph, compile_graph
from recir.diagnostics import RecirError
from recir.dialects import dataflow as df
from recir.interpreter import as_returned, coerce_arguments
from recir.pipeline import DATAFLOW, run_passes

__all__ = ["DEAD", "Graph", "Stats", "compile", "lower", "run"]

ENGINES = ("static", "dynamic")


def lower(module: ModuleOp) -> ModuleOp:
    """A copy of `module` with every public function as a `dataflow.graph`."""
    lowered = module.clone()
    run_passes(lowered, DATAFLOW)
    lowered.verify()
    return lowered


def compile(module: ModuleOp, name: str) -> Graph:  # noqa: A001 - like recir.compile
    """The node records of `@name`, lowering `module` first if it has no graphs."""
    if not any(isinstance(op, df.GraphOp) for op in module.ops):
        module = lower(module)
    graph = SymbolTable.lookup_symbol(module, name)
    if not isinstance(graph, df.GraphOp):
        names = [op.sym_name.data for op in module.ops if isinstance(op, df.GraphOp)]
        raise RecirError(f"error: no dataflow.graph @{name} (graphs: "
                         f"{', '.join('@' + n for n in names) or 'none'})")
    return compile_graph(module, graph)


def run(program: ModuleOp | Graph, name: str, args: Sequence[Any],
        engine: str = "static") -> tuple[tuple[Any, ...], Stats]:
    """Run `@name` by token passing; its results and the counters."""
    if engine not in ENGINES:
        raise RecirError(f"error: unknown engine {engine!r} "
                         f"(one of {', '.join(ENGINES)})")
    graph = program if isinstance(program, Graph) else compile(program, name)
    values = coerce_arguments(name, args, graph.op.function_type.inputs.data)
    results, stats = execute(graph, values, dynamic=engine == "dynamic")
    return as_returned(results, graph.op.function_type.outputs.data), stats
