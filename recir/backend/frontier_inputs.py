"""A batch of inputs laid out as a frontier-batched entry takes them.

`invoke-to-frontier` gives the batched entry a dynamic array as the trees'
arrays one after another plus the offsets where each starts, anything else
stacked one row per element. Each input is checked and converted as every
path does it (`coerce_argument`); a column whose values already have the
form that would pass unchanged skips the per-value call. The structure
arrays (i32 vectors of each node) of all such columns go into one buffer
in one copy, each column a view of it, and columns whose trees have the
same lengths (a tree's left, right, word and label) share one offsets
array: a call's fixed cost is in NumPy calls, not in bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain
from operator import attrgetter
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IndexType, IntegerType, TensorType
from xdsl.ir import Attribute

from recir.backend.arguments import batch_element
from recir.diagnostics import RecirError
from recir.interpreter import (TensorFacts, coerce_argument, coerce_tensor, integer_range,
                               tensor_facts)
from recir.interpreter.frontier import dtype_of

# the facts of a structure array (`tensor<?xi32>`), whose columns are joined
STRUCTURE: TensorFacts = (np.dtype(np.int32), 1, ())


class InputLayout:
    """The batched entry's arguments (before the parameters) for a batch
    of the public entry's inputs."""

    def __init__(self, original: func.FuncOp, params: int):
        self.name = original.sym_name.data
        self.columns = input_columns(original, params)
        # per scalar integer column the range `coerce_argument` checks
        self.ranges = [integer_range(typ) if facts is None and isinstance(
            typ, IntegerType | IndexType) else None for typ, facts, _, _ in self.columns]
        self.joined = [k for k, (_, facts, ragged, _) in enumerate(self.columns)
                       if ragged and facts == STRUCTURE]

    def __call__(self, batch: Sequence[Sequence[Any]]) -> list[Any]:
        count = len(self.columns)
        if set(map(len, batch)) != {count}:
            for k, item in enumerate(batch):
                if len(item) != count:
                    raise RecirError(f"error: @{self.name} takes {count} inputs, got "
                                     f"{len(item)} (batch element {k})")
        columns = list(zip(*batch, strict=True)) if count else []
        joined = self.joined_columns(columns)
        args: list[Any] = []
        for k, (column, (typ, facts, ragged, dtype)) in enumerate(zip(
                columns, self.columns, strict=True)):
            if joined is not None and k in joined:
                args += joined[k]
                continue
            if facts is None:
                values: Sequence[Any] = column if plain_integers(column, self.ranges[k]) else \
                    each_checked(column, lambda v: coerce_argument(k, v, typ))
            elif plain_column(column, facts):
                values = column  # what `coerce_tensor` returns for them, bar the layout
            else:
                values = each_checked(column, lambda v: coerce_tensor(k, v, typ, facts))
            if ragged:
                offsets = np.array([0, *accumulate(map(len, values))], np.int32)
                args += [np.concatenate(values).astype(dtype, copy=False), offsets]
            else:
                args.append(np.asarray(values, dtype))
        return args

    def joined_columns(self, columns: Sequence[Sequence[Any]]
                       ) -> dict[int, list[np.ndarray]] | None:
        """The structure columns' (values, offsets), each values a view of
        one buffer of them all, where every value of them is an i32 vector
        (else None: each column takes the checking path)."""
        if not self.joined:
            return None
        arrays = list(chain.from_iterable(map(columns.__getitem__, self.joined)))
        if not plain_column(arrays, STRUCTURE):
            return None
        try:  # bytes joined: a copy with less work per array than `np.concatenate`
            everything = np.frombuffer(bytearray().join(arrays), np.int32)
        except (BufferError, TypeError):  # an array not C-contiguous
            everything = np.concatenate(arrays)
        found: dict[int, list[np.ndarray]] = {}
        at, lengths, ends, offsets = 0, None, [0], everything[:0]
        for k in self.joined:
            these = list(map(len, columns[k]))
            if these != lengths:
                lengths, ends = these, [0, *accumulate(these)]
                offsets = np.array(ends, np.int32)
            found[k] = [everything[at:at + ends[-1]], offsets]
            at += ends[-1]
        return found


def each_checked(column: Sequence[Any], check: Any) -> list[Any]:
    """`check` of each value of a column; its error names the batch element."""
    values = []
    for j, value in enumerate(column):
        with batch_element(j):
            values.append(check(value))
    return values


def input_columns(original: func.FuncOp, params: int
                  ) -> list[tuple[Attribute, TensorFacts | None, bool, np.dtype[Any]]]:
    """Per public input of the entry: its type, its `tensor_facts` (None
    for a scalar), whether its length varies (its trees' arrays go one
    after another) and the dtype its elements stack to otherwise."""
    inputs = list(original.function_type.inputs)
    return [(typ, tensor_facts(typ) if isinstance(typ, TensorType) else None,
             isinstance(typ, TensorType) and any(d < 0 for d in typ.get_shape()),
             dtype_of(typ)) for typ in inputs[:len(inputs) - params]]


def plain_column(column: Sequence[Any], facts: TensorFacts) -> bool:
    """Whether every value of a column is an array of the dtype, rank and
    fixed sizes `facts` gives, which `coerce_tensor` would pass unchanged."""
    dtype, rank, fixed = facts
    if set(map(type, column)) != {np.ndarray} or set(map(NDIM, column)) != {rank} or set(
            map(DTYPE, column)) != {dtype}:
        return False
    return not fixed or all(v.shape[axis] == d for v in column for axis, d in fixed)


DTYPE, NDIM = attrgetter("dtype"), attrgetter("ndim")
# integer types a Python list of scalars holds, which `coerce_argument`
# passes as their value once in range (bool and others take its own path)
PLAIN_INTEGERS = frozenset((int, np.int32, np.int64))


def plain_integers(column: Sequence[Any], bounds: tuple[int, int] | None) -> bool:
    """Whether every value of a scalar column is a plain integer within
    `bounds` (its integer type's range; None: not an integer type), as
    `coerce_argument` would pass it."""
    if bounds is None or not PLAIN_INTEGERS.issuperset(map(type, column)):
        return False
    return bounds[0] <= min(column) and max(column) <= bounds[1]
