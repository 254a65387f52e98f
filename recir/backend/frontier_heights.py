"""All heights of a native schedule in one call (`passes/height_loops.py`).

`NativeSchedule` and `NativeBackward` are the interpreter's `Schedule` and
`Backward` with their height loops replaced: `@post` (or `@post_fwd`, or
`@post_bwd` from the roots down) runs over every height in one native call,
which reads each height's rows from the whole tables and writes its results
into them; a `_fwd`'s saved rows go to one buffer per saved value, and each
height's first row and count there to `saved_at`, which the `_bwd`'s loop
reads. The operands are the interpreter's, in its order (`Schedule.post`,
`Backward.post_backward`), whole where it slices: `loop_operands` gives
their roles for the loop's code.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType

from recir.backend import stack
from recir.backend.arguments import c_scalar
from recir.backend.array_address import data_address
from recir.backend.contexts import lone_context
from recir.backend.frontier_schedule import FORWARD, NativeRowFunction
from recir.diagnostics import RecirError
from recir.dialects import frontier, tape
from recir.dialects.row_types import is_rows
from recir.interpreter.frontier import Schedule, dtype_of, row_shape
from recir.interpreter.frontier_grad import Backward, is_float_tensor
from recir.passes.height_loops import (
    HEADER,
    HEIGHTS_ENTRY,
    SAVED,
    SCALAR,
    SLICE,
    STATIC,
    TABLE,
    WHOLE,
    Operand,
)
from recir.passes.rows import element_bytes, row_width

BACKWARD = "_bwd"
Spec = tuple[list[Operand], list[Operand], bool]  # inputs, outputs, from the roots down


def operand(typ: Any, kind: str = WHOLE) -> Operand:
    """A value of type `typ` in the loop: rows as `kind`, the rest as they are."""
    if isinstance(typ, TensorType) and is_rows(typ):
        return Operand(kind, row_width(typ) * element_bytes(typ.element_type))
    if isinstance(typ, TensorType | tape.FrameType):
        return Operand(STATIC)  # a frame: the `_bwd`'s, which reads none
    return Operand(SCALAR, scalar=typ)


def loop_spec(op: frontier.ScheduleOp, post: func.FuncOp, function: func.FuncOp) -> Spec:
    """The height loop of `function`: the schedule's `@post`, its `_fwd` or
    its `_bwd`."""
    types = post.function_type
    ntables = len(types.outputs.data)
    nstored = len(types.inputs.data) - op.sites.value.data - ntables - len(op.shared)
    nsliced = nstored + op.sites.value.data
    kinds = [SLICE if k < nsliced else WHOLE for k in range(len(types.inputs.data))]
    outputs = list(function.function_type.outputs.data)
    if not function.sym_name.data.endswith(BACKWARD):
        outs = [operand(t, TABLE if k < ntables else SAVED) for k, t in enumerate(outputs)]
        return [operand(t, k) for t, k in zip(types.inputs.data, kinds)], outs, False
    forward = func_outputs(post, function)
    accumulated = [SLICE if k < nstored else WHOLE
                   for k, t in enumerate(types.inputs.data)
                   if is_float_tensor(t) and not nstored <= k < nsliced]
    floats = sum(1 for t in types.outputs.data if is_float_tensor(t))
    kinds = [*[SAVED] * (forward - ntables), STATIC, *[SLICE] * floats, *kinds, *accumulated]
    inputs = function.function_type.inputs.data
    if len(kinds) != len(inputs) or outputs:
        raise RecirError(f"error: @{function.sym_name.data} does not take what a "
                         "schedule's backward passes it")
    return [operand(t, k) for t, k in zip(inputs, kinds)], [], True


def func_outputs(post: func.FuncOp, backward: func.FuncOp) -> int:
    """How many values the `_fwd` beside `backward` returns (its results,
    then its saved rows): the `_bwd` takes the saved rows and a frame first."""
    parent = backward.parent_op()
    name = backward.sym_name.data[:-len(BACKWARD)] + FORWARD
    for op in parent.walk() if parent is not None else ():
        if isinstance(op, func.FuncOp) and op.sym_name.data == name:
            return len(op.function_type.outputs.data)
    raise RecirError(f"error: no @{name} beside @{backward.sym_name.data}")


class HeightLoop:
    """`@f__heights` for one native function over rows."""

    def __init__(self, native: NativeRowFunction, spec: Spec):
        self.native = native
        self.inputs, self.outputs, _ = spec
        self.function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
            native.engine.address(native.name + HEIGHTS_ENTRY))

    def __call__(self, bounds: np.ndarray, inputs: Sequence[Any],
                 outputs: Sequence[np.ndarray], saved_at: np.ndarray) -> None:
        """Every height of `bounds`; the arrays must outlive the call."""
        native = self.native
        plan = np.zeros(HEADER + 2 * (len(inputs) + len(outputs)), np.int64)
        plan[:2] = len(bounds) - 1, data_address(bounds)
        plan[4] = data_address(saved_at)
        keep: list[np.ndarray] = []
        for k, (value, role) in enumerate(zip(inputs, self.inputs, strict=True)):
            at = HEADER + 2 * k
            if role.kind == SCALAR:
                raw = np.array(value, np.dtype(c_scalar(role.scalar)))
                plan[at + 1:at + 2].view(np.uint8)[:raw.nbytes] = raw.view(np.uint8).ravel()
            elif value is not None:
                plan[at:at + 2] = self.described(k, value, keep)
        for j, array in enumerate(outputs):
            at = HEADER + 2 * (len(inputs) + j)
            plan[at:at + 2] = len(array), data_address(array)
        widest = int(np.max(np.diff(bounds))) if len(bounds) > 1 else 0
        needed = native.per_row * max(widest, 1)
        for _ in range(native.retries):
            if native.scratch.nbytes < needed:
                native.scratch = np.empty(needed, np.uint8)
                native.scratch_at = data_address(native.scratch)
            plan[2:4] = native.scratch_at, native.scratch.nbytes
            ctx = lone_context(stack.stack_limit())
            self.function(ctypes.addressof(ctx), data_address(plan))
            if not native.scratch_ran_out(ctx):
                break
            needed *= 4
        native.raise_error(ctx)

    def described(self, k: int, value: Any, keep: list[np.ndarray]) -> tuple[int, int]:
        """Input `k`'s (rows, data address), checked against its type."""
        kind = self.native.kinds[k]
        assert kind is not None
        batched, dtype, shape = kind
        array = value
        if not (type(value) is np.ndarray and value.dtype == dtype
                and value.flags.c_contiguous):
            array = np.ascontiguousarray(value, dtype)
            keep.append(array)
        if (array.shape[1:] if batched else array.shape) != shape:
            raise RecirError(f"error: @{self.native.name} takes an array of shape "
                             f"{('?', *shape) if batched else shape}, got {array.shape}")
        return (len(array) if batched else 0), data_address(array)


