"""A batch's calls' fields as one array: a recursive batch laid out by columns.

A batch of a team's function (`NativeFunction.batch`) passes every call's
arguments as fields (`Arguments.prepare`, then `Arguments.fields`). Done a
call at a time, that Python is most of what a batch of small trees costs
outside its native call, and no other thread shares it. Here each input is
checked and laid out for all the calls at once, where every call passes it
alike (`batch_fields`):

- the one object in every call (a parameter, a gradient buffer): its field,
  found once by `prepare`;
- arrays of the input's dtype, rank, fixed dimensions and C order (those
  `prepare` passes by address): checked and read natively, the columns
  passed alike at once (`kernels/array_columns`); a structure array's
  (`tensor<?x...>`) descriptor (`{i64 length, ptr data}`) is a row of that
  table, an array of fixed shape passes its own address;
- i32 scalars that are Python integers in range: their values.

An input any call passes otherwise (a list, another dtype, a view out of
order) leaves the batch to `prepare`, call by call, whose checks say what
is wrong. The fields are the ones `prepare` and `fields` give, bit for bit,
but for the descriptors' addresses.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import is_
from pathlib import Path
from typing import Any

import numpy as np

from recir.backend.arguments import FIXED, SCALAR, SIZED, Arguments, pack
from recir.backend.array_address import data_address
from recir.backend.kernels.array_columns import described

I32 = (-(1 << 31), 1 << 31)


def batch_fields(arguments: Arguments, items: Sequence[Sequence[Any]], keep: list[Any],
                 folder: Path | None = None) -> tuple[np.ndarray, np.ndarray, list[Any]] | None:
    """(fields: i64[calls][fields], each call's `fields` without result
    buffers; each call's longest structure array's length; the first call's
    `prepare`d arguments), or None where a column is not laid out here.
    `keep` holds what the fields point into until the calls return."""
    public, count = arguments.public, len(items)
    if {public} != set(map(len, items)):
        return None  # (`prepare` names the call with the wrong count)
    first = arguments.prepare(items[0], keep, outputs=False)[0]
    fields = np.empty((count, public + len(arguments.param_fields)), np.int64)
    fields[:, public:] = arguments.param_fields
    longest = np.zeros(count, np.int64)
    scalars = dict(arguments.scalar_inputs)
    columns = list(zip(*items, strict=True))
    same, arrays = {}, {}
    for j, column in enumerate(columns):
        kind, dtype, dims = arguments.passing[j]
        if column[-1] is column[0] and all(map(is_, column, repeat(column[0]))):
            same[j] = pack(first[j], scalars.get(j))  # one object: as `prepare` passed it
            if kind == SIZED:
                longest = np.maximum(longest, len(column[0]))
        elif kind in (SIZED, FIXED):  # checked with the other columns passed alike
            arrays.setdefault((kind, dtype, dims), []).append(j)
        elif kind == SCALAR and {int} == set(map(type, column)) and (
                I32[0] <= min(column) and max(column) < I32[1]):
            fields[:, j] = column
        else:
            return None
    if not all(array_fields(group, columns, found, fields, longest, keep, folder)
               for group, found in arrays.items()):
        return None
    if same:  # (a field as the entry loads it: an i64's bits)
        fields[:, list(same)] = np.array(list(same.values()), np.uint64).view(np.int64)
    return fields, longest, first


def array_fields(passed: tuple[int, Any, tuple[int, ...]], columns: list[tuple[Any, ...]],
                 found: list[int], fields: np.ndarray, longest: np.ndarray,
                 keep: list[Any], folder: Path | None = None) -> bool:
    """The fields of inputs `found` (of the batch's `columns`), passed alike
    (`passed`: `Arguments.passing`'s), written, each call's longest structure
    array taken in; False where one array does not pass (`described`)."""
    kind, dtype, dims = passed
    table = described([columns[j] for j in found], dtype,
                      (-1, *dims) if kind == SIZED else dims, folder)
    if table is None:
        return False
    if kind == SIZED:  # each call's descriptor: the table's row
        keep.append(table)
        fields[:, found] = data_address(table) + 16 * np.arange(table.size // 2).reshape(
            len(found), -1).T
        np.maximum(longest, table[..., 0].max(axis=0), out=longest)
    else:
        fields[:, found] = table[..., 1].T
    return True
