"""Trees as structure arrays: what recursive models read at run time.

A tree of N nodes is stored in post-order (children before parents, the root
last) as int32 arrays: `left`/`right` (child index, -1 at a leaf), `word`
(word id at a leaf, -1 inside) and `label` (0-4 per node, -1 if unknown).
A batch concatenates trees with offset indices and lists their roots, so a
model written against these field names takes a `Tree` or a `TreeBatch`.
Native code checks each index it reads, but a cycle or a shared child passes
those checks, hence `validate_structure` (`validate_trees` for many trees:
what `train` and `predict` run) checks the arrays first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int32]


class TreeStructureError(ValueError):
    """Structure arrays that would make a recursive model misbehave."""


def as_index_array(values: npt.ArrayLike, name: str) -> IntArray:
    """A 1-D int32 array, refusing floats and anything that would not fit."""
    array = np.asarray(values)
    if array.dtype == np.int32 and array.ndim == 1:  # the parsers' (nothing to check)
        return np.ascontiguousarray(array)
    integral = array.size == 0 or np.issubdtype(array.dtype, np.integer)
    if array.ndim != 1 or not integral:
        raise TreeStructureError(f"{name} must be a 1-d integer array, "
                                 f"got {array.dtype} with shape {array.shape}")
    if array.size and (array.min() < np.iinfo(np.int32).min
                       or array.max() > np.iinfo(np.int32).max):
        raise TreeStructureError(f"{name} has values that do not fit in int32")
    return np.ascontiguousarray(array, dtype=np.int32)


@dataclass(frozen=True, eq=False)
class NodeArrays:
    """The per-node arrays of a tree or a batch; `eq=False` because comparing
    arrays field-wise is ambiguous."""

    left: IntArray
    right: IntArray
    word: IntArray
    label: IntArray

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, as_index_array(getattr(self, f.name), f.name))
        sizes = [a.shape[0] for a in (self.left, self.right, self.word, self.label)]
        if len(set(sizes)) != 1:
            raise TreeStructureError(
                f"left, right, word and label need one length, got {sizes}")

    @property
    def num_nodes(self) -> int:
        return int(self.left.shape[0])


@dataclass(frozen=True, eq=False)
class Tree(NodeArrays):
    """One tree."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.left.size:
            raise TreeStructureError("a tree needs at least one node")

    @property
    def root(self) -> int:
        return self.num_nodes - 1

    @property
    def roots(self) -> IntArray:
        """`[root]`, so code written for a `TreeBatch` also takes a `Tree`."""
        return np.array([self.root], dtype=np.int32)

    @property
    def leaves(self) -> IntArray:
        """Leaf node indices, left to right (the sentence's word order)."""
        return np.flatnonzero(self.left < 0).astype(np.int32)

    @property
    def num_leaves(self) -> int:
        return int(np.count_nonzero(self.left < 0))

    def depth(self) -> int:
        """Edges on the longest root-to-leaf path: a single leaf has depth 0."""
        return int(node_depths(self.left, self.right, self.roots).max())


@dataclass(frozen=True, eq=False)
class TreeBatch(NodeArrays):
    """Trees concatenated into one set of arrays; `roots[b]` is tree b's root."""

    roots: IntArray

    @property
    def num_trees(self) -> int:
        return int(self.roots.shape[0])


def batch_trees(trees: Sequence[Tree]) -> TreeBatch:
    """Concatenate trees into one set of arrays, offsetting child indices.

    Only `Tree`s: a `TreeBatch` read as one tree kept its last root alone
    (the others silently dropped), and a generator was emptied by the check.
    """
    trees = list(trees)
    if (bad := next((t for t in trees if not isinstance(t, Tree)), None)) is not None:
        hint = " (pass the trees it was made of)" if isinstance(bad, TreeBatch) else ""
        raise TypeError(f"batch_trees takes a sequence of Tree, got "
                        f"{type(bad).__name__}{hint}")
    if not trees:
        empty = np.zeros(0, dtype=np.int32)
        return TreeBatch(empty, empty, empty, empty, empty)
    sizes = np.array([t.num_nodes for t in trees], dtype=np.int64)
    offsets, starts = forest_offsets(sizes)
    return TreeBatch(
        left=shifted(np.concatenate([t.left for t in trees]), starts),
        right=shifted(np.concatenate([t.right for t in trees]), starts),
        word=np.concatenate([t.word for t in trees]),
        label=np.concatenate([t.label for t in trees]),
        roots=(offsets + sizes - 1).astype(np.int32),
    )


