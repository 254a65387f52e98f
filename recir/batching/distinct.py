"""A product of gathered rows, computed once per distinct index.

The leaves of a 25-tree SST batch read the embedding at ~520 words, of
which ~300 are distinct, and the leaf product `W emb[word]` is the same
for every leaf with the same word: at h=256 that product is ~40% more work
than it needs to be, forward and backward. Where a region's gather feeds
only a product, and its indices are known when a call is planned (stored
by the expansion, or read from a structure array at stored positions), a
height's product runs on the distinct rows and its result rows are copied
out by index (`native_post.Plan`); the backward first adds each row's
cotangent into its distinct row, so `dX = dY W` and the weight's
`dY^T X` run on the distinct rows as well (`native_grad.Sweep`). The
gathered rows themselves are still written for every row, so what the
Python backward reads is the same either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recir.batching.kernels import PerRoot

# Distinct rows only where they save at least this many multiply-adds at a
# height (np.unique and the copies by index cost time of their own).
MIN_SAVED = 1 << 22


class Pair:
    """A region's gather and the product that is its only use; `pick` makes
    the gather's indices (None: they are stored)."""

    __slots__ = ("gather", "product", "pick")

    def __init__(self, gather: Any, product: Any, pick: Any):
        self.gather, self.product, self.pick = gather, product, pick


class Distinct:
    """One height's distinct indices (`values`, int32) and each row's place
    among them (`inverse`, int64); the forward's rows (`x`, `y`) and the
    backward's (`dy`, `dx`) on those distinct rows."""

    def __init__(self, pair: Pair, index: np.ndarray, lo: int):
        values, inverse = np.unique(index, return_inverse=True)
        self.pair, self.lo, self.n = pair, lo, len(index)
        self.values = values.astype(np.int32)
        self.inverse = inverse.astype(np.int64).reshape(-1)
        self.x = self.y = self.dy = self.dx = np.zeros((0, 0), np.float32)


def find(ops: list[Any], yields: list[int], alias: dict[int, Any]) -> Pair | None:
    """The first gather of a region whose rows only a product reads."""
    uses: dict[int, int] = {}
    for s in [*(s for o in ops for s in o.ins), *yields]:
        uses[s] = uses.get(s, 0) + 1
    made = {s: o for o in ops for s in o.outs}
    for product in ops:
        x = product.ins[1] if product.kind == "product" else None
        gather = made.get(x) if x is not None else None
        if gather is None or gather.kind != "gather" or uses[x] != 1 or x in alias:
            continue
        pick = made.get(gather.ins[1])
        if pick is None or pick.kind == "pick":
            return Pair(gather, product, pick)
    return None


def indices(pair: Pair, stored: dict[int, np.ndarray], tree: Any, roots: np.ndarray,
            lo: int, hi: int) -> np.ndarray | None:
    """The gather's indices at rows lo..hi, or None if they are not known
    before the run or one is out of its structure array (the run's own
    checks then report it)."""
    if pair.pick is None:
        found = stored.get(pair.gather.ins[1])
        return None if found is None else found[lo:hi]
    at = stored.get(pair.pick.ins[1])
    if at is None or not isinstance(tree, PerRoot) or tree.flat is None:
        return None
    rows, i = roots[lo:hi], at[lo:hi].astype(np.int64)
    if ((i < 0) | (i >= tree.lengths[rows])).any():
        return None
    return tree.flat[tree.offsets[rows] + i]


def plan(pair: Pair, index: np.ndarray | None, lo: int, table_rows: int, saved_per_row: int
         ) -> Distinct | None:
    """The height's distinct rows where they save enough work."""
    if index is None or len(index) * saved_per_row < MIN_SAVED:
        return None
    if len(index) and (index.min() < 0 or index.max() >= table_rows):
        return None  # the gather's own check reports it
    found = Distinct(pair, index, lo)
    if (found.n - len(found.values)) * saved_per_row < MIN_SAVED:
        return None
    return found


def without(runs: list[tuple[int, int, int]], heights: dict[int, Any]
            ) -> list[tuple[int, int, int]]:
    """`runs` less the rows of the heights in `heights` (by first row)."""
    cut = []
    for k, lo, hi in runs:
        for start in sorted(a for a in heights if lo <= a < hi):
            if start > lo:
                cut.append((k, lo, start))
            lo = start + heights[start].n
        if hi > lo:
            cut.append((k, lo, hi))
    return cut
