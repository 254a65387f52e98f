"""What the bottom-up tree models share: inputs, the per-node loss, the CLI.

Each tree model traces one recursive subgraph `node(i) -> (h, loss)` over the
structure arrays `left`, `right`, `word`, `label` and returns the root's
hidden state and the summed softmax cross-entropy over all nodes. The cell
(`leaf` and `combine`) is the only part that differs between models.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

import recir
from recir import frontend as rf

Cell = Callable[..., Any]


def trace_tree_model(name: str, params: dict[str, np.ndarray], hidden: int,
                     leaf: Cell, combine: Cell, state: int = 1) -> recir.TracedModel:
    """`leaf(p, x) -> states`, `combine(p, left_states, right_states) -> states`;
    a state tuple has `state` vectors, the first is h."""
    vec = recir.vector(hidden)
    with recir.trace(name) as m:
        left, right, word, label = (m.input(n, recir.structure())
                                    for n in ("left", "right", "word", "label"))
        root = m.input("root", recir.i32)
        p = {k: m.param(k, v) for k, v in params.items()}
        with recir.SubGraph("node", [recir.i32], [vec] * state + [recir.f32]) as node:
            (i,) = node.inputs

            def at_leaf():
                return tuple(leaf(p, rf.gather(p["emb"], word[i])))

            def at_inner():
                *ls, loss_l = node(left[i])
                *rs, loss_r = node(right[i])
                return (*combine(p, ls, rs), loss_l + loss_r)

            def with_loss(states, below):
                loss = rf.softmax_xent(p["w_out"] @ states[0] + p["b_out"], label[i])
                return (*states, loss + below)

            out = recir.cond(left[i] < 0, lambda: with_loss(at_leaf(), 0.0),
                             lambda: (lambda *r: with_loss(r[:-1], r[-1]))(*at_inner()))
            node.output(*out)
        results = node(root)
        m.output(results[0], results[-1])
    return m.traced


def xent(logits: np.ndarray, label: int) -> float:
    shifted = logits - logits.max()
    return float(np.log(np.exp(shifted).sum()) - shifted[label])


def reference_tree(tree: Any, root: int, p: dict[str, np.ndarray],
                   leaf: Cell, combine: Cell) -> tuple[np.ndarray, float]:
    """The same model in float64 NumPy, recursing in Python: the oracle."""
    p = {k: v.astype(np.float64) for k, v in p.items()}

    def visit(i: int) -> tuple[tuple[np.ndarray, ...], float]:
        if tree.left[i] < 0:
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
        print(build())
