"""Heights by groups of trees: each thread of a team its own trees' rows.

A frontier's team splits each height's rows, with a barrier after every
height (the next reads this one's rows); a height with fewer rows than a
register tile per thread runs on the calling thread (its products split by
columns). But trees share nothing: a tree's rows read only the same tree's
lower rows. So a batch of several trees can instead give each thread a
group of whole trees, all their heights, with no barrier between heights:
each height's rows are numbered group by group (invocations sorted by
(height, group)), and a table gives each thread its rows of each height
(`schedule_loops`, the height plan's groups).

The choice counts rows (a row's work is the same either way): split, a
height with a register tile of rows per thread costs rows / threads of a
thread's time and a thinner one all its rows; grouped, the largest group's
rows. Groups are runs of consecutive trees of about equal node counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

INT16_MAX = 32767  # keys below it sort as int16: NumPy radix-sorts those


def tree_of(children: Sequence[np.ndarray], total: int) -> np.ndarray:
    """Each invocation's tree: its root's row (the roots are rows 0..batch-1
    of `Schedule.expand`'s children, global rows, -1 where none), by pointer
    jumping from each row's parent: log2(depth) steps."""
    tree = np.arange(total)
    for c in children:
        has = np.flatnonzero(c >= 0)
        tree[c[has]] = has
    while True:
        up = tree[tree]
        if np.array_equal(up, tree):
            return tree
        tree = up


def groups_of(sizes: np.ndarray, threads: int) -> np.ndarray:
    """Each tree's group: a tree goes to the group its middle node falls in
    when the batch's nodes are cut into `threads` equal runs. (A batch's
    few tens of trees, as a list: fewer steps than NumPy calls on arrays
    that short, with the same float operations.)"""
    nodes = sizes.tolist()
    total = sum(nodes)
    return np.array([min(int((end - size / 2) * threads / total), threads - 1)
                     for end, size in zip(accumulate(nodes), nodes, strict=True)], np.int64)


def split_rows(counts: np.ndarray, threads: int, tile: int) -> float:
    """A thread's rows when each height splits across the team where its
    rows give every thread a register tile, and runs alone where not."""
    rows = counts.tolist()
    wide = sum(n for n in rows if n >= threads * tile)
    return float(wide / threads + (sum(rows) - wide))


def grouped(heights: np.ndarray, counts: np.ndarray, tree: np.ndarray, threads: int,
            tile: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The invocations' order by (height, group) and each thread's rows of
    each height (i64[heights][threads + 1]), where groups leave a thread
    fewer rows than splitting each height does; else None."""
    key = group_keys(heights, counts, tree, threads, tile)
    if key is None:
        return None
    # (array methods, not NumPy's module functions: no wrapper per call)
    small = np.int16 if len(counts) * threads <= INT16_MAX else np.int64
    order = key.astype(small).argsort(kind="stable")
    starts = np.zeros(len(counts) * threads + 1, np.int64)
    np.bincount(key, minlength=len(counts) * threads).cumsum(out=starts[1:])
    return order, group_table(starts, threads)


def group_keys(heights: np.ndarray, counts: np.ndarray, tree: np.ndarray, threads: int,
               tile: int) -> np.ndarray | None:
    """`grouped`'s choice: each invocation's key, height * threads + its
    tree's group (i64), which the order is sorted by; else None."""
    sizes = np.bincount(tree)
    if len(sizes) < 2:
        return None
    group_of_tree = groups_of(sizes, threads)
    largest = np.bincount(group_of_tree, weights=sizes, minlength=threads).max()
    if largest >= split_rows(counts, threads, tile):
        return None
    return heights.astype(np.int64, copy=False) * threads + group_of_tree[tree]


def group_table(starts: np.ndarray, threads: int) -> np.ndarray:
    """Each thread's rows of each height (i64[heights][threads + 1]) from
    the keys' starts (i64[heights * threads + 1]): row h, its groups'
    starts, then the next height's first (its end)."""
    heights = (len(starts) - 1) // threads
    return np.concatenate((starts[:-1].reshape(heights, threads),
                           starts[threads::threads, None]), axis=1)
