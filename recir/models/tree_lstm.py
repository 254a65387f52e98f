"""Binary TreeLSTM (Tai et al. 2015, N-ary with N = 2: a forget gate per child).

leaf:     [i; o; u] = W x + b_leaf,           c = i*u
internal: [i; f_l; f_r; o; u] = U [h_l; h_r] + b,  c = i*u + f_l*c_l + f_r*c_r
both:     h = o * tanh(c); i, f, o through sigmoid and u through tanh.
"""

from __future__ import annotations

import numpy as np

from recir import frontend as rf
from recir.models.tree_common import dump_ir_main, reference_tree, trace_tree_model


def param_shapes(hidden: int = 8, embed: int = 8, vocab: int = 100, classes: int = 5
                 ) -> dict[str, tuple[int, ...]]:
    """The parameters' shapes (a model file is checked against them
    before anything is allocated)."""
    return {"emb": (vocab, embed), "w_leaf": (3 * hidden, embed), "b_leaf": (3 * hidden,),
            "u": (5 * hidden, 2 * hidden), "b": (5 * hidden,),
            "w_out": (classes, hidden), "b_out": (classes,)}


def init_params(rng: np.random.Generator, hidden: int = 8, embed: int = 8,
                vocab: int = 100, classes: int = 5) -> dict[str, np.ndarray]:
    """`param_shapes`, N(0, 0.25) each."""
    return {k: (0.5 * rng.standard_normal(s)).astype(np.float32)
            for k, s in param_shapes(hidden, embed, vocab, classes).items()}


def make_cells(hidden: int, slice_fn, sigmoid, tanh, concat):
    def split(pre, n):
        parts = [slice_fn(pre, k * hidden, hidden) for k in range(n)]
        return [sigmoid(x) for x in parts[:-1]] + [tanh(parts[-1])]

    def leaf(p, x):
        i, o, u = split(p["w_leaf"] @ x + p["b_leaf"], 3)
        c = i * u
        return o * tanh(c), c

    def combine(p, ls, rs):
        (hl, cl), (hr, cr) = ls, rs
        i, fl, fr, o, u = split(p["u"] @ concat([hl, hr]) + p["b"], 5)
        c = i * u + fl * cl + fr * cr
        return o * tanh(c), c

    return leaf, combine


def trace_model(params: dict[str, np.ndarray], node_scores: int = 0):
    """`node_scores=N`: also every node's logits (`tree_common`)."""
    hidden = params["w_out"].shape[1]
    leaf, combine = make_cells(hidden, rf.slice, rf.sigmoid, rf.tanh, rf.concat)
    return trace_tree_model("tree_lstm", params, hidden, leaf, combine, state=2,
                            node_scores=node_scores)


def reference(tree, root: int, params: dict[str, np.ndarray]):
    hidden = params["w_out"].shape[1]
    leaf, combine = make_cells(
        hidden, lambda x, o, n: x[o:o + n], lambda x: 1 / (1 + np.exp(-x)), np.tanh,
        np.concatenate)
    return reference_tree(tree, root, params, leaf, combine)


if __name__ == "__main__":
    dump_ir_main(lambda: trace_model(init_params(np.random.default_rng(0))), __doc__)
