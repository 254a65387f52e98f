"""Heights by groups of trees (`backend/height_groups.py`), which the
height-order kernel finds (`HeightOrder.by_groups`), against NumPy and
plain Python: each invocation's tree, each tree's group (balanced as
`policy.balanced_groups`), the order and table a team runs by, and where
it runs by them."""

from __future__ import annotations

import numpy as np
import pytest

from recir.backend.height_groups import group_table
from recir.backend.kernels.height_order_calls import HeightOrder
from recir.backend.policy import balanced_groups
from recir.diagnostics import RecirError


def groups_of(sizes: np.ndarray, threads: int) -> np.ndarray:
    """The reference of each tree's group: node counts balanced."""
    return np.array(balanced_groups(sizes.tolist(), threads), np.int64)


def split_rows(counts: np.ndarray, threads: int, tile: int) -> float:
    """The reference of a thread's rows when each height splits across the
    team where its rows give every thread a register tile, and runs alone
    where not."""
    wide = counts >= threads * tile
    return float(counts[wide].sum() / threads + counts[~wide].sum())


def group_keys(heights: np.ndarray, counts: np.ndarray, tree: np.ndarray, threads: int,
               tile: int) -> np.ndarray | None:
    """The reference of each invocation's key, height * threads + its
    tree's group, where groups leave a thread fewer rows than splitting each
    height does and every height up to the tallest has rows; else None."""
    sizes = np.bincount(tree)
    if len(sizes) < 2 or not counts.all():
        return None
    group_of_tree = groups_of(sizes, threads)
    largest = np.bincount(group_of_tree, weights=sizes, minlength=threads).max()
    if largest >= split_rows(counts, threads, tile):
        return None
    return heights * threads + group_of_tree[tree]


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


def test_the_kernels_order_and_table_give_each_thread_its_trees_rows() -> None:
    """Plain Python: the rows in the kernel's order are by height, then
    group, and each (height, group) cell of the table holds that group's
    rows of that height, the groups balanced by nodes."""
    sizes = [9, 4, 13, 6, 8, 11, 5, 7]
    children, height, owner = forest(sizes, seed=3)
    counts = np.bincount(height)
    threads = 3
    places, starts, found = kernel_groups(height, owner, threads, 8)
    assert found.grouped
    table = group_table(starts, threads)
    order = np.argsort(places)
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


def kernel_groups(height: np.ndarray, owner: list[int], threads: int, tile: int,
                  levels: int | None = None):
    """The kernel's order (as each row's place) and what it found by groups."""
    rows = len(height)
    kernel = HeightOrder(0, [])
    inverse = np.empty(rows + 1, np.int32)
    levels = levels or int(height.max()) + 1
    starts, found = kernel.by_groups(height.astype(np.int64), np.array(owner, np.int64),
                                     max(owner) + 1, threads, tile, levels, inverse, [], [],
                                     [], [])
    return inverse[:rows], starts, found


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threads", [2, 3, 16])
def test_the_kernel_groups_and_orders_as_the_reference(seed: int, threads: int) -> None:
    """Random forests: the kernel's order by (height, group), its table of
    each thread's rows, and its choice equal the reference's, with the
    largest group's rows, the most rows of one height's group and the
    heights with rows."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, rng.choice([4, 40]), rng.integers(2, 30)).tolist()
    children, height, owner = forest(sizes, seed=seed)
    counts, tile = np.bincount(height), int(rng.integers(1, 9))
    places, starts, found = kernel_groups(height, owner, threads, tile, len(counts) + 2)
    group = groups_of(np.bincount(owner), threads)
    key = height * threads + group[owner]
    order = key.argsort(kind="stable")
    np.testing.assert_array_equal(places[order], np.arange(len(owner)))
    want = np.zeros(len(starts), np.int64)
    np.bincount(key, minlength=len(starts) - 1).cumsum(out=want[1:])
    np.testing.assert_array_equal(starts, want)
    cells = np.diff(group_table(starts[:len(counts) * threads + 1], threads), axis=1)
    assert found.tallest == len(counts) and not found.gaps
    assert found.largest == np.bincount(group, weights=np.bincount(owner)).max()
    assert found.most == cells.max()
    assert found.grouped == (group_keys(height, counts, np.array(owner), threads, tile)
                             is not None)


@pytest.mark.parametrize("threads", [2, 3, 16])
def test_the_kernel_swaps_trees_between_groups_as_the_reference(threads: int) -> None:
    """Batches of 25 trees of SST's lengths (2 to 50 leaves), where LPT
    leaves its groups apart and swaps bring them closer: the kernel's
    groups are the reference's."""
    for seed in range(8):
        sizes = np.random.default_rng(10 + seed).integers(2, 51, 25).tolist()
        children, height, owner = forest(sizes, seed=seed)
        places, starts, found = kernel_groups(height, owner, threads, 4)
        nodes = np.bincount(owner)
        group = groups_of(nodes, threads)
        order = (height * threads + group[owner]).argsort(kind="stable")
        np.testing.assert_array_equal(places[order], np.arange(len(owner)))
        assert found.largest == np.bincount(group, weights=nodes).max()


