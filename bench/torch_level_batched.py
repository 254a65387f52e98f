"""PyTorch level-batched tree models: the usual batching baseline.

The trees of a batch are concatenated (`recir.data.batch_trees`) and their
nodes grouped by height (a leaf is 0, a parent one more than its taller
child), so every node of a level has its children in earlier levels. Each
level is one batched cell: a gather of the children's rows from a state
buffer, one matrix-matrix product, the gates, an in-place `index_copy_` of
the results back into the buffer. The loss (softmax cross-entropy summed over
all nodes) is one product over the whole buffer at the end. This is the
dynamic batching of TensorFlow Fold restricted to one op type per level, as
hand-written PyTorch batching usually is.

Same parameters and math as `bench/torch_models.py` and the NumPy references
(the suite checks both); the cells are written for a batch of rows, so they
cannot be shared with the vector cells there. `Model(params)` evaluates
under no_grad (`infer(trees)`); `Model(params, train=True)` has `step` and
`gradients` like `bench/torch_models.TreeModel`, one graph per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bench.torch_models import TreeModel
from recir.data import batch_trees


def levels(left: np.ndarray, right: np.ndarray) -> list[np.ndarray]:
    """Node indices grouped by height; children precede parents in the arrays."""
    height = np.zeros(left.shape[0], np.int64)
    for i in np.flatnonzero(left >= 0):  # ascending: children already done
        height[i] = 1 + max(height[left[i]], height[right[i]])
    order = np.argsort(height, kind="stable")
    bounds = np.searchsorted(height[order], np.arange(height.max() + 2))
    return [order[bounds[k]:bounds[k + 1]] for k in range(len(bounds) - 1)]


class LevelBatched(TreeModel):
    """Subclasses give `leaves(x)` and `combine(ls, rs)` on rows, and `width`,
    the number of state columns (h, or h and c side by side)."""

    width_factor = 1

    def leaves(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def combine_rows(self, ls: torch.Tensor, rs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, trees: list[Any]) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """(state rows of every node, per-node losses, the batch)."""
        batch = batch_trees(trees)
        left, right = batch.left, batch.right
        states = torch.zeros(batch.num_nodes, self.width_factor * self.hidden)
        groups = levels(left, right)
        leaf = torch.from_numpy(groups[0])
        words = torch.from_numpy(batch.word[groups[0]].astype(np.int64))
        states.index_copy_(0, leaf, self.leaves(self.embed_rows(words)))
        for group in groups[1:]:
            ls = states.index_select(0, torch.from_numpy(left[group].astype(np.int64)))
            rs = states.index_select(0, torch.from_numpy(right[group].astype(np.int64)))
            states.index_copy_(0, torch.from_numpy(group), self.combine_rows(ls, rs))
        h = states[:, : self.hidden]
        logits = F.linear(h, self.p["w_out"], self.p["b_out"])
        labels = torch.from_numpy(batch.label.astype(np.int64))
        return states, F.cross_entropy(logits, labels, reduction="none"), batch

    def embed_rows(self, words: torch.Tensor) -> torch.Tensor:
        return F.embedding(words, self.p["emb"], sparse=self.p["emb"].requires_grad)

    def infer(self, trees: list[Any]) -> list[tuple[np.ndarray, float]]:
        """Each tree's root h and summed loss."""
        with torch.no_grad():
            states, losses, batch = self.forward(trees)
        sums = np.add.reduceat(losses.numpy(), tree_starts(batch))
        roots = states[torch.from_numpy(batch.roots.astype(np.int64)), : self.hidden]
        return [(roots[k].numpy(), float(sums[k])) for k in range(len(trees))]

    def __call__(self, tree: Any, root: int) -> tuple[np.ndarray, float]:
        return self.infer([tree])[0]

    def loss(self, tree: Any) -> torch.Tensor:
        return self.forward([tree])[1].sum()

    def step(self, batch: list[Any], lr: float) -> float:
        """One SGD step on the batch mean: one graph and one backward per batch."""
        loss = self.forward(batch)[1].sum()
        loss.backward()
        with torch.no_grad():
            for value in self.p.values():
                if value.grad is not None:
                    value.add_(value.grad, alpha=-lr / len(batch))
                value.grad = None
        return loss.item()


def tree_starts(batch: Any) -> np.ndarray:
    """Index of each tree's first node in the concatenated arrays."""
    return np.concatenate([[0], batch.roots[:-1] + 1]).astype(np.int64)


class TreeRNN(LevelBatched):
    def leaves(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def combine_rows(self, ls: torch.Tensor, rs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(F.linear(torch.cat([ls, rs], 1), self.p["w"], self.p["b"]))


class RNTN(LevelBatched):
    """x^T V[k] x for all rows: (x V') reshaped, then a batched dot with x."""

    def leaves(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def combine_rows(self, ls: torch.Tensor, rs: torch.Tensor) -> torch.Tensor:
        p, n = self.p, 2 * self.hidden
        x = torch.cat([ls, rs], 1)
        vx = F.linear(x, p["v"].view(-1, n)).view(x.shape[0], -1, n)
        bilinear = torch.bmm(vx, x.unsqueeze(2)).squeeze(2)
        return torch.tanh(bilinear + F.linear(x, p["w"], p["b"]))


class TreeLSTM(LevelBatched):
    """State rows are [h | c]."""

    width_factor = 2

    def leaves(self, x: torch.Tensor) -> torch.Tensor:
        hd = self.hidden
        pre = F.linear(x, self.p["w_leaf"], self.p["b_leaf"])
        io = torch.sigmoid(pre[:, : 2 * hd])
        c = io[:, :hd] * torch.tanh(pre[:, 2 * hd:])
        return torch.cat([io[:, hd:] * torch.tanh(c), c], 1)

    def combine_rows(self, ls: torch.Tensor, rs: torch.Tensor) -> torch.Tensor:
        hd = self.hidden
        pre = F.linear(torch.cat([ls[:, :hd], rs[:, :hd]], 1), self.p["u"], self.p["b"])
        g = torch.sigmoid(pre[:, : 4 * hd])
        c = (g[:, :hd] * torch.tanh(pre[:, 4 * hd:]) + g[:, hd:2 * hd] * ls[:, hd:]
             + g[:, 2 * hd:3 * hd] * rs[:, hd:])
        return torch.cat([g[:, 3 * hd:] * torch.tanh(c), c], 1)


MODELS = {"tree_rnn": TreeRNN, "rntn": RNTN, "tree_lstm": TreeLSTM}
