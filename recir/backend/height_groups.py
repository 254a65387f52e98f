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
rows. Groups are of about equal node counts (as `policy.balanced_groups`).
The height-order kernel makes the groups, the keys and the choice in the
call that sorts the rows (`kernels.height_order`, `HeightOrder.by_groups`):
in NumPy and Python they were a dozen calls a batch on cold caches.
"""

from __future__ import annotations

import numpy as np


def group_table(starts: np.ndarray, threads: int) -> np.ndarray:
    """Each thread's rows of each height (i64[heights][threads + 1]) from
    the keys' starts (i64[heights * threads + 1]): row h, its groups'
    starts, then the next height's first (its end)."""
    heights = (len(starts) - 1) // threads
    return np.concatenate((starts[:-1].reshape(heights, threads),
                           starts[threads::threads, None]), axis=1)
