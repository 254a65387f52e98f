"""PyTorch eager versions of recir's tree models: the usual baseline.

Same parameters and the same math as each model's NumPy `reference`
(`recir/models/`): a leaf's state from its word embedding, an inner node's
from its children's, and the softmax cross-entropy of `w_out h + b_out`
summed over all nodes. The tree is walked recursively in Python, one node at
a time, as eager frameworks do without batching tricks. Where it changes only
the number of dispatches, torch gets the cheaper form (gates that share a
nonlinearity in one call on a contiguous slice; the RNTN tensor as two
matvecs instead of an einsum; sparse embedding gradients): fairer to torch.

`TreeLSTM(params)` evaluates under no_grad and shares the NumPy arrays
(`bench/native.py`); `train=True` copies them into leaf tensors that
`step` updates (`bench/train.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

States = tuple[torch.Tensor, ...]


class TreeModel:
    """The walk and the loss; subclasses give `leaf(x)` and `combine(ls, rs)`."""

    def __init__(self, params: dict[str, np.ndarray],
                 dtype: torch.dtype = torch.float32, train: bool = False):
        if train:  # own copies: SGD must not write into the caller's arrays
            self.p = {k: torch.tensor(v, dtype=dtype, requires_grad=True)
                      for k, v in params.items()}
        else:
            self.p = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype)
                      for k, v in params.items()}
        self.hidden = params["w_out"].shape[1]

    def leaf(self, x: torch.Tensor) -> States:
        raise NotImplementedError

    def combine(self, ls: States, rs: States) -> States:
        raise NotImplementedError

    def embed(self, word: int) -> torch.Tensor:
        """A sparse gradient when training: a dense one is vocab x embed per leaf."""
        if self.p["emb"].requires_grad:
            return F.embedding(torch.tensor(word), self.p["emb"], sparse=True)
        return self.p["emb"][word]

    def walk(self, tree: Any, i: int) -> tuple[States, torch.Tensor]:
        """(states, summed loss) of the subtree rooted at node `i`."""
        left, right, word, label = (tree.left.tolist(), tree.right.tolist(),
                                    tree.word.tolist(), tree.label.tolist())
        p = self.p

        def visit(i: int) -> tuple[States, torch.Tensor | None]:
            if left[i] < 0:
                states, below = self.leaf(self.embed(word[i])), None
            else:
                ls, loss_l = visit(left[i])
                rs, loss_r = visit(right[i])
                states, below = self.combine(ls, rs), loss_l + loss_r
            logits = torch.mv(p["w_out"], states[0]) + p["b_out"]
            loss = torch.logsumexp(logits, 0) - logits[label[i]]
            return states, loss if below is None else loss + below

        return visit(i)

    def __call__(self, tree: Any, root: int) -> tuple[np.ndarray, float]:
        """Root hidden state and total loss, like the NumPy reference."""
        with torch.no_grad():
            states, loss = self.walk(tree, root)
        return states[0].numpy(), float(loss)

    def loss(self, tree: Any) -> torch.Tensor:
        return self.walk(tree, int(tree.root))[1]

    def step(self, batch: list[Any], lr: float) -> float:
        """One SGD step on the mean of the batch's gradients; the summed loss.

        Each tree's graph is freed by its own backward (gradients add up in
        `.grad`), as recir frees each tree's frames.
        """
        total = 0.0
        for tree in batch:
            loss = self.loss(tree)
            loss.backward()
            total += loss.item()
        with torch.no_grad():
            for value in self.p.values():
                if value.grad is not None:  # None: unused (a one-leaf tree's w)
                    value.add_(value.grad, alpha=-lr / len(batch))
                value.grad = None
        return total

    def gradients(self, tree: Any) -> tuple[float, dict[str, np.ndarray]]:
        """One tree's loss and dense float32 gradients (for the check)."""
        loss = self.loss(tree)
        loss.backward()
        grads = {k: np.zeros(tuple(v.shape), np.float32) if v.grad is None else
                 (v.grad.to_dense() if v.grad.is_sparse else v.grad).numpy().copy()
                 for k, v in self.p.items()}
        for v in self.p.values():
            v.grad = None
        return loss.item(), grads

    def saved_bytes(self, tree: Any) -> int:
        """Bytes of the tensors autograd saves for one tree's backward (its tape).

        Counted once per storage, parameters excluded: the figure comparable to
        recir's `last_tape_bytes`.
        """
        params = {v.untyped_storage().data_ptr() for v in self.p.values()}
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = self.loss(tree)
        del loss
        return sum(seen.values())


class TreeRNN(TreeModel):
    """h = tanh(W [h_l; h_r] + b); a leaf's h is its embedding."""

    def leaf(self, x: torch.Tensor) -> States:
        return (x,)

    def combine(self, ls: States, rs: States) -> States:
        p = self.p
        return (torch.tanh(torch.mv(p["w"], torch.cat([ls[0], rs[0]])) + p["b"]),)


class RNTN(TreeModel):
    """h = tanh(x^T V x + W x + b), x = [h_l; h_r]; a leaf's h is its embedding.

    x^T V[k] x as (V x) x: a (h*2h x 2h) matvec, then (h x 2h) @ x.
    """

    def leaf(self, x: torch.Tensor) -> States:
        return (x,)

    def combine(self, ls: States, rs: States) -> States:
        p, n = self.p, 2 * self.hidden
        x = torch.cat([ls[0], rs[0]])
        bilinear = torch.mv(torch.mv(p["v"].view(-1, n), x).view(-1, n), x)
        return (torch.tanh(bilinear + torch.mv(p["w"], x) + p["b"]),)


class TreeLSTM(TreeModel):
    """Binary TreeLSTM (Tai et al. 2015): states (h, c)."""

    def leaf(self, x: torch.Tensor) -> States:
        p, hd = self.p, self.hidden
        pre = torch.mv(p["w_leaf"], x) + p["b_leaf"]
        io = torch.sigmoid(pre[: 2 * hd])
        c = io[:hd] * torch.tanh(pre[2 * hd:])
        return io[hd:] * torch.tanh(c), c

    def combine(self, ls: States, rs: States) -> States:
        p, hd = self.p, self.hidden
        (hl, cl), (hr, cr) = ls, rs
        pre = torch.mv(p["u"], torch.cat([hl, hr])) + p["b"]
        g = torch.sigmoid(pre[: 4 * hd])
        u = torch.tanh(pre[4 * hd:])
        c = g[:hd] * u + g[hd:2 * hd] * cl + g[2 * hd:3 * hd] * cr
        return g[3 * hd:] * torch.tanh(c), c


MODELS = {"tree_rnn": TreeRNN, "rntn": RNTN, "tree_lstm": TreeLSTM}