def forest_offsets(sizes: IntArray) -> tuple[IntArray, IntArray]:
    """Each tree's first node in the joined arrays, and each node's tree's."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return offsets, np.repeat(offsets, sizes)


def shifted(children: IntArray, starts: IntArray) -> IntArray:
    """Child indices moved by their tree's offset; -1 (none) kept."""
    return np.where(children >= 0, children + starts, -1).astype(np.int32)


def node_depths(
    left: IntArray, right: IntArray, roots: IntArray
) -> npt.NDArray[np.int64]:
    """Depth of every node reachable from `roots` (-1 elsewhere).

    Walks level by level with NumPy: O(N) work in O(depth) steps, no recursion.
    Meant for arrays that passed `validate_structure`; a node reached twice (a
    cycle, a shared child) is still caught once more than N nodes are reached,
    before a level doubles at each shared child (`Tree.depth()` of a 40-node
    chain of shared children walked 2**40 entries).
    """
    depth = np.full(left.shape[0], -1, dtype=np.int64)
    level, d, reached = np.asarray(roots, dtype=np.int64), 0, 0
    while level.size:
        reached += level.size
        if reached > left.shape[0]:
            check_single_parent(left, right, np.asarray(roots, dtype=np.int32))
            raise TreeStructureError(f"node {level[0]} is reached twice")
        depth[level] = d
        inner = level[left[level] >= 0]
        level, d = np.concatenate([left[inner], right[inner]]).astype(np.int64), d + 1
    return depth


def validate_structure(
    left: npt.ArrayLike,
    right: npt.ArrayLike,
    roots: npt.ArrayLike,
    num_words: int | None = None,
    max_depth: int = 10_000,
    *,
    word: npt.ArrayLike | None = None,
) -> None:
    """Raise `TreeStructureError` unless the arrays describe proper binary trees.

    Checks every node, reachable or not, so that neither a recursive walk from
    `roots` nor a loop over all nodes can index out of bounds: child indices
    are -1 or in range, each node has zero or two children, no node is a child
    twice or both a child and a root (so no sharing and no cycle reachable from
    a root), leaves in `word` (when given) have ids in [0, num_words), and no
    root is further than `max_depth` edges from its deepest leaf. O(N), no
    recursion; nodes unreachable from `roots` are allowed (a subset of a batch).
    """
    left, right = as_index_array(left, "left"), as_index_array(right, "right")
    roots = as_index_array(np.atleast_1d(np.asarray(roots)), "roots")
    n = left.shape[0]
    if right.shape[0] != n:
        raise TreeStructureError(f"left has {n} nodes but right has {right.shape[0]}")
    if (bad := np.flatnonzero((roots < 0) | (roots >= n))).size:
        raise TreeStructureError(f"root {roots[bad[0]]} is out of range [0, {n})")
    check_children(left, right)
    if word is not None:
        check_words(left, as_index_array(word, "word"), num_words)
    elif num_words is not None:
        raise TypeError("num_words needs the word array: pass word=...")
    check_single_parent(left, right, roots)
    depth = node_depths(left, right, roots)
    if depth.max(initial=0) > max_depth:
        node = int(np.argmax(depth > max_depth))
        raise TreeStructureError(
            f"node {node} is at depth {depth[node]}, deeper than the limit {max_depth}"
        )


def check_children(left: IntArray, right: IntArray) -> None:
    n = left.shape[0]
    for side, kids in (("left", left), ("right", right)):
        if (bad := np.flatnonzero((kids < -1) | (kids >= n))).size:
            node = int(bad[0])
            raise TreeStructureError(
                f"node {node} has {side} child {kids[node]}, out of range [0, {n})"
            )
    if (bad := np.flatnonzero((left < 0) != (right < 0))).size:
        raise TreeStructureError(
            f"node {bad[0]} has one child; a node needs zero or two")