def test_the_kernel_runs_by_groups_only_where_they_leave_a_thread_fewer_rows() -> None:
    _, height, owner = forest([200, 3], seed=2)  # the large tree a group alone
    assert split_rows(np.bincount(height), 2, 1) < owner.count(0)  # its 399 rows
    assert not kernel_groups(height, owner, 2, 1)[2].grouped
    _, height, owner = forest([40], seed=1)  # one tree: nothing to share
    assert not kernel_groups(height, owner, 2, 1)[2].grouped
    _, height, owner = forest([9, 4, 13, 6, 8, 11, 5, 7], seed=3)
    assert kernel_groups(height, owner, 3, 8)[2].grouped
    assert kernel_groups(height, owner, 3, 2**62)[2].grouped  # no height wide: all alone


def test_a_height_with_no_rows_below_the_tallest_is_a_gap() -> None:
    height, owner = np.array([0, 2, 0, 2]), [0, 0, 1, 1]
    _, starts, found = kernel_groups(height, owner, 2, 1, 4)
    assert found.gaps and not found.grouped and found.tallest == 3
    assert group_keys(height, np.bincount(height), np.array(owner), 2, 1) is None


def test_a_tree_or_height_out_of_range_or_groups_that_do_not_fit_are_errors() -> None:
    """Refused before anything is written, or by the kernel's status: a
    tree not below the batch, a height not below the levels (one whose key
    would wrap to a valid one too), and a batch, team, tile or levels that
    the scratch and keys are not sized for."""
    kernel, inverse = HeightOrder(0, []), np.full(4, 7, np.int32)
    zeros, trees = np.zeros(3, np.int64), np.array([0, 1, 1], np.int64)
    with pytest.raises(RecirError, match="tree of the height order is out of range"):
        kernel.by_groups(zeros, np.array([0, 1, 2], np.int64), 2, 2, 1, 1, inverse, [], [],
                         [], [])
    for heights in ([0, 1, 3], [0, 2**62, 0], [0, -2**63, 0], [0, -1, 0]):
        with pytest.raises(RecirError, match="height of the height order is out of range"):
            kernel.by_groups(np.array(heights, np.int64), trees, 2, 4, 1, 3, inverse, [], [],
                             [], [])
    assert (inverse == 7).all()
    for bad in ((np.array([0, 1], np.int64), 2, 2, 1, 1), (trees, 0, 2, 1, 1),
                (trees, -1, 2, 1, 1), (trees, 2, 1, 1, 1), (trees, 2, 2, 0, 1),
                (trees, 2, 2, 1, 0), (trees.astype(np.int32), 2, 2, 1, 1)):
        with pytest.raises(RecirError, match="groups do not hold its rows"):
            kernel.by_groups(zeros, *bad, inverse, [], [], [], [])


def test_one_kernel_takes_turns_between_teams_batches_and_the_plain_order() -> None:
    """Its kept plan and scratch from call to call: by groups on 2 and then
    16 threads, the plain order by height, then by groups again with more
    trees, each as a fresh kernel's."""
    kernel = HeightOrder(0, [])
    for sizes, threads in (([5, 9, 3], 2), ([5, 9, 3], 16), (None, 0), ([7, 2, 9, 4, 12], 3)):
        _, height, owner = forest(sizes or [6, 6], seed=5)
        rows = len(owner)
        if sizes is None:
            inverse = np.empty(rows + 1, np.int32)
            bounds = kernel(height, int(height.max()) + 1, inverse, [], [], [], [])
            np.testing.assert_array_equal(bounds, np.r_[0, np.cumsum(np.bincount(height))])
            np.testing.assert_array_equal(inverse[height.argsort(kind="stable")],
                                          np.arange(rows))
            continue
        found = []
        for order in (kernel, HeightOrder(0, [])):
            inverse = np.empty(rows + 1, np.int32)
            starts, grouping = order.by_groups(height, np.array(owner, np.int64), len(sizes),
                                               threads, 1, int(height.max()) + 1, inverse, [],
                                               [], [], [])
            found.append((inverse[:rows].copy(), starts.copy(), grouping))
        np.testing.assert_array_equal(found[0][0], found[1][0])
        np.testing.assert_array_equal(found[0][1], found[1][1])
        assert found[0][2] == found[1][2]
