"""Iterative baselines: a topologically sorted loop, as in the paper's Figure 1.

The recursive-dataflow-graphs paper (EuroSys'18) compares recursion with an
*iterative* implementation: the nodes of a tree in topological order (children
before parents), one cell per loop iteration, each node's state written into
an array indexed by node and read back by its parent. recir's structure arrays
are already in post-order, so the loop is `for i in range(root + 1)`.

- `MODELS` (TreeRNN, RNTN, TreeLSTM): PyTorch eager, the same parameters,
  cells and loss as `bench/torch_models.py` (subclasses that replace only the
  recursive `walk`). The state array is a Python list of tensors: a tensor
  written in place (`H[i] = h`) would invalidate the views autograd saves.
- `td_tree_lstm`: the top-down TreeLSTM with an explicit work queue (NumPy,
  float32), the iterative counterpart of `recir/models/td_tree_lstm.py`,
  whose recursion decides the tree's shape at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bench import torch_models
from bench.torch_models import States


class IterativeWalk(torch_models.TreeModel):
    """`walk` as a loop over nodes in post-order instead of a recursion; put
    first in the bases so it overrides the model's recursive walk."""

    def walk(self, tree: Any, i: int) -> tuple[States, torch.Tensor]:
        left, right, word, label = (tree.left.tolist(), tree.right.tolist(),
                                    tree.word.tolist(), tree.label.tolist())
        p = self.p
        states: list[States | None] = [None] * (i + 1)  # the array indexed by node
        total: torch.Tensor | None = None
        for k in range(i + 1):  # post-order: both children come before k
            if left[k] < 0:
                s = self.leaf(self.embed(word[k]))
            else:
                s = self.combine(states[left[k]], states[right[k]])
            states[k] = s
            logits = torch.mv(p["w_out"], s[0]) + p["b_out"]
            loss = torch.logsumexp(logits, 0) - logits[label[k]]
            total = loss if total is None else total + loss
        root = states[i]
        assert root is not None
        assert total is not None
        return root, total


class TreeRNN(IterativeWalk, torch_models.TreeRNN):
    pass


class RNTN(IterativeWalk, torch_models.RNTN):
    pass


class TreeLSTM(IterativeWalk, torch_models.TreeLSTM):
    pass


MODELS = {"tree_rnn": TreeRNN, "rntn": RNTN, "tree_lstm": TreeLSTM}


def td_tree_lstm(x: np.ndarray, max_depth: int,
                 params: dict[str, np.ndarray]) -> tuple[int, float]:
    """(nodes generated, sum of their hidden units), float32, a work queue.

    Same math as `td_tree_lstm.reference` (float64 there, the oracle).
    """
    p = {k: np.asarray(v, np.float32) for k, v in params.items()}
    hidden = p["w_in"].shape[0]
    count, total = 0, np.float32(0)
    queue = [(np.tanh(p["w_in"] @ x), np.zeros(hidden, np.float32), 0)]
    while queue:
        h, c, depth = queue.pop()
        count += 1
        total += h.sum()
        if p["u_score"] @ h <= 0 or depth >= max_depth:
            continue
        for side in ("left", "right"):
            pre = p[f"w_{side}"] @ h + p[f"b_{side}"]
            gates = 1 / (1 + np.exp(-pre[: 3 * hidden]))
            u = np.tanh(pre[3 * hidden:])
            c2 = gates[:hidden] * u + gates[hidden:2 * hidden] * c
            queue.append((gates[2 * hidden:] * np.tanh(c2), c2, depth + 1))
    return count, float(total)
