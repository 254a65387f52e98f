"""A batch's calls' fields as one array: a recursive batch laid out by columns.

A batch of a team's function (`NativeFunction.batch`) passes every call's
arguments as fields (`Arguments.prepare`, then `Arguments.fields`). Done a
call at a time, that Python is most of what a batch of small trees costs
outside its native call, and no other thread shares it. Here each input is
checked and laid out for all the calls at once, where every call passes it
alike (`batch_fields`):

- the one object in every call (a parameter, a gradient buffer): its field,
  found once by `prepare`;
- structure arrays (`tensor<?x...>`) of the input's dtype, row shape and C
  order: joined into one buffer (bytes, a copy of the trees' arrays) whose
  rows each call's descriptor (`{i64 length, ptr data}`) points into, the
  descriptors one array;
- arrays of the fixed shape, dtype and C order: their own addresses;
- i32 scalars that are Python integers in range: their values.

An input any call passes otherwise (a list, another dtype, a view out of
order) leaves the batch to `prepare`, call by call, whose checks say what
is wrong. The fields are the ones `prepare` and `fields` give, bit for bit,
but for the structure arrays' addresses, which point into the joined copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from recir.backend.arguments import FIXED, SCALAR, SIZED, Arguments, pack
from recir.backend.array_address import data_address
from recir.backend.frontier_inputs import plain_column

I32 = (-(1 << 31), 1 << 31)


def batch_fields(arguments: Arguments, items: Sequence[Sequence[Any]], keep: list[Any]
                 ) -> tuple[np.ndarray, np.ndarray, list[Any]] | None:
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
    sized, same = [], {}
    for j, column in enumerate(zip(*items, strict=True)):
        kind, dtype, dims = arguments.passing[j]
        if len(set(map(id, column))) == 1:  # one object: a parameter, a gradient buffer
            same[j] = pack(first[j], scalars.get(j))
            if kind == SIZED:
                longest = np.maximum(longest, len(column[0]))
        elif kind in (SIZED, FIXED) and plain_column(column, arguments.facts[j]) and (
                kind == SIZED or all(v.flags.c_contiguous for v in column)):  # (the join
            # checks a structure array's order)
            if kind == SIZED:
                sized.append((j, column, dtype.itemsize * math.prod(dims)))
            else:
                fields[:, j] = [data_address(v) for v in column]
        elif kind == SCALAR and {int} == set(map(type, column)) and (
                I32[0] <= min(column) and max(column) < I32[1]):
            fields[:, j] = column
        else:
            return None
    if sized and not joined(sized, count, fields, longest, keep):
        return None
    if same:  # (a field as the entry loads it: an i64's bits)
        fields[:, list(same)] = np.array(list(same.values()), np.uint64).view(np.int64)
    return fields, longest, first


def joined(sized: list[tuple[int, Sequence[np.ndarray], int]], count: int, fields: np.ndarray,
           longest: np.ndarray, keep: list[Any]) -> bool:
    """The structure arrays (`sized`: input, its column, bytes a row) joined
    into one buffer and described, their fields and each call's longest
    written; False where an array is not C-ordered (the join cannot take it)."""
    try:  # bytes joined: a copy with less work per array than `np.concatenate`
        data = np.frombuffer(bytearray().join(chain.from_iterable(c for _, c, _ in sized)),
                             np.uint8)
    except (BufferError, TypeError):  # an array not C-contiguous
        return False
    lengths = np.fromiter(map(len, chain.from_iterable(c for _, c, _ in sized)), np.int64,
                          len(sized) * count).reshape(len(sized), count)
    sizes = lengths * np.array([[row] for _, _, row in sized], np.int64)
    starts = (np.cumsum(sizes) - sizes.ravel()).reshape(sizes.shape)
    descriptors = np.empty((count, len(sized), 2), np.int64)  # {length, data} each
    descriptors[:, :, 0] = lengths.T
    descriptors[:, :, 1] = (data_address(data) + starts).T
    keep += [data, descriptors]
    at = data_address(descriptors) + 16 * np.arange(count * len(sized)).reshape(count, -1)
    fields[:, [j for j, _, _ in sized]] = at
    np.maximum(longest, lengths.max(axis=0), out=longest)
    return True
