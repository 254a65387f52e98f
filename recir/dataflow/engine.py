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
    run = TokenRun(dynamic)
    results = run.run(graph, args)
    if not results:
        raise RecirError(f"error: @{graph.op.sym_name.data}: the graph stopped "
                         f"without producing its results ({waiting(graph)})")
    return results[0], run.stats


Token = tuple[Node, int, Activation, Any]


class TokenRun:
    """One run's worklist, counters and results; a method per node kind."""

    def __init__(self, dynamic: bool):
        self.dynamic = dynamic
        self.stats = Stats("dynamic" if dynamic else "static")
        self.stack: list[Token] = []
        self.live = 0  # activations with tokens alive
        self.results: list[tuple[Any, ...]] = []
        self.fire = {OP: self.fire_op, GATE: self.fire_gate, SWITCH: self.fire_switch,
                     JOIN: self.fire_join, MERGE: self.fire_merge, CALL: self.fire_call,
                     RETURN: self.fire_return, OUTPUT: self.fire_output}

    def run(self, graph: Graph, args: list[Any]) -> list[tuple[Any, ...]]:
        stack, stats = self.stack, self.stats
        root = Activation(None, -1, self.dynamic)
        for edges, value in zip(graph.inputs, args, strict=True):
            for target, port in edges:
                stack.append((target, port, root, value))
        root.tokens = len(stack)
        self.live = stats.peak_tags = 1 if stack else 0
        stats.tokens = len(stack)
        for node in graph.nodes:
            node.store.clear()
        while stack:
            node, port, act, value = stack.pop()
            n = node.nports if node.nports > 1 and node.kind != MERGE else 1
            inputs = self.matched(node, port, act, value) if n > 1 else [value]
            if inputs is None:
                continue
            stats.firings += 1
            self.fire[node.kind](node, act, inputs)
            act.tokens -= n
            if act.tokens == 0:
                self.live -= 1
        return self.results

    def matched(self, node: Node, port: int, act: Activation, value: Any
                ) -> list[Any] | None:
        """A strict node's inputs once a token of `act` is on every port
        (None until then): the dynamic engine matches in the activation's own
        state, the static one in the node's table keyed by tag."""
        store = act.state if act.state is not None else node.store
        key: Any = node if self.dynamic else act
        slots = store.get(key)
        if slots is None:
            slots = store[key] = [1, *([None] * node.nports)]
            slots[port + 1] = value
            return None
        slots[port + 1] = value
        slots[0] += 1
        if slots[0] < node.nports:
            return None
        del store[key]
        return slots[1:]

    def send(self, node: Node, index: int, act: Activation, value: Any) -> None:
        if self.dynamic:
            plain, by_site = node.routed[index]
            edges = plain + by_site.get(act.site, []) if by_site else plain
        else:
            edges = node.outs[index]
        if not edges:
            return
        if act.tokens == 0:
            self.live += 1
            self.stats.peak_tags = max(self.stats.peak_tags, self.live)
        act.tokens += len(edges)
        self.stats.tokens += len(edges)
        for target, port in edges:
            self.stack.append((target, port, act, value))

    def fire_op(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        if any(v is DEAD for v in inputs):
            for i in range(len(node.outs)):
                self.send(node, i, act, DEAD)
            return
        assert node.fn is not None
        for i, v in enumerate(node.fn(tuple(inputs))):
            self.send(node, i, act, v)

    def fire_gate(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        self.send(node, 0, act, DEAD if inputs[0] is DEAD else node.value)

    def fire_switch(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        pred, value = inputs
        if pred is DEAD or value is DEAD:
            self.send(node, 0, act, DEAD)
            self.send(node, 1, act, DEAD)
        else:
            self.send(node, 0, act, value if pred else DEAD)
            self.send(node, 1, act, DEAD if pred else value)

    def fire_join(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        alive = [v for v in inputs if v is not DEAD]
        if len(alive) > 1:
            raise RecirError(format_error(node.op, "got live tokens from two branches"))
        self.send(node, 0, act, alive[0] if alive else DEAD)

    def fire_merge(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        self.send(node, 0, act, inputs[0])

    def fire_return(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        value = inputs[0]
        if value is DEAD:
            self.send(node, 0, act, DEAD)
        elif act.site == node.site and act.parent is not None:
            self.send(node, 0, act.parent, value)

    def fire_output(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        if any(v is DEAD for v in inputs) or act.parent is not None:
            raise RecirError(format_error(node.op, "got a dead or nested token"))
        self.results.append(tuple(inputs))

    def fire_call(self, node: Node, act: Activation, inputs: list[Any]) -> None:
        """Push the site onto the tag (interned: one child per site and
        activation); a new activation is counted."""
        value = inputs[0]
        if value is DEAD:
            if node.returns:  # the site's first argument: deadness skips the body
                act.tokens += len(node.returns)
                for ret in node.returns:
                    self.stack.append((ret, 0, act, DEAD))
            return
        group = node.group
        entry = act.children.get(group)
        if entry is None:
            child = Activation(act, node.site, act.state is not None)
            if group[2] > 1:
                act.children[group] = [child, group[2] - 1]
            self.send(node, 0, child, value)
            self.stats.activations += 1
            return
        entry[1] -= 1
        if entry[1] == 0:
            del act.children[group]
        self.send(node, 0, entry[0], value)


def waiting(graph: Graph) -> str:
    stuck = [n.op.name for n in graph.nodes if n.store]
    return f"tokens waiting at {', '.join(stuck)}" if stuck else "no token reached it"
