"""The token engine: a worklist of tokens, each node fired when its inputs match.

A token is `(node, port, activation, value)`. A strict node (every op but
`dataflow.merge`) with several ports fires when a token of the same
activation is present on every port; single-port nodes and merges fire per
token. Dead tokens (`DEAD`) propagate through ops; a Switch makes them, a
Join drops them when a live one is present, and a Call sends them straight
to its site's Returns.

Two engines share this loop and differ only where the thesis says they do:

- **static** (Call/Return): an activation is a *tag*, the stack of call-site
  numbers; a node keeps one matching table for all activations, keyed by
  tag; a callee's result goes to every Return of that callee, and each
  forwards only tokens whose tag ends with its own site, popping it.
- **dynamic** (call expansion): each call instantiates a fresh copy of the
  callee's matching state (`Activation.state`), and its results go straight
  to the Returns of the site that called it.

Tags are interned stacks: `Activation(parent, site)`, so pushing, popping and
matching cost O(1) however deep the recursion. Both engines are Python, so
their times compare like for like; neither is meant to be fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recir.dataflow.graph import (
    CALL,
    GATE,
    JOIN,
    MERGE,
    OP,
    OUTPUT,
    RETURN,
    SWITCH,
    Graph,
    Node,
)
from recir.diagnostics import RecirError, format_error


class Dead:
    """The value of a dead token: the branch it is on was not taken."""

    def __repr__(self) -> str:
        return "DEAD"


DEAD = Dead()


class Activation:
    """A tag (static engine) or an instantiated callee (dynamic engine)."""

    __slots__ = ("children", "parent", "site", "state", "tokens")

    def __init__(self, parent: Activation | None, site: int, instance: bool):
        self.parent, self.site = parent, site
        self.children: dict[Any, list[Any]] = {}  # call group -> [child, calls left]
        # dynamic: this instance's own matching state (a fresh copy per call)
        self.state: dict[Node, list[Any]] | None = {} if instance else None
        self.tokens = 0  # tokens of this activation alive now


@dataclass
class Stats:
    """What a run cost: node firings, tokens sent, activations (calls) made,
    and the most activations (tags) alive at once."""

    engine: str
    firings: int = 0
    tokens: int = 0
    activations: int = 0
    peak_tags: int = 0


def execute(graph: Graph, args: list[Any], dynamic: bool = False
            ) -> tuple[tuple[Any, ...], Stats]:
    """Run `graph` on `args` until no token is left; its outputs and the counters."""
    stats = Stats("dynamic" if dynamic else "static")
    stack: list[tuple[Node, int, Activation, Any]] = []
    live = [0]  # activations with tokens alive

    def send(node: Node, index: int, act: Activation, value: Any) -> None:
        if dynamic:
            plain, by_site = node.routed[index]
            edges = plain + by_site.get(act.site, []) if by_site else plain
        else:
            edges = node.outs[index]
        if not edges:
            return
        if act.tokens == 0:
            live[0] += 1
            stats.peak_tags = max(stats.peak_tags, live[0])
        act.tokens += len(edges)
        stats.tokens += len(edges)
        for target, port in edges:
            stack.append((target, port, act, value))

    root = Activation(None, -1, dynamic)
    for edges, value in zip(graph.inputs, args, strict=True):
        for target, port in edges:
            stack.append((target, port, root, value))
    root.tokens = len(stack)
    live[0] = stats.peak_tags = 1 if stack else 0
    stats.tokens = len(stack)
    results: list[tuple[Any, ...]] = []
    for node in graph.nodes:
        node.store.clear()
    while stack:
        node, port, act, value = stack.pop()
        n = node.nports
        if n > 1 and node.kind != MERGE:
            store = act.state if act.state is not None else node.store
            key: Any = node if dynamic else act
            slots = store.get(key)
            if slots is None:
                slots = store[key] = [1, *([None] * n)]
                slots[port + 1] = value
                continue
            slots[port + 1] = value
            slots[0] += 1
            if slots[0] < n:
                continue
            del store[key]
            inputs = slots[1:]
        else:
            n, inputs = 1, [value]
        stats.firings += 1
        fire(node, act, inputs, send, stack, stats, results)
        act.tokens -= n
        if act.tokens == 0:
            live[0] -= 1
    if not results:
        raise RecirError(f"error: @{graph.op.sym_name.data}: the graph stopped "
                         f"without producing its results ({waiting(graph)})")
    return results[0], stats


def fire(node: Node, act: Activation, inputs: list[Any], send: Any,
         stack: list[tuple[Node, int, Activation, Any]], stats: Stats,
         results: list[tuple[Any, ...]]) -> None:
    """What one node does with one matched set of inputs."""
    kind = node.kind
    if kind == OP:
        if any(v is DEAD for v in inputs):
            for i in range(len(node.outs)):
                send(node, i, act, DEAD)
            return
        assert node.fn is not None
        for i, v in enumerate(node.fn(tuple(inputs))):
            send(node, i, act, v)
    elif kind == GATE:
        send(node, 0, act, DEAD if inputs[0] is DEAD else node.value)
    elif kind == SWITCH:
        pred, value = inputs
        if pred is DEAD or value is DEAD:
            send(node, 0, act, DEAD)
            send(node, 1, act, DEAD)
        else:
            send(node, 0, act, value if pred else DEAD)
            send(node, 1, act, DEAD if pred else value)
    elif kind == JOIN:
        alive = [v for v in inputs if v is not DEAD]
        if len(alive) > 1:
            raise RecirError(format_error(node.op, "got live tokens from two branches"))
        send(node, 0, act, alive[0] if alive else DEAD)
    elif kind == MERGE:
        send(node, 0, act, inputs[0])
    elif kind == CALL:
        if call(node, act, inputs[0], send, stack):
            stats.activations += 1
    elif kind == RETURN:
        value = inputs[0]
        if value is DEAD:
            send(node, 0, act, DEAD)
        elif act.site == node.site and act.parent is not None:
            send(node, 0, act.parent, value)
    elif kind == OUTPUT:
        if any(v is DEAD for v in inputs) or act.parent is not None:
            raise RecirError(format_error(node.op, "got a dead or nested token"))
        results.append(tuple(inputs))


def call(node: Node, act: Activation, value: Any, send: Any,
         stack: list[tuple[Node, int, Activation, Any]]) -> bool:
    """Push the site onto the tag (interned: one child per site and activation);
    whether this started a new activation."""
    if value is DEAD:
        if node.returns:  # the site's first argument: deadness skips the body
            act.tokens += len(node.returns)
            for ret in node.returns:
                stack.append((ret, 0, act, DEAD))
        return False
    group = node.group
    entry = act.children.get(group)
    if entry is None:
        child = Activation(act, node.site, act.state is not None)
        if group[2] > 1:
            act.children[group] = [child, group[2] - 1]
        send(node, 0, child, value)
        return True
    entry[1] -= 1
    if entry[1] == 0:
        del act.children[group]
    send(node, 0, entry[0], value)
    return False


def waiting(graph: Graph) -> str:
    stuck = [n.op.name for n in graph.nodes if n.store]
    return f"tokens waiting at {', '.join(stuck)}" if stuck else "no token reached it"
