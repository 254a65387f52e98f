"""What a native schedule keeps from one call of its function to the next.

A frontier call makes the same arrays every time: the tables `@post`
writes, the rows a `_fwd` saves, the children and stored values in height
order, the gradients' tables. Calls of one function take turns
(`FrontierFunction.calls`), so each is made once with room for as many rows
as a call has needed (`KeptRows`) and kept, and a height loop's plan
(`KeptPlan`) keeps their fields: checked when the arrays are made, then
trusted, since no one else holds them. A call writes only its row count
into them and the fields of what it is given (the trees' arrays, the
parameters and their gradient buffers), which are checked every call.
What a call returns is copied out of them (`Schedule.run`'s gather by row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import is_, itemgetter
from typing import Any

import numpy as np

from recir.backend.array_address import data_address
from recir.diagnostics import RecirError
from recir.interpreter.frontier import dtype_of, row_shape

Layout = tuple[np.dtype[Any], tuple[int, ...]]  # an array's dtype and row shape
# in a `_bwd` loop's layouts: its results' gradient tables while known all
# zero (the loop zeroes the rows it reads, `CLEARED`; a call that stops does not)
CLEAN = "clean"


class KeptRows:
    """Arrays of rows (one per layout) with room for `capacity` rows,
    made again, larger, when a call needs more: a quarter more than before
    at least, so that a run of growing batches makes them a few times only
    while a function holds at most that much beyond its largest call."""

    def __init__(self, layouts: Sequence[Layout]):
        self.layouts = list(layouts)
        self.arrays: list[np.ndarray] = []
        self.capacity = -1

    def at_least(self, rows: int) -> list[np.ndarray]:
        """The arrays, with room for `rows` rows (whole: a loop's plan keeps
        their fields; `rows` is what a call uses of them)."""
        if rows > self.capacity:
            capacity = max(rows, self.capacity + self.capacity // 4)
            self.arrays = [np.empty((capacity, *shape), dtype) for dtype, shape in self.layouts]
            self.capacity = capacity  # once made: a failed growth keeps the old count
        return self.arrays


class KeptPlan:
    """A height loop's plan kept between calls. Its `owned` inputs (and all
    its outputs) are arrays the schedule keeps (`KeptRows`) or None: their
    fields are written when they change, each checked to be a C-contiguous
    array of its operand's dtype and row shape, and a call writes into
    them only the rows it uses. The other inputs' fields are found every
    call, checked as `NativeLoop.fields` checks them."""

    def __init__(self, loop: Any, header: int, owned: Sequence[int], shared: range = range(0)):
        """`shared`: the inputs a call may give the fields of, found once
        for every loop that takes them (`NativeSchedule.shared_fields`)."""
        native = loop.native
        self.owned, self.shared, self.header = list(owned), shared, header
        self.take_owned = owned_of(self.owned)
        given = [k for k in range(len(loop.inputs)) if k not in set(owned)]
        self.given = Fields(given, header)
        self.rest = Fields([k for k in given if k not in shared], header)
        batched = [k for k in self.owned if native.kinds[k] is not None and native.kinds[k][0]]
        outputs = range(len(loop.inputs), len(loop.inputs) + len(native.outputs))
        self.rows_at = np.array([header + 2 * k for k in (*batched, *outputs)], np.int64)
        self.arrays: tuple[Any, ...] | None = None  # the owned inputs and the outputs
        self.capacity = 0  # the fewest rows any of them has room for
        self.plan = np.zeros(header + 2 * (len(loop.inputs) + len(native.outputs)), np.int64)

    def fill(self, loop: Any, inputs: Sequence[Any], outputs: Sequence[Any], rows: int,
             keep: list[np.ndarray], shared: np.ndarray | None = None) -> np.ndarray:
        """The plan for a call of `rows` rows (the header is the caller's);
        `shared`: the fields of the inputs `self.shared`, where found."""
        arrays = (*self.take_owned(inputs), *outputs)
        if self.arrays is None or len(arrays) != len(self.arrays) or not all(
                map(is_, arrays, self.arrays)):
            self.arrays = None  # placed again next call should this fail half-way
            self.place(loop, inputs, outputs)
            self.arrays = arrays
        if rows > self.capacity:
            raise RecirError(f"error: @{loop.native.name}'s kept arrays hold "
                             f"{self.capacity} rows, not {rows}")
        plan = self.plan
        if shared is None:
            self.given.fill(loop, plan, inputs, keep)
        else:
            at = self.header + 2 * self.shared.start
            plan[at:at + len(shared)] = shared
            self.rest.fill(loop, plan, inputs, keep)
        plan[self.rows_at] = rows
        return plan

    def place(self, loop: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        """The owned inputs' and the outputs' fields, each array checked."""
        native, plan = loop.native, self.plan
        capacity = None
        for k in self.owned:
            value = inputs[k]
            kind = native.kinds[k]
            if value is None and kind is None:
                plan[self.header + 2 * k:self.header + 2 * k + 2] = 0
                continue
            if kind is None or not kind[0]:
                raise RecirError(f"error: @{native.name}'s input {k} is not rows a "
                                 "schedule keeps")
            checked(native.name, value, kind[1], kind[2])
            plan[self.header + 2 * k + 1] = data_address(value)
            capacity = len(value) if capacity is None else min(capacity, len(value))
        for j, (value, typ) in enumerate(zip(outputs, native.outputs, strict=True)):
            checked(native.name, value, dtype_of(typ), row_shape(typ))
            plan[self.header + 2 * (len(inputs) + j) + 1] = data_address(value)
            capacity = len(value) if capacity is None else min(capacity, len(value))
        self.capacity = capacity or 0


class Fields:
    """Some inputs of a loop, whose fields a call finds (`NativeLoop.fields`)."""

    def __init__(self, numbers: list[int], header: int):
        self.numbers = numbers
        self.at = np.array([header + 2 * k + j for k in numbers for j in (0, 1)], np.int64)
        self.header = header

    def fill(self, loop: Any, plan: np.ndarray, inputs: Sequence[Any],
             keep: list[np.ndarray]) -> None:
        numbers = self.numbers
        if not numbers:
            return
        fields, scalars = loop.fields([inputs[k] for k in numbers], keep, numbers=numbers)
        plan[self.at] = fields
        for i in scalars:  # their bytes over the fields just written
            k = numbers[i]
            loop.write_scalars(plan, self.header + 2 * k, [inputs[k]], [0], k)


def owned_of(owned: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A function taking the `owned` inputs out of all, as a tuple."""
    if len(owned) > 1:
        return itemgetter(*owned)
    return lambda inputs: tuple(inputs[k] for k in owned)


def every_field(loop: Any, header: int, inputs: Sequence[Any], outputs: Sequence[Any],
                keep: list[np.ndarray]) -> np.ndarray:
    """A fresh plan of every input's and output's fields (the header left):
    for a call over arrays of its own, not kept ones."""
    fields, scalars = loop.fields(inputs, keep)
    for array in outputs:
        fields += (len(array), data_address(array))
    plan = np.zeros(header + len(fields), np.int64)
    plan[header:] = fields
    loop.write_scalars(plan, header, inputs, scalars)
    return plan


def checked(name: str, value: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
    """`value` is a C-contiguous array of `dtype` with rows of `shape`."""
    if not (type(value) is np.ndarray and value.dtype == dtype and value.ndim >= 1
            and value.shape[1:] == shape and value.flags.c_contiguous):
        raise RecirError(f"error: @{name} keeps rows of {dtype} {shape}, got "
                         f"{getattr(value, 'dtype', type(value).__name__)} "
                         f"{getattr(value, 'shape', '')}")