class NativeSchedule(Schedule):
    """`Schedule` whose `@post` (or `_fwd`) runs all heights in one call."""

    def post(self, children: list[np.ndarray], stored: list[np.ndarray],
             bounds: np.ndarray, total: int, post_fn: func.FuncOp | None = None
             ) -> list[np.ndarray]:
        function = post_fn or self.post_fn
        loop: HeightLoop | None = self.interp.loops.get(function.sym_name.data)
        if loop is None:
            return super().post(children, stored, bounds, total, post_fn)
        tables = [np.empty((total, *row_shape(t)), dtype_of(t))
                  for t in self.post_fn.function_type.outputs.data]
        self.children32 = [c.astype(np.int32) for c in children]
        saved_types = function.function_type.outputs.data[len(tables):]
        # a saved value has at most its height's rows: `total` rows hold them all
        self.saved = [np.empty((total, *row_shape(t)), dtype_of(t)) for t in saved_types]
        self.saved_at = np.zeros((len(bounds) - 1, len(self.saved), 2), np.int64)
        self.frames = []
        loop(bounds, (*stored, *self.children32, *tables, *self.shared),
             [*tables, *self.saved], self.saved_at)
        return tables


class NativeBackward(Backward):
    """`Backward` whose `@post_bwd` runs all heights in one call."""

    def post_backward(self, d_tables: list[Any], d_stored: list[Any]) -> None:
        s = self.s
        loop: HeightLoop | None = s.interp.loops.get(self.post_bwd.sym_name.data)
        if loop is None or not isinstance(s, NativeSchedule):
            return super().post_backward(d_tables, d_stored)
        nstored, nsites, ntables = len(s.stored), s.sites, len(d_tables)
        accs = []
        for k, arg in enumerate(s.post_fn.body.block.args):
            if is_float_tensor(arg.type) and not nstored <= k < nstored + nsites:
                j = k - nstored - nsites
                accs.append(d_stored[k] if k < nstored else d_tables[j] if j < ntables
                            else self.d_shared[j - ntables])
        inputs = (*s.stored, *s.children32, *self.tables, *s.shared)
        d_results = [d for d in d_tables if d is not None]
        loop(s.bounds, (*s.saved, None, *d_results, *inputs, *accs), [], s.saved_at)
