"""batching="frontier"'s products over rows (the generated GEMM kernels:
X W^T forward, dY W and dY^T X backward) at sizes that fill no tile: a
hidden size of 19 and frontiers of every row count from 1 up, against a
float64 NumPy TreeRNN and its hand-written gradient."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir.data.synthetic import make_treebank
from recir.data.trees import Tree
from recir.models import tree_rnn

HIDDEN = 19  # neither a multiple of a vector nor of a register tile


def batch() -> list[Tree]:
    leaf = Tree(left=[-1], right=[-1], word=[7], label=[3])
    return [leaf, *make_treebank(2, "linear", num_leaves=9, seed=2),
            *make_treebank(5, seed=3), *make_treebank(1, "balanced", num_leaves=13, seed=4)]


def reference_grads(tree: Tree, p: dict[str, np.ndarray], g: dict[str, np.ndarray]) -> None:
    """The loss's gradient (a softmax cross-entropy at every node) added into `g`."""
    def forward(i: int) -> np.ndarray:
        if tree.left[i] < 0:
            return p["emb"][tree.word[i]]
        c = np.concatenate([forward(int(tree.left[i])), forward(int(tree.right[i]))])
        return np.tanh(p["w"] @ c + p["b"])

    def backward(i: int, dh: np.ndarray) -> None:
        h = forward(i)
        logits = p["w_out"] @ h + p["b_out"]
        dlogits = np.exp(logits - logits.max())
        dlogits /= dlogits.sum()
        dlogits[int(tree.label[i])] -= 1
        g["w_out"] += np.outer(dlogits, h)
        g["b_out"] += dlogits
        dh = dh + p["w_out"].T @ dlogits
        if tree.left[i] < 0:
            g["emb"][tree.word[i]] += dh
            return
        left, right = int(tree.left[i]), int(tree.right[i])
        c = np.concatenate([forward(left), forward(right)])
        dz = dh * (1 - h * h)
        g["w"] += np.outer(dz, c)
        g["b"] += dz
        dc = p["w"].T @ dz
        backward(left, dc[:hidden])
        backward(right, dc[hidden:])

    hidden = len(p["b"])
    backward(len(tree.left) - 1, np.zeros(hidden))


def assert_numpy_gradients(params: dict[str, np.ndarray], got: dict[str, np.ndarray],
                           trees: list[Tree]) -> None:
    """`got` is the TreeRNN loss's gradient over `trees` (`reference_grads`
    in float64; float32 sums against it)."""
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    want = {k: np.zeros_like(v) for k, v in p64.items()}
    for tree in trees:
        reference_grads(tree, p64, want)
    for k, g in want.items():
        np.testing.assert_allclose(got[k], g, rtol=1e-3, atol=1e-4, err_msg=k)


def test_products_at_sizes_that_fill_no_tile_match_numpy():
    params = tree_rnn.init_params(np.random.default_rng(6), hidden=HIDDEN, vocab=100)
    traced = tree_rnn.trace_model(params)
    trees = batch()
    inputs = [(t.left, t.right, t.word, t.label, t.root) for t in trees]

    outs, grads = recir.value_and_grad(traced, batching="frontier").batch(inputs)
    for (h, loss), tree in zip(outs, trees, strict=True):
        h_ref, loss_ref = tree_rnn.reference(tree, len(tree.left) - 1, params)
        np.testing.assert_allclose(h, h_ref, rtol=1e-4, atol=1e-5)
        assert loss == pytest.approx(loss_ref, rel=1e-4)
    assert_numpy_gradients(params, grads, trees)
