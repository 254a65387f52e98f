"""Gradients of a frontier-batched call in the interpreter: the schedule, backwards.

`synthesize-gradients{entry=f__post wrapper=false}` differentiates the
bottom-up function with the recursive path's rules table (a row gather's
gradient is a scatter-add, a merge's is a take of each side, a broadcast's
the sum of its rows): `@f__post_fwd` and `@f__post_bwd`. The forward runs the
schedule with `_fwd`, keeping each height's inputs and frame; the backward
runs `_bwd` height by height from the roots down: each height adds into its
children's result gradients (lower heights, run later) and into the
parameters' gradients, once per height rather than once per invocation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Attribute, BlockArgument

from recir.diagnostics import RecirError
from recir.dialects import frontier
from recir.interpreter import coerce_argument, find_entry, make_interpreter
from recir.interpreter.frontier import Schedule


def is_float_tensor(typ: Attribute) -> bool:
    return isinstance(typ, TensorType) and isinstance(typ.element_type, Float32Type)


def single_schedule(entry: func.FuncOp) -> frontier.ScheduleOp:
    ops = list(entry.body.block.ops)
    sched = ops[0]
    if (len(ops) != 2 or not isinstance(sched, frontier.ScheduleOp)
            or not all(isinstance(v, BlockArgument) for v in sched.operands)):
        raise RecirError(f"error: @{entry.sym_name.data}: frontier gradients need an entry "
                         "that is one frontier.schedule of its arguments")
    return sched


def frontier_value_and_grad(module: Any, name: str, args: Sequence[Any], loss: int = -1
                            ) -> tuple[tuple[Any, ...], dict[int, np.ndarray]]:
    """`@name`'s outputs over the batch and d(sum of the loss rows) / d(each
    f32 tensor argument), by argument position."""
    entry = find_entry(module, name)
    sched = single_schedule(entry)
    inputs = entry.function_type.inputs.data
    values = [coerce_argument(i, a, t) for i, (a, t) in enumerate(zip(args, inputs,
                                                                        strict=True))]
    schedule = Schedule(make_interpreter(module), sched,
                        [values[v.index] for v in sched.operands])  # type: ignore[attr-defined]
    returned = list(entry.body.block.last_op.operands)  # type: ignore[union-attr]
    seeded = list(sched.outputs).index(returned[loss])  # type: ignore[arg-type]
    backward = Backward(schedule)
    tables = backward.run(seeded)
    outputs = {r: t[schedule.inv[:len(schedule.roots[0])]] for r, t in zip(
        sched.outputs, tables, strict=True)}
    grads = {v.index: d for v, d in zip(sched.operands, backward.d_operands(), strict=True)  # type: ignore[attr-defined]
             if d is not None}
    return tuple(outputs[v] for v in returned), grads  # type: ignore[index]


def zeros_if_float(value: np.ndarray, typ: Attribute) -> np.ndarray | None:
    return np.zeros_like(value) if is_float_tensor(typ) else None


class Backward:
    """The schedule's forward with `_fwd`s, then its backward: `@post_bwd` by
    height from the roots down, then `@expand_bwd` (if the expansion made
    float values, TD-TreeLSTM's states) by depth from the deepest up."""

    def __init__(self, schedule: Schedule):
        self.s = schedule
        post, expand = schedule.post_fn.sym_name.data, schedule.expand_fn.sym_name.data
        self.post_fwd = schedule.callee(f"{post}_fwd")
        self.post_bwd = schedule.callee(f"{post}_bwd")
        self.moving_types = schedule.expand_fn.function_type.inputs.data[
            :1 + len(schedule.op.moving)]
        self.top_down = any(is_float_tensor(t) for t in (
            *self.moving_types, *schedule.expand_fn.function_type.outputs.data))
        if self.top_down:
            schedule.expand_fwd = self.callee_or_error(f"{expand}_fwd")
            self.expand_bwd = self.callee_or_error(f"{expand}_bwd")

    def callee_or_error(self, name: str) -> func.FuncOp:
        try:
            return self.s.callee(name)
        except AssertionError:
            raise RecirError(f"error: no @{name}: the expansion makes float values "
                             "(states computed top down), so differentiate it too "
                             "(synthesize-gradients{entry=...__expand wrapper=false})"
                             ) from None

    def run(self, seeded: int) -> list[np.ndarray]:
        s = self.s
        batch = len(s.roots[0])
        s.number_by_height(batch)
        tables = s.post(s.children, s.stored, s.bounds, s.total, self.post_fwd)
        d_tables = [np.zeros_like(t) if t.dtype == np.float32 else None for t in tables]
        seed = d_tables[seeded]
        if seed is None:
            raise RecirError(f"error: the loss, result {seeded} of the schedule, is not f32")
        seed[s.inv[:batch]] = 1.0
        self.d_shared = [zeros_if_float(v, o.type) for v, o in zip(s.shared, s.op.shared,
                                                                   strict=True)]
        d_stored = [np.zeros_like(v) if v.dtype == np.float32 else None for v in s.stored]
        self.post_backward(d_tables, d_stored)
        self.d_moving: list[np.ndarray | None] = [None] * len(self.moving_types)
        if self.top_down:
            self.expand_backward([d if d is None else d[s.inv] for d in d_stored])
        return tables

    def post_backward(self, d_tables: list[Any], d_stored: list[Any]) -> None:
        post, nstored, nsites = self.s.post_fn, len(self.s.stored), self.s.sites
        for rows, inputs, frame in reversed(self.s.frames):
            d_results = [d[rows].copy() for d in d_tables if d is not None]
            accs = []
            for k, arg in enumerate(post.body.block.args):
                if not is_float_tensor(arg.type) or nstored <= k < nstored + nsites:
                    continue
                j = k - nstored - nsites
                accs.append(d_stored[k][rows] if k < nstored else
                            d_tables[j] if j < len(d_tables) else
                            self.d_shared[j - len(d_tables)])
            self.s.interp.call_op(self.post_bwd, (frame, *d_results, *inputs, *accs))

    def expand_backward(self, d_stored: list[Any]) -> None:
        """Depth by depth from the deepest: a depth's children are the next
        depth's rows, whose moving arguments' gradients are then complete."""
        s, total = self.s, self.s.total
        self.d_moving = [np.zeros((total, *t.get_shape()[1:]), np.float32)  # type: ignore[attr-defined]
                         if is_float_tensor(t) else None for t in self.moving_types]
        floats = [j for j, d in enumerate(self.d_moving) if d is not None]
        for rows, inputs, frame in reversed(s.levels):
            d_results = []
            for children in s.children_by_depth:
                ids = children[rows]
                ids = ids[ids >= 0]
                d_results += [self.d_moving[j][ids] for j in floats]  # type: ignore[index]
            d_results += [d[rows] for d in d_stored if d is not None]
            accs = [self.d_moving[j][rows] for j in floats]  # type: ignore[index]
            accs += [d for d in self.d_shared if d is not None]
            s.interp.call_op(self.expand_bwd, (frame, *d_results, *inputs, *accs))

    def d_operands(self) -> list[np.ndarray | None]:
        """Gradients of the schedule's operands: the roots' moving arguments
        (the first rows), then the shared ones."""
        batch = len(self.s.roots[0])
        roots = [d if d is None else d[:batch] for d in self.d_moving[1:]]
        return [*roots, *self.d_shared]
