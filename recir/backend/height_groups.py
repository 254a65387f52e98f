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
rows. Groups are of about equal node counts (`policy.balanced_groups`).
"""

from __future__ import annotations

import numpy as np

from recir.backend.policy import balanced_groups


def groups_of(sizes: np.ndarray, threads: int) -> np.ndarray:
    """Each tree's group, node counts balanced (`policy.balanced_groups`)."""
    return np.array(balanced_groups(sizes.tolist(), threads), np.int64)


def split_rows(counts: np.ndarray, threads: int, tile: int) -> float:
    """A thread's rows when each height splits across the team where its
    rows give every thread a register tile, and runs alone where not."""
    rows = counts.tolist()
    wide = sum(n for n in rows if n >= threads * tile)
    return float(wide / threads + (sum(rows) - wide))


def group_keys(heights: np.ndarray, counts: np.ndarray, tree: np.ndarray, threads: int,
               tile: int) -> np.ndarray | None:
    """Where groups leave a thread fewer rows than splitting each height
    does, each invocation's key, height * threads + its
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
