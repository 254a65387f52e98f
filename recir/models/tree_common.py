"""What the bottom-up tree models share: inputs, the per-node loss, the CLI.

Each tree model traces one recursive subgraph `node(i) -> (h, loss)` over the
structure arrays `left`, `right`, `word`, `label` and returns the root's
hidden state and the summed softmax cross-entropy over all nodes. The cell
(`leaf` and `combine`) is the only part that differs between models.

With `node_scores=N` the model also returns every node's class scores in one
forward: a node-indexed table, flattened to `N * classes` values with node i's
logits at `[i * classes, (i + 1) * classes)`, for trees of up to N nodes. The
IR has no store into a tensor, so the table is a sum: node i adds its logits,
tiled N times (`tile @ logits`), masked to its own row (a gather of row i from
a 0/1 `mask` table); children's tables are disjoint, so the sum places them.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import recir
from recir import frontend as rf

Cell = Callable[..., Any]


def score_tables(nodes: int, classes: int) -> dict[str, np.ndarray]:
    """The constant tables of `node_scores`: `node_mask[i]` is 1 on row i's
    span of the flat table, `node_tile` repeats a logits vector `nodes` times."""
    mask = np.kron(np.eye(nodes, dtype=np.float32), np.ones((1, classes), np.float32))
    tile = np.tile(np.eye(classes, dtype=np.float32), (nodes, 1))
    return {"node_mask": mask, "node_tile": tile}


class TreeModel(recir.TracedModel):
    """A traced tree model that knows its kind (the module's name) and can
    trace itself again with a node score table over the same parameter arrays
    (so optimizer updates and restored checkpoints are seen by both)."""

    kind: str
    node_scores: int
    with_node_scores: Callable[[int], TreeModel]  # the model for trees of up to N nodes


def trace_tree_model(name: str, params: dict[str, np.ndarray], hidden: int,
                     leaf: Cell, combine: Cell, state: int = 1,
                     node_scores: int = 0) -> TreeModel:
    """`leaf(p, x) -> states`, `combine(p, left_states, right_states) -> states`;
    a state tuple has `state` vectors, the first is h. `node_scores=N` adds a
    third output, every node's logits (trees of up to N nodes, see above)."""
    vec = recir.vector(hidden)
    tables = score_tables(node_scores, params["b_out"].shape[0]) if node_scores else {}
    extra = [recir.vector(tables["node_tile"].shape[0])] if tables else []
    with recir.trace(name) as m:
        left, right, word, label = (m.input(n, recir.structure())
                                    for n in ("left", "right", "word", "label"))
        root = m.input("root", recir.i32)
        p = {k: m.param(k, v) for k, v in (params | tables).items()}
        outputs = [vec] * state + [recir.f32] + extra
        with recir.SubGraph("node", [recir.i32], outputs) as node:
            (i,) = node.inputs

            def finish(states, below, table_below):
                logits = p["w_out"] @ states[0] + p["b_out"]
                out = (*states, rf.softmax_xent(logits, label[i]) + below)
                if not tables:
                    return out
                own = rf.gather(p["node_mask"], i) * (p["node_tile"] @ logits)
                return (*out, own if table_below is None else own + table_below)

            def at_leaf():
                return finish(tuple(leaf(p, rf.gather(p["emb"], word[i]))), 0.0, None)

            def at_inner():
                ls, rs = node(left[i]), node(right[i])
                states = combine(p, ls[:state], rs[:state])
                table = ls[state + 1] + rs[state + 1] if tables else None
                return finish(tuple(states), ls[state] + rs[state], table)

            node.output(*recir.cond(left[i] < 0, at_leaf, at_inner))
        results = node(root)
        m.output(results[0], *results[state:])
    traced = m.traced
    model = TreeModel(traced.module, traced.entry, traced.input_names, traced.params)
    model.kind, model.node_scores = name, node_scores
    shared = {k: traced.params[k] for k in params}  # the arrays the trace bound
    model.with_node_scores = lambda nodes: trace_tree_model(name, shared, hidden, leaf,
                                                            combine, state, nodes)
    return model


def xent(logits: np.ndarray, label: int) -> float:
    """NaN for an unknown label (-1, which would pick the last class): the
    states of an unlabelled tree stay readable, its loss is none."""
    if label == -1:
        return math.nan
    if not 0 <= label < logits.shape[0]:
        raise IndexError(f"label {label} out of range [0, {logits.shape[0]})")
    shifted = logits - logits.max()
    return float(np.log(np.exp(shifted).sum()) - shifted[label])


def reference_tree(tree: Any, root: int, p: dict[str, np.ndarray],
                   leaf: Cell, combine: Cell) -> tuple[np.ndarray, float]:
    """The same model in float64 NumPy, recursing in Python: the oracle."""
    p = {k: v.astype(np.float64) for k, v in p.items()}

    def visit(i: int) -> tuple[tuple[np.ndarray, ...], float]:
        if tree.left[i] < 0:
            if not 0 <= tree.word[i] < p["emb"].shape[0]:  # as the model's gather
                raise IndexError(f"leaf {i} has word id {tree.word[i]}, "
                                 f"out of range [0, {p['emb'].shape[0]})")
            states, below = tuple(leaf(p, p["emb"][tree.word[i]])), 0.0
        else:
            ls, loss_l = visit(int(tree.left[i]))
            rs, loss_r = visit(int(tree.right[i]))
            states, below = tuple(combine(p, ls, rs)), loss_l + loss_r
        return states, below + xent(p["w_out"] @ states[0] + p["b_out"], int(tree.label[i]))

    states, loss = visit(root)
    return states[0], loss


def dump_ir_main(build: Callable[[], recir.TracedModel], doc: str) -> None:
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--dump-ir", action="store_true", help="print the traced IR")
    if parser.parse_args().dump_ir:
        try:
            print(build(), flush=True)
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
