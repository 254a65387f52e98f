"""A `dataflow.graph` compiled into node records the token engines run.

Each op becomes a `Node` with its token input ports and, per result, the
`(node, port)` edges its tokens travel on. Constants are evaluated once here
(they are static values); every other op's semantics is the reference
interpreter's (`recir.interpreter`: xDSL's arith plus recir's NumPy `tmath`),
called one op at a time, so both engines compute exactly what the invoke
path's interpreter computes. An op with regions (an `scf.if` written in a
graph by hand; `lower-invoke-to-call-return` makes switches and joins of
it instead) is one node too: its ports are its operands and the values its
regions read from outside it, and the interpreter runs it whole, so its
regions may hold no dataflow op.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from recir.diagnostics import RecirError, emit_error
from recir.dialects import dataflow as df
from recir.interpreter import make_interpreter

OP, GATE, SWITCH, JOIN, MERGE, CALL, RETURN, OUTPUT = range(8)
KINDS = {df.GateOp: GATE, df.SwitchOp: SWITCH, df.JoinOp: JOIN, df.MergeOp: MERGE,
         df.CallOp: CALL, df.ReturnOp: RETURN, df.OutputOp: OUTPUT}

Edge = tuple["Node", int]


class Node:
    """One op of the graph: how many token ports it waits on and where it sends."""

    __slots__ = ("fn", "group", "kind", "nports", "op", "outs", "ports", "returns",
                 "routed", "site", "store", "value")

    def __init__(self, op: Operation, kind: int, ports: list[SSAValue]):
        self.op, self.kind, self.ports, self.nports = op, kind, ports, len(ports)
        self.outs: list[list[Edge]] = [[] for _ in op.results]
        # outs split for the dynamic engine: plain edges, and Return edges by site
        self.routed: list[tuple[list[Edge], dict[int, list[Edge]]]] = []
        self.fn: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None
        self.value: Any = None  # a gate's static value
        self.site = -1
        self.group: Any = None  # a call's (callee, site, argument count)
        self.returns: list[Node] = []  # a leading call's Returns, for dead tokens
        self.store: dict[Any, list[Any]] = {}  # strict nodes: tag -> [count, *slots]


class Graph:
    """The nodes of one `dataflow.graph`, and where its arguments enter."""

    def __init__(self, graph: df.GraphOp, inputs: list[list[Edge]], output: Node,
                 nodes: list[Node]):
        self.op, self.inputs, self.output, self.nodes = graph, inputs, output, nodes


def token_ports(op: Operation) -> list[SSAValue]:
    """The operands that carry tokens (a gate's static value is not one)."""
    return [op.operands[1]] if isinstance(op, df.GateOp) else list(op.operands)


def outer_values(op: Operation) -> list[SSAValue]:
    """The values `op`'s regions read from outside it, in order of first use."""
    found: dict[SSAValue, None] = {}
    for inner in (o for region in op.regions for o in region.walk()):
        if inner.name.startswith("dataflow."):
            raise emit_error(inner, f"is inside '{op.name}': the token engines run an "
                             "op with regions whole, as one node, so its regions may "
                             "hold no dataflow op (lower-invoke-to-call-return makes "
                             "switches and joins of an scf.if instead)")
        found.update((v, None) for v in inner.operands if not op.is_ancestor(v.owner))
    return list(found)


def compile_graph(module: ModuleOp, graph: df.GraphOp) -> Graph:
    nodes, static = make_nodes(module, graph)
    for op, node in nodes.items():
        for port, value in enumerate(node.ports):
            if value in static:
                raise emit_error(op, "uses a constant as a token: gate it with "
                                 "'dataflow.gate'")
            source(value, nodes).append((node, port))
    link_calls(nodes)
    for node in nodes.values():
        node.routed = [route(edges) for edges in node.outs]
    block = graph.body.block
    inputs = [argument_edges(a, block, nodes) for a in block.args]
    output = nodes[block.last_op] if block.last_op is not None else None
    if output is None or output.kind != OUTPUT:
        raise RecirError(f"error: @{graph.sym_name.data} has no 'dataflow.output'")
    return Graph(graph, inputs, output, list(nodes.values()))


def make_nodes(module: ModuleOp, graph: df.GraphOp
               ) -> tuple[dict[Operation, Node], dict[SSAValue, Any]]:
    """A node per op of the graph that takes or makes tokens, and the
    values of the ops that take none (constants: a gate's static value)."""
    interp = make_interpreter(module)
    nodes: dict[Operation, Node] = {}
    static: dict[SSAValue, Any] = {}
    for op in graph.body.block.ops:
        if not op.operands and not op.regions:
            static.update(zip(op.results, interp.run_op(op, ()), strict=True))
            continue
        if op.regions:
            values = outer_values(op)
            outer = [v for v in values if v not in static]
            bound = [(v, static[v]) for v in values if v in static]
            node = nodes[op] = Node(op, OP, [*op.operands, *outer])
            node.fn = partial(run_with_outer, interp, op, outer, bound)
            continue
        node = nodes[op] = Node(op, KINDS.get(type(op), OP), token_ports(op))
        if isinstance(op, df.GateOp):
            node.value = static[op.value]
        elif isinstance(op, df.CallOp | df.ReturnOp):
            node.site = op.site.value.data
        elif node.kind == OP:
            node.fn = partial(interp.run_op, op)
    return nodes, static


def run_with_outer(interp: Interpreter, op: Operation, outer: list[SSAValue],
                   bound: list[tuple[SSAValue, Any]], inputs: tuple[Any, ...]
                   ) -> tuple[Any, ...]:
    """Run an op with regions on its operands (the first inputs), its
    regions reading the outer values from the rest and the constants."""
    count = len(op.operands)
    interp.push_scope("outer values")
    try:
        interp.set_values(bound)
        interp.set_values(zip(outer, inputs[count:], strict=True))
        return interp.run_op(op, inputs[:count])
    finally:
        interp.pop_scope()


def argument_edges(arg: BlockArgument, block: Block, nodes: dict[Operation, Node]
                   ) -> list[Edge]:
    """Where a graph argument's tokens go: a use inside an op's region is
    that op's port for it, once."""
    edges: list[Edge] = []
    for use in arg.uses:
        top = block.find_ancestor_op_in_block(use.operation)
        assert top is not None
        node = nodes[top]
        if top is use.operation:
            edges.append((node, use.index))
        elif (edge := (node, node.ports.index(arg, len(top.operands)))) not in edges:
            edges.append(edge)
    return edges


def source(value: SSAValue, nodes: dict[Operation, Node]) -> list[Edge]:
    """The edge list a value's tokens are sent on."""
    if isinstance(value, BlockArgument):
        return []  # block arguments: `Graph.inputs` lists their uses
    owner = value.owner
    assert isinstance(owner, Operation)
    return nodes[owner].outs[value.index]


def link_calls(nodes: dict[Operation, Node]) -> None:
    """Group each site's Calls (one per argument) and point the first at the
    site's Returns: a dead token skips the body and leaves through them."""
    calls: dict[tuple[str, int], list[Node]] = {}
    returns: dict[tuple[str, int], list[Node]] = {}
    for op, node in nodes.items():
        if isinstance(op, df.CallOp):
            calls.setdefault(df.site_key(op), []).append(node)
        elif isinstance(op, df.ReturnOp):
            returns.setdefault(df.site_key(op), []).append(node)
    for key, group in calls.items():
        for node in group:
            node.group = (*key, len(group))
        group[0].returns = returns.get(key, [])


def route(edges: list[Edge]) -> tuple[list[Edge], dict[int, list[Edge]]]:
    plain = [e for e in edges if e[0].kind != RETURN]
    by_site: dict[int, list[Edge]] = {}
    for e in edges:
        if e[0].kind == RETURN:
            by_site.setdefault(e[0].site, []).append(e)
    return plain, by_site
