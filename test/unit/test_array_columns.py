"""`kernels/array_columns`: arrays checked and described natively, against
NumPy's own answers for every object form a batch may pass."""

from __future__ import annotations

import numpy as np
import pytest

from recir.backend.kernels.array_columns import array_offsets, described


class Sub(np.ndarray):
    pass


def objects():
    """Objects of many forms: arrays of several dtypes, ranks and layouts,
    subclasses, other sequences and scalars."""
    rng = np.random.default_rng(0)
    base = rng.integers(-9, 9, (4, 6)).astype(np.int32)
    found = [base, base[1], base[:, 1], base[1:3], base.T, np.asfortranarray(base),
             base.astype(np.int64), base.astype(">i4"), base.astype(np.float32),
             np.zeros((0, 6), np.int32), np.zeros(0, np.int32), np.int32(3),
             np.array(5, np.int32), base.view(Sub), np.ma.masked_array(base),
             base.reshape(2, 2, 6), base[::2], base[:, ::-1], base.tolist(), 3, None,
             b"\0" * 64, memoryview(base), np.zeros((4, 6), np.dtype(np.int32, metadata={})),
             np.empty((5, 6), np.int32)[1:], np.ones((3, 6), np.int32)]
    return found


def plain(value, dtype, dims):
    """What the kernel must decide, in NumPy's own terms."""
    return (type(value) is np.ndarray and value.dtype is dtype and value.ndim == len(dims)
            and all(d < 0 or s == d for s, d in zip(value.shape, dims, strict=True))
            and value.flags.c_contiguous)


def test_array_objects_are_where_the_kernel_reads_them():
    assert array_offsets()


@pytest.mark.parametrize("dtype,dims", [
    (np.dtype(np.int32), (-1,)), (np.dtype(np.int32), (-1, 6)), (np.dtype(np.int32), (4, 6)),
    (np.dtype(np.int32), ()), (np.dtype(np.float32), (-1, 6)), (np.dtype(np.int64), (-1, -1))])
def test_each_object_passes_as_numpy_says(dtype, dims):
    for value in objects():
        table = described([(value,)], dtype, dims)
        assert (table is not None) == plain(value, dtype, dims), (type(value), value)
        if table is not None:  # its length (1 at rank 0) and data address
            assert table[0, 0].tolist() == [len(value) if dims else 1, value.ctypes.data]


def test_a_table_of_columns_and_the_first_that_fails():
    rng = np.random.default_rng(1)
    columns = [tuple(rng.integers(0, 5, n).astype(np.int32) for n in (3, 0, 7)),
               tuple(rng.integers(0, 5, n).astype(np.int32) for n in (1, 4, 2))]
    table = described(columns, np.dtype(np.int32), (-1,))
    assert table.shape == (2, 3, 2)
    for j, column in enumerate(columns):
        for k, value in enumerate(column):
            assert table[j, k].tolist() == [len(value), value.ctypes.data]
    for bad in (columns[1][2].astype(np.int64), np.arange(8, dtype=np.int32)[::2],
                list(columns[1][2])):
        assert described([columns[0], (*columns[1][:2], bad)], np.dtype(np.int32), (-1,)) is None
