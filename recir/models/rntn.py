"""RNTN (Socher et al. 2013): h = tanh(x^T V x + W x + b) with x = [h_l; h_r].

`x^T V x` is the bilinear tensor product, one slice V[k] per output unit
(`tmath.bilinear`); a leaf's h is its embedding.
"""

from __future__ import annotations

import numpy as np

from recir import frontend as rf
from recir.models.tree_common import dump_ir_main, reference_tree, trace_tree_model


def param_shapes(hidden: int = 8, vocab: int = 100, classes: int = 5
                 ) -> dict[str, tuple[int, ...]]:
    """The parameters' shapes (a model file is checked against them
    before anything is allocated)."""
    return {"emb": (vocab, hidden), "v": (hidden, 2 * hidden, 2 * hidden),
            "w": (hidden, 2 * hidden), "b": (hidden,),
            "w_out": (classes, hidden), "b_out": (classes,)}


def init_params(rng: np.random.Generator, hidden: int = 8, vocab: int = 100,
                classes: int = 5) -> dict[str, np.ndarray]:
    """`param_shapes`, N(0, 0.25) each but the tensor, N(0, 0.01)."""
    scale = {"v": 0.1}
    return {k: (scale.get(k, 0.5) * rng.standard_normal(s)).astype(np.float32)
            for k, s in param_shapes(hidden, vocab, classes).items()}


def make_cells(tanh, concat, bilinear):
    def leaf(p, x):
        return (x,)

    def combine(p, ls, rs):
        x = concat([ls[0], rs[0]])
        return (tanh(bilinear(p["v"], x, x) + p["w"] @ x + p["b"]),)

    return leaf, combine


def trace_model(params: dict[str, np.ndarray], node_scores: int = 0):
    """`node_scores=N`: also every node's logits (`tree_common`)."""
    leaf, combine = make_cells(rf.tanh, rf.concat, rf.bilinear)
    return trace_tree_model("rntn", params, params["b"].shape[0], leaf, combine,
                            node_scores=node_scores)


def reference(tree, root: int, params: dict[str, np.ndarray]):
    leaf, combine = make_cells(np.tanh, np.concatenate,
                               lambda v, x, y: np.einsum("i,kij,j->k", x, v, y))
    return reference_tree(tree, root, params, leaf, combine)


if __name__ == "__main__":
    dump_ir_main(lambda: trace_model(init_params(np.random.default_rng(0))), __doc__)
