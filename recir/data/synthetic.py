"""Synthetic treebanks shaped like SST, for tests and benchmarks without SST.

Shapes follow the recursive-dataflow-graphs paper's Table 1: `balanced`
(complete-ish binary trees), `linear` (a chain: every internal node has a
leaf child) and `moderate` (random split points, SST-like depth). Each word
has a fixed polarity; a node's label is the sign and size of the sum of its
leaves' polarities mapped to 0-4, so a model can learn it.
"""

from __future__ import annotations

import numpy as np

from recir.data.trees import Tree

SHAPES = ("balanced", "moderate", "linear")
SKEW = 0.5  # gives moderate trees SST's mean depth (about 10 at 19 leaves)


def split_point(shape: str, leaves: int, rng: np.random.Generator) -> int:
    """How many of `leaves` go to the left subtree."""
    if shape == "balanced":
        return (leaves + 1) // 2
    if shape == "linear":
        return 1
    if rng.random() < SKEW:  # peel one word off either side, as parses often do
        return 1 if rng.random() < 0.5 else leaves - 1
    return int(rng.integers(1, leaves))


def make_tree(
    shape: str, num_leaves: int, rng: np.random.Generator, vocab_size: int = 100
) -> Tree:
    if shape not in SHAPES:
        raise ValueError(f"unknown tree shape '{shape}', expected one of {SHAPES}")
    polarity = np.sin(np.arange(vocab_size) * 2.39996)  # fixed per word id
    left: list[int] = []
    right: list[int] = []
    word: list[int] = []
    score: list[float] = []
    # Iterative post-order construction; a frame is (leaves, left size, children).
    stack: list[tuple[int, int, list[int]]] = [(num_leaves, 0, [])]
    done: list[int] = []
    while stack:
        leaves, k, kids = stack[-1]
        if leaves == 1:
            stack.pop()
            w = int(rng.integers(vocab_size))
            left.append(-1), right.append(-1), word.append(w), score.append(polarity[w])
            (stack[-1][2] if stack else done).append(len(left) - 1)
        elif len(kids) == 2:
            stack.pop()
            left.append(kids[0]), right.append(kids[1]), word.append(-1)
            score.append(score[kids[0]] + score[kids[1]])
            (stack[-1][2] if stack else done).append(len(left) - 1)
        elif kids:
            stack.append((leaves - k, 0, []))
        else:
            k = split_point(shape, leaves, rng)
            stack[-1] = (leaves, k, kids)
            stack.append((k, 0, []))
    label = np.digitize(np.array(score), [-1.5, -0.5, 0.5, 1.5]).astype(np.int32)
    arrays = [np.array(v, dtype=np.int32) for v in (left, right, word)]
    return Tree(*arrays, label)


def make_treebank(
    n: int, shape: str = "moderate", *, num_leaves: int | None = None,
    vocab_size: int = 100, seed: int = 0,
) -> list[Tree]:
    """`n` trees; leaves drawn around SST's mean of 19 unless `num_leaves` is given."""
    rng = np.random.default_rng(seed)
    sizes = (
        [num_leaves] * n if num_leaves is not None
        else np.clip(rng.poisson(19, n), 2, 60).tolist()
    )
    return [make_tree(shape, int(k), rng, vocab_size) for k in sizes]
