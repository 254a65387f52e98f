"""SST accuracy: fine-grained (5 classes) and binary, at the root and over all nodes.

Binary follows the usual SST protocol: gold labels 0-1 are negative, 3-4
positive, neutral (2) is left out; the prediction compares the summed
probabilities of the negative and positive classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def class_probabilities(h: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    logits = params["w_out"] @ h + params["b_out"]
    e = np.exp(logits - logits.max())
    return e / e.sum()


def binary_prediction(probs: np.ndarray) -> int:
    return int(probs[3:].sum() > probs[:2].sum())


class Accuracy:
    """Counts fine and binary hits."""

    def __init__(self) -> None:
        self.fine = self.fine_total = self.binary = self.binary_total = 0

    def add(self, probs: np.ndarray, label: int) -> None:
        self.fine += int(np.argmax(probs) == label)
        self.fine_total += 1
        if label != 2:
            self.binary += int(binary_prediction(probs) == int(label > 2))
            self.binary_total += 1

    def as_dict(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_fine": self.fine / max(self.fine_total, 1),
                f"{prefix}_binary": self.binary / max(self.binary_total, 1)}


def evaluate(forward: Callable[..., Any], params: dict[str, np.ndarray],
             trees: Sequence[Any], all_nodes: bool = False) -> dict[str, float]:
    """Root accuracy; with `all_nodes`, also every node's (one forward per
    node, each rooted there: the models return the root's state only)."""
    root, nodes = Accuracy(), Accuracy()
    for tree in trees:
        inputs = (tree.left, tree.right, tree.word, tree.label)
        root_h = forward(*inputs, tree.root)[0]
        root.add(class_probabilities(root_h, params), int(tree.label[tree.root]))
        if all_nodes:
            for i in range(tree.num_nodes):
                h = root_h if i == tree.root else forward(*inputs, i)[0]
                nodes.add(class_probabilities(h, params), int(tree.label[i]))
    out = root.as_dict("root")
    if all_nodes:
        out |= nodes.as_dict("all")
    return out