def check_words(left: IntArray, word: IntArray, num_words: int | None) -> None:
    if word.shape[0] != left.shape[0]:
        raise TreeStructureError(
            f"left has {left.shape[0]} nodes but word has {word.shape[0]}")
    upper = np.iinfo(np.int32).max if num_words is None else num_words
    if (bad := np.flatnonzero((left < 0) & ((word < 0) | (word >= upper)))).size:
        node = int(bad[0])
        allowed = "negative" if num_words is None else f"out of range [0, {num_words})"
        raise TreeStructureError(f"leaf {node} has word id {word[node]}, {allowed}")


def check_single_parent(left: IntArray, right: IntArray, roots: IntArray) -> None:
    """A node reached twice means a shared subtree or a cycle; both forbidden.
    A cycle is named as one: a compiled model recursed round it until its
    stack ran out ('recursion ... is too deep')."""
    inner = left >= 0
    uses = np.bincount(np.concatenate([left[inner], right[inner], roots]),
                       minlength=left.shape[0])
    if not (bad := np.flatnonzero(uses > 1)).size:
        return
    node = int(bad[0])
    if below_itself(left, right, node):
        raise TreeStructureError(f"node {node} is its own descendant: left and right "
                                 "make a cycle through it")
    parents = np.flatnonzero(inner & ((left == node) | (right == node)))
    if parents.size and np.any(roots == node):
        raise TreeStructureError(
            f"node {node} is reached twice: a root and a child of node {parents[0]}")
    raise TreeStructureError(
        f"node {node} is reached twice (a shared child, a cycle or a repeated root)")


def below_itself(left: IntArray, right: IntArray, node: int) -> bool:
    """Whether `node` is in its own subtree: the subtree walked level by level,
    each node once (O(N), on the error path only)."""
    seen = np.zeros(left.shape[0], dtype=bool)
    level = np.array([node])
    while level.size:
        inner = level[left[level] >= 0]
        level = np.unique(np.concatenate([left[inner], right[inner]]))
        if np.any(level == node):
            return True
        level = level[~seen[level]]
        seen[level] = True
    return False


def read_once(items: object) -> list[Any] | None:
    """`items` as a list, read once (a generator is used up by a first look at
    its items); None for text or anything not iterable, such as one tree."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        return None
    return list(items)


def validate_trees(trees: Sequence[Any], what: str = "tree") -> None:
    """`validate_structure` of each of `trees` (anything with `left`, `right`
    and `root`) in one pass over all their nodes; the first bad tree is named
    (`{what} k: ...`) and numbered as its own. No depth limit and no word ids
    (a compiled model checks its indices as it reads them, but a cycle or a
    shared child passes those checks)."""
    if not trees:
        return
    try:
        left, right, roots = joined(trees)
        validate_structure(left, right, roots, max_depth=left.shape[0])
    except TreeStructureError as batched:
        for k, tree in enumerate(trees):  # (the error path: which tree, and where)
            try:
                validate_structure(tree.left, tree.right, tree.root,
                                   max_depth=np.shape(tree.left)[0])
            except TreeStructureError as error:
                raise TreeStructureError(f"{what} {k}: {error}") from None
        raise batched


def joined(trees: Sequence[Any]) -> tuple[IntArray, IntArray, IntArray]:
    """The trees' `left`, `right` and roots as one forest, child indices
    offset; a child or root out of its own tree's range is refused first (it
    would land in the next tree)."""
    lefts = [as_index_array(t.left, "left") for t in trees]
    rights = [as_index_array(t.right, "right") for t in trees]
    sizes = np.array([a.shape[0] for a in lefts], dtype=np.int64)
    roots = np.array([np.asarray(t.root).item() for t in trees], dtype=np.int64)
    if any(a.shape != b.shape for a, b in zip(lefts, rights, strict=True)) or np.any(
            (roots < 0) | (roots >= sizes)):
        raise TreeStructureError("a tree's arrays or root do not agree")
    offsets, starts = forest_offsets(sizes)
    bounds = np.repeat(sizes, sizes)
    left, right = np.concatenate(lefts), np.concatenate(rights)
    if np.any((left < -1) | (left >= bounds) | (right < -1) | (right >= bounds)):
        raise TreeStructureError("a child is out of its tree's range")
    if offsets[-1] + sizes[-1] > np.iinfo(np.int32).max:
        raise TreeStructureError("the trees have more nodes than int32 numbers")
    return shifted(left, starts), shifted(right, starts), (roots + offsets).astype(np.int32)
