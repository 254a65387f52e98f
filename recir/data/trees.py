"""Trees as structure arrays: what recursive models read at run time.

A tree of N nodes is stored in post-order (children before parents, the root
last) as int32 arrays: `left`/`right` (child index, -1 at a leaf), `word`
(word id at a leaf, -1 inside) and `label` (0-4 per node, -1 if unknown).
A batch concatenates trees with offset indices and lists their roots.
Native code trusts these arrays, so `validate_structure` checks them first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class TreeStructureError(ValueError):
    """Structure arrays that would make a recursive model misbehave."""


@dataclass(frozen=True)
class Tree:
    left: np.ndarray
    right: np.ndarray
    word: np.ndarray
    label: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.left.shape[0])

    @property
    def root(self) -> int:
        return self.num_nodes - 1

    @property
    def roots(self) -> np.ndarray:
        return np.array([self.root], dtype=np.int32)

    @property
    def num_leaves(self) -> int:
        return int((self.left < 0).sum())

    def depth(self) -> int:
        """Edges on the longest root-to-leaf path (a single leaf has depth 0)."""
        return int(node_depths(self.left, self.right, self.roots).max())


@dataclass(frozen=True)
class TreeBatch:
    left: np.ndarray
    right: np.ndarray
    word: np.ndarray
    label: np.ndarray
    roots: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.left.shape[0])


def batch_trees(trees: Sequence[Tree]) -> TreeBatch:
    """Concatenate trees into one set of arrays, offsetting child indices."""
    offsets = np.cumsum([0] + [t.num_nodes for t in trees[:-1]])

    def shifted(field: str) -> np.ndarray:
        parts = [getattr(t, field) for t in trees]
        return np.concatenate(
            [np.where(p >= 0, p + o, -1) for p, o in zip(parts, offsets, strict=True)]
        ).astype(np.int32)

    return TreeBatch(
        left=shifted("left"),
        right=shifted("right"),
        word=np.concatenate([t.word for t in trees]).astype(np.int32),
        label=np.concatenate([t.label for t in trees]).astype(np.int32),
        roots=np.array([o + t.root for o, t in zip(offsets, trees, strict=True)], np.int32),
    )


def node_depths(left: np.ndarray, right: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Depth of every node reachable from `roots` (-1 elsewhere); iterative."""
    depth = np.full(left.shape[0], -1, dtype=np.int64)
    stack = [(int(r), 0) for r in roots]
    while stack:
        node, d = stack.pop()
        depth[node] = d
        if left[node] >= 0:
            stack += [(int(left[node]), d + 1), (int(right[node]), d + 1)]
    return depth


def validate_structure(
    left: np.ndarray,
    right: np.ndarray,
    roots: np.ndarray,
    num_words: int | None = None,
    word: np.ndarray | None = None,
    max_depth: int = 10_000,
) -> None:
    """Raise `TreeStructureError` unless the arrays describe proper binary trees.

    Checks, in O(N) without recursion: child indices in range, every node
    with zero or two children, no node reached twice (no sharing, no cycles),
    word ids in range at the leaves, and depth at most `max_depth`.
    """
    n = left.shape[0]
    if right.shape[0] != n:
        raise TreeStructureError(f"left has {n} nodes but right has {right.shape[0]}")
    seen = np.zeros(n, dtype=bool)
    stack = []
    for r in roots:
        if not 0 <= r < n:
            raise TreeStructureError(f"root {int(r)} is out of range for {n} nodes")
        stack.append((int(r), 0))
    while stack:
        node, depth = stack.pop()
        if seen[node]:
            raise TreeStructureError(f"node {node} is reached twice (shared or cyclic)")
        seen[node] = True
        if depth > max_depth:
            raise TreeStructureError(f"node {node} is deeper than the limit {max_depth}")
        kids = int(left[node]), int(right[node])
        if (kids[0] < 0) != (kids[1] < 0):
            raise TreeStructureError(f"node {node} has one child; expected zero or two")
        if kids[0] < 0:
            check_word(node, word, num_words)
            continue
        for child in kids:
            if child >= n:
                raise TreeStructureError(
                    f"node {node} has child {child}, out of range for {n} nodes"
                )
            stack.append((child, depth + 1))


def check_word(node: int, word: np.ndarray | None, num_words: int | None) -> None:
    if word is None or num_words is None:
        return
    if not 0 <= word[node] < num_words:
        raise TreeStructureError(
            f"leaf {node} has word id {int(word[node])}, out of range [0, {num_words})"
        )
