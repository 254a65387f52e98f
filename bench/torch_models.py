"""PyTorch eager versions of recir's models, the usual baseline for TreeLSTMs.

Same parameters (shared with `torch.from_numpy`) and the same math as
`recir.models.tree_lstm.reference`: per node a gate pre-activation from one
matvec, sigmoid gates, a tanh candidate, and the softmax cross-entropy of
`w_out h + b_out` summed over all nodes. The tree is walked recursively in
Python, one node at a time, as eager frameworks do without batching tricks.
Gates that share a nonlinearity are computed in one call on a contiguous
slice (elementwise, so identical math, fewer dispatches: fairer to torch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class TreeLSTM:
    """Binary TreeLSTM (Tai et al. 2015) evaluated per tree under no_grad."""

    def __init__(self, params: dict[str, np.ndarray],
                 dtype: torch.dtype = torch.float32):
        self.p = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype)
                  for k, v in params.items()}
        self.hidden = params["w_out"].shape[1]

    def node(self, tree: Any, i: int) -> tuple[torch.Tensor, ...]:
        """(h, c, summed loss) of the subtree rooted at node `i`."""
        p, hd = self.p, self.hidden
        if tree.left[i] < 0:
            pre = torch.mv(p["w_leaf"], p["emb"][int(tree.word[i])]) + p["b_leaf"]
            io = torch.sigmoid(pre[: 2 * hd])
            c = io[:hd] * torch.tanh(pre[2 * hd:])
            h = io[hd:] * torch.tanh(c)
            below = None
        else:
            hl, cl, loss_l = self.node(tree, int(tree.left[i]))
            hr, cr, loss_r = self.node(tree, int(tree.right[i]))
            pre = torch.mv(p["u"], torch.cat([hl, hr])) + p["b"]
            g = torch.sigmoid(pre[: 4 * hd])
            u = torch.tanh(pre[4 * hd:])
            c = g[:hd] * u + g[hd:2 * hd] * cl + g[2 * hd:3 * hd] * cr
            h = g[3 * hd:] * torch.tanh(c)
            below = loss_l + loss_r
        logits = torch.mv(p["w_out"], h) + p["b_out"]
        loss = torch.logsumexp(logits, 0) - logits[int(tree.label[i])]
        return h, c, loss if below is None else loss + below

    def __call__(self, tree: Any, root: int) -> tuple[np.ndarray, float]:
        """Root hidden state and total loss, like the NumPy reference."""
        with torch.no_grad():
            h, _, loss = self.node(tree, root)
        return h.numpy(), float(loss)
