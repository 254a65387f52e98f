"""Heights by groups of trees (`backend/height_groups.py`) against plain
Python: each invocation's tree, groups of consecutive trees, and the order
and table a team runs by."""

from __future__ import annotations

import numpy as np
import pytest

from recir.backend.height_groups import group_keys, group_table, groups_of, split_rows


def tree_of(children: list[np.ndarray], total: int) -> np.ndarray:
    """The reference of each invocation's tree (the native expansion
    writes it): its root's row (the roots are rows 0..batch-1 of
    `Schedule.expand`'s children, global rows, -1 where none), by pointer
    jumping from each row's parent."""
    tree = np.arange(total)
    for c in children:
        has = np.flatnonzero(c >= 0)
        tree[c[has]] = has
    while True:
        up = tree[tree]
        if np.array_equal(up, tree):
            return tree
        tree = up


def grouped(heights: np.ndarray, counts: np.ndarray, tree: np.ndarray, threads: int,
            tile: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The reference of the order by (height, group) (the height-order
    kernel sorts it) by NumPy's stable argsort, and each thread's rows of
    each height; None where the team does not run by groups."""
    key = group_keys(heights, counts, tree, threads, tile)
    if key is None:
        return None
    order = key.argsort(kind="stable")
    starts = np.zeros(len(counts) * threads + 1, np.int64)
    np.bincount(key, minlength=len(counts) * threads).cumsum(out=starts[1:])
    return order, group_table(starts, threads)


def forest(sizes: list[int], seed: int = 0) -> tuple[list[np.ndarray], np.ndarray, list[int]]:
    """Random binary trees of `sizes` leaves, numbered depth by depth as
    `Schedule.expand` numbers them (roots 0..batch-1, each depth's children
    in their parents' order): the two children arrays, each row's height,
    and each row's tree by a walk from the roots."""
    rng = np.random.default_rng(seed)
    left, right, owner, leaves_of = [], [], [], []
    level = [(t, k) for t, k in enumerate(sizes)]
    while level:
        start = len(owner) + len(level)
        below = []
        for t, k in level:
            owner.append(t)
            if k == 1:
                left.append(-1)
                right.append(-1)
                continue
            split = int(rng.integers(1, k))
            left.append(start + len(below))
            below.append((t, split))
            right.append(start + len(below))
            below.append((t, k - split))
        leaves_of += [k for _, k in level]
        level = below
    left_a, right_a = np.array(left), np.array(right)
    height = np.zeros(len(owner), np.int64)
    for row in reversed(range(len(owner))):  # children after their parents
        kids = [c for c in (left_a[row], right_a[row]) if c >= 0]
        height[row] = 1 + max(height[k] for k in kids) if kids else 0
    return [left_a, right_a], height, owner


def test_each_invocation_finds_its_tree() -> None:
    children, _, owner = forest([1, 7, 3, 12, 2])
    assert tree_of(children, len(owner)).tolist() == owner


def caterpillar(deepest: int) -> tuple[list[np.ndarray], list[int]]:
    """A root whose right child goes on down to depth `deepest`, a leaf on
    the left at every depth, numbered as `Schedule.expand` numbers them
    (each depth's left children, then its right ones), beside a leaf tree."""
    left, right = [2, -1], [3, -1]  # the roots: row 0 and the leaf tree's row 1
    for depth in range(1, deepest + 1):
        below = len(left) + 2  # this depth's two rows, then the next depth's
        inner = depth < deepest
        left += [-1, below if inner else -1]
        right += [-1, below + 1 if inner else -1]
    owner = [0, 1] + [0] * (2 * deepest)
    return [np.array(left), np.array(right)], owner


@pytest.mark.parametrize("deepest", [1, 2, 3, 8, 9, 33])
def test_the_deepest_row_of_a_caterpillar_finds_its_tree(deepest: int) -> None:
    children, owner = caterpillar(deepest)
    assert tree_of(children, len(owner)).tolist() == owner


def test_groups_balance_their_trees_nodes() -> None:
    """Not runs of consecutive trees: the two largest trees go to two
    groups, the small ones fill the third."""
    sizes = np.array([5, 9, 1, 30, 7, 7, 8, 2, 11, 4])
    groups = groups_of(sizes, 3)
    assert groups.dtype == np.int64
    totals = np.bincount(groups, weights=sizes)
    assert totals.max() == 30 and sorted(totals) == [27, 27, 30]


def test_grouped_order_and_table_give_each_thread_its_trees_rows() -> None:
    sizes = [9, 4, 13, 6, 8, 11, 5, 7]
    children, height, owner = forest(sizes, seed=3)
    counts = np.bincount(height)
    threads = 3
    found = grouped(height, counts, np.array(owner), threads, tile=8)
    assert found is not None
    order, table = found
    tree_group = groups_of(np.bincount(owner), threads)
    rows = [(int(height[i]), int(tree_group[owner[i]])) for i in order]
    assert rows == sorted(rows)  # by height, then group
    bounds = np.concatenate([[0], np.cumsum(counts)])
    assert (table[:, 0] == bounds[:-1]).all() and (table[:, -1] == bounds[1:]).all()
    for h in range(len(counts)):
        for g in range(threads):
            got = rows[table[h, g]:table[h, g + 1]]
            assert got == [(h, g)] * sum(1 for i in range(len(owner))
                                         if height[i] == h and tree_group[owner[i]] == g)


def test_groups_only_where_they_leave_a_thread_fewer_rows() -> None:
    children, height, owner = forest([40], seed=1)  # one tree: nothing to share
    assert grouped(height, np.bincount(height), np.array(owner), 2, 8) is None
    # two trees of very different sizes: the large one is a group alone,
    # more rows than splitting each wide height gives a thread
    children, height, owner = forest([200, 3], seed=2)
    counts = np.bincount(height)
    assert split_rows(counts, 2, 1) < owner.count(0)  # the large tree's 399 rows
    assert grouped(height, counts, np.array(owner), 2, 1) is None


def test_split_rows_matches_its_numpy_formula() -> None:
    """The lists' arithmetic equals NumPy's over the arrays, bit for bit."""
    rng = np.random.default_rng(11)
    for _ in range(500):
        counts = rng.integers(1, rng.choice([3, 60, 5000]), rng.integers(1, 40))
        threads, tile = int(rng.integers(1, 17)), int(rng.integers(1, 40))
        wide = counts >= threads * tile
        assert split_rows(counts, threads, tile) == float(
            counts[wide].sum() / threads + counts[~wide].sum())
