"""The height order's calls from Python: `HeightOrder` (`height_order.py`'s kernel).

A native schedule keeps one per function. A call checks every table it is
given to hold the rows the kernel reads and writes, writes the plan (its
tables' part again only when they were made again) and the kernel's order
and starts, kept from call to call; `kept_plan` does the same once for
kept tables with room for every row a call can have, whose rows and keys
`kernels/numbering.py` writes in native code.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from recir.backend.array_address import data_address
from recir.backend.kept_plans import KeptRows
from recir.backend.kernels.height_order import (
    EMPTY,
    GROUPED,
    HEADER,
    LEVELS,
    STATUS,
    TREE_OUT_OF_RANGE,
    TREES,
    USED,
    height_order_kernel,
)
from recir.diagnostics import RecirError

FIRST, STRIDES, NBYTES = operator.itemgetter(0), operator.attrgetter("strides"), \
    operator.attrgetter("nbytes")
CONTIGUOUS = operator.attrgetter("flags.c_contiguous")  # a row's bytes one after another
INT64, INT32 = np.dtype(np.int64), np.dtype(np.int32)


class Grouping(NamedTuple):
    """What the kernel found by groups (`HeightOrder.by_groups`)."""

    grouped: bool  # the team should run by them
    largest: int  # the largest group's rows
    most: int  # the most rows of one height's group
    tallest: int  # the heights with rows
    gaps: bool  # a height below the tallest has none


class HeightOrder:
    """One schedule's calls of `recir_height_order`, its order and starts
    kept from call to call (calls of one function take turns)."""

    def __init__(self, sites: int, sizes: Sequence[int], folder: Path | None = None):
        """`sites`: the children tables; `sizes`: the stored values' row bytes;
        `folder`: the calling function's cache folder, where the kernel is kept."""
        self.sites, self.sizes = sites, list(sizes)
        # each table's row bytes: children (i64), their places (i32), stored
        # values in and out; each row's bytes one after another
        self.strides = [8] * sites + [4] * sites + self.sizes * 2
        self.order = KeptRows([(np.dtype(np.int64), ())])
        self.starts = KeptRows([(np.dtype(np.int64), ())])
        self.scratch = KeptRows([(np.dtype(np.int64), ())] * 2)  # by groups: keys, scratch
        self.kernel = height_order_kernel(folder)
        self.address = ctypes.cast(self.kernel, ctypes.c_void_p).value  # (`kernels/numbering`)
        self.addresses: list[int] = []  # the tables' of the kept plan
        self.plan = np.zeros(HEADER, np.int64)

    def __call__(self, heights: np.ndarray, keys: int, inverse: np.ndarray,
                 children: Sequence[np.ndarray], children_out: Sequence[np.ndarray],
                 stored: Sequence[np.ndarray], stored_out: Sequence[np.ndarray]) -> np.ndarray:
        """The rows of `heights` (i64, below `keys`) sorted by height, their
        places into `inverse` (i32, -1 after them), children and stored
        values in that order into the outs; the starts of the heights used.
        Every array is checked to have the rows and row bytes the kernel
        reads and writes."""
        self.run(heights, keys, inverse, children, children_out, stored, stored_out)
        used, empty = self.plan[USED:EMPTY + 1].tolist()
        bounds = self.starts.arrays[0][:used + 1]
        return np.unique(bounds) if empty else bounds  # (`Schedule.height_order`'s)

    def by_groups(self, heights: np.ndarray, trees: np.ndarray, batch: int, team: int,
                  tile: int, levels: int, inverse: np.ndarray, children: Sequence[np.ndarray],
                  children_out: Sequence[np.ndarray], stored: Sequence[np.ndarray],
                  stored_out: Sequence[np.ndarray]) -> tuple[np.ndarray, Grouping]:
        """As `__call__`, the rows sorted by height and then their tree's
        group of `team` (each row's tree `trees`, i64, below `batch`;
        `levels`: a bound on the heights): the starts of every (height,
        group) key and then the rows, and what the kernel found."""
        total = len(heights)
        if trees.dtype != INT64 or trees.strides[0] != 8 or len(trees) != total or (
                heights.dtype != INT64 or heights.strides[0] != 8) or team < 2 or tile < 1 or (
                batch < 1 or levels < 1):
            raise RecirError("error: the height order's groups do not hold its rows")
        keys, scratch = self.scratch.at_least(3 * batch + team + total + 2)
        tile = min(tile, total + 1)  # (no height is wide: team x tile cannot wrap)
        self.run(keys[:total], levels * team, inverse, children, children_out, stored,
                 stored_out, (data_address(trees), batch, team, tile, levels,
                              data_address(heights), data_address(scratch)))
        grouped, largest, most, tallest, gaps = self.plan[GROUPED:HEADER].tolist()
        return (self.starts.arrays[0][:levels * team + 1],
                Grouping(bool(grouped), largest, most, tallest, bool(gaps)))

    def kept_plan(self, rows: int, levels: int, team: int, tile: int, heights: np.ndarray,
                  trees: np.ndarray, inverse: np.ndarray, children: Sequence[np.ndarray],
                  children_out: Sequence[np.ndarray], stored: Sequence[np.ndarray],
                  stored_out: Sequence[np.ndarray]) -> np.ndarray:
        """The plan over kept tables with room for `rows` rows of at most
        `levels` heights (the expansion's, and the inverse one more), by
        groups of `team` where it is 2 or more (each row's tree in `trees`):
        every table checked as a call's are, for as many rows and keys as
        any call can have; a call's rows, keys, depths and roots are written
        in native code (`kernels/numbering`). Made again, the plan is
        another array."""
        if team < 2:
            self.fill(rows, levels, heights, inverse, children, children_out, stored, stored_out)
            return self.plan
        if trees.dtype != INT64 or trees.strides[0] != 8 or len(trees) < rows or (
                heights.dtype != INT64 or heights.strides[0] != 8 or len(heights) < rows) or (
                tile < 1 or levels < 1):
            raise RecirError("error: the height order's groups do not hold its rows")
        keys, scratch = self.scratch.at_least(4 * rows + team + 2)  # (batch: at most rows)
        self.fill(rows, levels * team, keys[:rows], inverse, children, children_out, stored,
                  stored_out, (data_address(trees), rows, team, min(tile, rows + 1), levels,
                               data_address(heights), data_address(scratch)))
        return self.plan

    def found(self, team: int) -> tuple[np.ndarray, Grouping | None]:
        """After a call of `kept_plan`'s plan: the starts of the heights used
        (of every (height, group) key by groups, then the rows) and, by
        groups, what the kernel found."""
        self.check()
        plan, starts = self.plan, self.starts.arrays[0]
        if team < 2:
            used, empty = plan[USED:EMPTY + 1].tolist()
            return (np.unique(starts[:used + 1]) if empty else starts[:used + 1]), None
        grouped, largest, most, tallest, gaps = plan[GROUPED:HEADER].tolist()
        return (starts[:int(plan[LEVELS]) * team + 1],
                Grouping(bool(grouped), largest, most, tallest, bool(gaps)))

    def run(self, heights: np.ndarray, keys: int, inverse: np.ndarray,
            children: Sequence[np.ndarray], children_out: Sequence[np.ndarray],
            stored: Sequence[np.ndarray], stored_out: Sequence[np.ndarray],
            groups: tuple[int, ...] = (0,)) -> None:
        """The kernel's call, its tables checked first; `groups`: the plan's
        fields by groups (trees 0: none)."""
        self.fill(len(heights), keys, heights, inverse, children, children_out, stored,
                  stored_out, groups)
        self.kernel(data_address(self.plan))
        self.check()

    def check(self) -> None:
        """Raises what the last call's status says."""
        status = int(self.plan[STATUS])
        if status == TREE_OUT_OF_RANGE:
            raise RecirError("error: a tree of the height order is out of range")
        if status:
            raise RecirError("error: a height of the height order is out of range")

    def fill(self, total: int, keys: int, heights: np.ndarray, inverse: np.ndarray,
             children: Sequence[np.ndarray], children_out: Sequence[np.ndarray],
             stored: Sequence[np.ndarray], stored_out: Sequence[np.ndarray],
             groups: tuple[int, ...] = (0,)) -> None:
        """The plan for `total` rows (of `heights`' at least) and `keys`
        keys, every table checked to hold them."""
        tables = (*children, *children_out, *stored, *stored_out)
        rows = list(map(len, tables))
        # each row's bytes one after another (C-level maps: checked every call)
        if keys < 0 or len(heights) < total or heights.dtype != INT64 or (
                heights.strides[0] != 8) or (
                inverse.dtype != INT32) or (
                len(inverse) <= total or inverse.strides[0] != 4) or (
                list(map(FIRST, map(STRIDES, tables))) != self.strides) or (
                list(map(NBYTES, tables)) != list(map(operator.mul, rows, self.strides))) or (
                not all(map(CONTIGUOUS, tables))) or min(rows, default=total) < total or (
                len(children) != self.sites or len(stored) != len(self.sizes)):
            raise RecirError("error: the height order's tables do not hold its rows")
        addresses = list(map(data_address, tables))
        if addresses != self.addresses:  # tables made (again): a plan of theirs
            self.plan = np.array([0] * HEADER + addresses + self.sizes, np.int64)
            self.addresses = addresses
        order = self.order.at_least(total)[0]
        starts = self.starts.at_least(keys + 1)[0]
        plan = self.plan
        plan[:STATUS] = (total, keys, data_address(heights),
                         data_address(starts), data_address(order), data_address(inverse),
                         len(children), len(stored))
        plan[TREES:TREES + len(groups)] = groups
