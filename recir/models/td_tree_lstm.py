"""Top-down TreeLSTM (after Zhang et al. 2016): the model grows its own tree.

The root state comes from an input vector x: h = tanh(W_in x), c = 0. A node
expands into a left and a right child while its score u.h is positive
(sigmoid > 0.5) and its depth is below `max_depth`; a child's state is an
LSTM step from its parent's, with separate weights per side:
[i; f; o; u] = W_side h_parent + b_side, c = i*u + f*c_parent, h = o*tanh(c).
The tree's shape thus depends on computed values, which no level schedule
fixed in advance (TF Fold) can express. Outputs: the number of nodes
generated and the sum of all their hidden units.
"""

from __future__ import annotations

import numpy as np

import recir
from recir import frontend as rf
from recir.models.tree_common import dump_ir_main


def init_params(rng: np.random.Generator, hidden: int = 8, inputs: int = 8):
    shapes = {"w_in": (hidden, inputs), "u_score": (hidden,),
              "w_left": (4 * hidden, hidden), "b_left": (4 * hidden,),
              "w_right": (4 * hidden, hidden), "b_right": (4 * hidden,)}
    return {k: (0.7 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}


def make_step(hidden: int, slice_fn, sigmoid, tanh):
    def step(w, b, h, c):
        pre = w @ h + b
        i, f, o = (sigmoid(slice_fn(pre, k * hidden, hidden)) for k in range(3))
        u = tanh(slice_fn(pre, 3 * hidden, hidden))
        c2 = i * u + f * c
        return o * tanh(c2), c2

    return step


def trace_model(params: dict[str, np.ndarray]) -> recir.TracedModel:
    hidden, inputs = params["w_in"].shape
    step = make_step(hidden, rf.slice, rf.sigmoid, rf.tanh)
    vec = recir.vector(hidden)
    with recir.trace("td_tree_lstm") as m:
        x = m.input("x", recir.vector(inputs))
        max_depth = m.input("max_depth", recir.i32)
        p = {k: m.param(k, v) for k, v in params.items()}
        with recir.SubGraph("grow", [vec, vec, recir.i32], [recir.i32, recir.f32]) as grow:
            h, c, depth = grow.inputs

            def expand():
                nl, tl = grow(*step(p["w_left"], p["b_left"], h, c), depth + 1)
                nr, tr = grow(*step(p["w_right"], p["b_right"], h, c), depth + 1)
                return nl + nr + 1, tl + tr + rf.sum(h)

            wants = (rf.sum(p["u_score"] * h) > 0.0) & (depth < max_depth)
            grow.output(*recir.cond(wants, expand, lambda: (depth * 0 + 1, rf.sum(h))))
        m.output(*grow(rf.tanh(p["w_in"] @ x), rf.zeros(hidden), 0))
    return m.traced


def reference(x: np.ndarray, max_depth: int, params: dict[str, np.ndarray]):
    p = {k: v.astype(np.float64) for k, v in params.items()}
    hidden = p["w_in"].shape[0]
    step = make_step(hidden, lambda v, o, n: v[o:o + n], lambda v: 1 / (1 + np.exp(-v)), np.tanh)
    count, total = 0, 0.0
    stack = [(np.tanh(p["w_in"] @ x), np.zeros(hidden), 0)]
    while stack:
        h, c, depth = stack.pop()
        count, total = count + 1, total + h.sum()
        if p["u_score"] @ h > 0 and depth < max_depth:
            for side in ("left", "right"):
                stack.append((*step(p[f"w_{side}"], p[f"b_{side}"], h, c), depth + 1))
    return count, total


if __name__ == "__main__":
    dump_ir_main(lambda: trace_model(init_params(np.random.default_rng(0))), __doc__)
