"""`recir_height_order` (`backend/kernels/height_order.py`) against NumPy:
a stable sort by height, its inverse, the children as
places and the stored rows in that order; heights with no rows, and
tables or heights out of range refused before anything is written."""

from __future__ import annotations

import numpy as np
import pytest

from recir.backend.kernels.height_order_calls import HeightOrder
from recir.diagnostics import RecirError


def tables(rows: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Two children tables (rows or -1) and stored values of 1, 4, 8 and 12 bytes a row."""
    rng = np.random.default_rng(seed)
    children = [rng.integers(-1, rows, rows).astype(np.int64) for _ in range(2)]
    stored = [rng.integers(0, 2, rows).astype(np.bool_), rng.integers(-9, 9, rows).astype(np.int32),
              rng.integers(0, 99, rows).astype(np.int64),
              rng.standard_normal((rows, 3)).astype(np.float32)]
    return children, stored


def run(heights: np.ndarray, keys: int, seed: int = 0):
    rows = len(heights)
    children, stored = tables(rows, seed)
    order = HeightOrder(2, [s.dtype.itemsize * int(np.prod(s.shape[1:])) for s in stored])
    inverse = np.full(rows + 3, 7, np.int32)  # room for more rows than the call's
    children_out = [np.full(rows + 2, 7, np.int32) for _ in children]
    stored_out = [np.zeros((rows + 2, *s.shape[1:]), s.dtype) for s in stored]
    bounds = order(heights, keys, inverse, children, children_out, stored, stored_out)
    return bounds, inverse, children, children_out, stored, stored_out


@pytest.mark.parametrize("seed", range(4))
def test_a_stable_sort_by_height_with_its_inverse_children_and_stored_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 3000))
    heights = rng.integers(0, 20, rows).astype(np.int64)
    heights[:20] = np.arange(20)[:min(20, rows)]  # every height has rows
    bounds, inverse, children, children_out, stored, stored_out = run(heights, 24, seed)
    perm = heights.argsort(kind="stable")
    counts = np.bincount(heights)
    np.testing.assert_array_equal(bounds, np.r_[0, np.cumsum(counts)])
    want = np.empty(rows + 1, np.int32)
    want[perm] = np.arange(rows)
    want[rows] = -1
    np.testing.assert_array_equal(inverse[:rows + 1], want)
    assert (inverse[rows + 1:] == 7).all()  # nothing past the rows
    for c, out in zip(children, children_out, strict=True):
        np.testing.assert_array_equal(out[:rows], want.take(c[perm], mode="wrap"))
    for s, out in zip(stored, stored_out, strict=True):
        np.testing.assert_array_equal(out[:rows], s[perm])


def test_heights_with_no_rows_leave_no_empty_bounds() -> None:
    heights = np.array([4, 0, 4, 9, 0, 4], np.int64)
    bounds = run(heights, 12)[0]
    np.testing.assert_array_equal(bounds, [0, 2, 5, 6])  # as `np.unique` of the starts


def test_a_height_out_of_range_is_an_error_and_writes_nothing() -> None:
    children, stored = tables(3, 0)
    order = HeightOrder(2, [1, 4, 8, 12])
    inverse = np.full(4, 7, np.int32)
    outs = [np.full(3, 7, np.int32) for _ in children]
    kept = [np.zeros_like(s) for s in stored]
    for heights, keys in (([0, 1, 5], 5), ([0, -1, 2], 5), ([0, 0, 0], 0)):
        with pytest.raises(RecirError, match="out of range"):
            order(np.array(heights, np.int64), keys, inverse, children, outs, stored, kept)
        assert (inverse == 7).all() and all((o == 7).all() for o in outs)
        assert not any(k.any() for k in kept)
    with pytest.raises(RecirError, match="do not hold its rows"):  # no keys below 0
        order(np.zeros(3, np.int64), -1, inverse, children, outs, stored, kept)


def plain_call(rows: int) -> tuple:
    """A plan of two sites and stored values of 1, 4, 8 and 12 bytes a row,
    with zeroed heights, inverse and tables of `rows` rows."""
    children, stored = tables(rows, 0)
    outs = [np.zeros(rows, np.int32) for _ in children]
    kept = [np.zeros((rows, *s.shape[1:]), s.dtype) for s in stored]
    return (HeightOrder(2, [1, 4, 8, 12]), np.zeros(rows, np.int64),
            np.zeros(rows + 1, np.int32), children, outs, stored, kept)


def test_tables_too_short_or_of_other_rows_are_refused() -> None:
    rows = 10
    order, heights, inverse, children, outs, stored, kept = plain_call(rows)
    for bad in ([outs[0][:-1], outs[1]], [outs[0], outs[1].astype(np.int64)]):
        with pytest.raises(RecirError, match="do not hold its rows"):
            order(heights, 1, inverse, children, bad, stored, kept)
    with pytest.raises(RecirError, match="do not hold its rows"):
        order(heights, 1, inverse[:-1], children, outs, stored, kept)
    with pytest.raises(RecirError, match="do not hold its rows"):
        order(heights, 1, inverse, children, outs, [*stored[:3], stored[3][:, :2]], kept)
    # each table's row bytes as the kernel's, split otherwise: no sites and
    # three stored values (the plan holds two sizes)
    split = HeightOrder(1, [8, 4])
    i64, i32 = np.zeros(rows, np.int64), np.zeros(rows, np.int32)
    with pytest.raises(RecirError, match="do not hold its rows"):
        split(heights, 1, inverse, [], [], [i64, i32, i64], [i32, i64, i32])


def test_arrays_whose_strides_pass_but_whose_elements_lie_elsewhere_are_refused() -> None:
    """Row strides and byte counts are not enough: a row's elements in
    reverse (the address is its last byte's row start), or elements of a
    narrower type every 8 or 4 bytes (the last one read or written past
    the array's memory), would make the kernel leave the arrays."""
    rows = 10
    order, heights, inverse, children, outs, stored, kept = plain_call(rows)
    reversed_rows = [*stored[:3], stored[3][:, ::-1]]  # strides (12, -4): nbytes and row bytes pass
    with pytest.raises(RecirError, match="do not hold its rows"):
        order(heights, 1, inverse, children, outs, reversed_rows, kept)
    with pytest.raises(RecirError, match="do not hold its rows"):
        order(heights, 1, inverse, children, outs, stored, [*kept[:3], kept[3][:, ::-1]])
    narrow_heights = np.zeros(2 * rows, np.int32)[::2]  # stride 8, 4-byte elements
    with pytest.raises(RecirError, match="do not hold its rows"):
        order(narrow_heights, 1, inverse, children, outs, stored, kept)
    narrow_inverse = np.zeros(2 * (rows + 1), np.int16)[::2]  # stride 4, 2-byte elements
    with pytest.raises(RecirError, match="do not hold its rows"):
        order(heights, 1, narrow_inverse, children, outs, stored, kept)
    bounds = order(heights, 1, inverse, children, outs, stored, kept)  # as they should be
    np.testing.assert_array_equal(bounds, [0, rows])
