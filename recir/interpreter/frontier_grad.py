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
    tables, d_shared = backward(schedule, seeded)
    outputs = {r: t[schedule.inv[:len(schedule.roots[0])]] for r, t in zip(
        sched.outputs, tables, strict=True)}
    grads = {v.index: d for v, d in zip(sched.shared, d_shared, strict=True)  # type: ignore[attr-defined]
             if d is not None}
    return tuple(outputs[v] for v in returned), grads  # type: ignore[index]


def backward(schedule: Schedule, seeded: int) -> tuple[list[np.ndarray], list[Any]]:
    """The forward's result tables and the shared arguments' gradients."""
    op = schedule.op
    expand, post = schedule.expand_fn, schedule.post_fn
    moving = expand.function_type.inputs.data[1:1 + len(op.moving)]
    made_top_down = [t for t in (*moving, *expand.function_type.outputs.data)
                     if is_float_tensor(t)]
    if made_top_down:
        raise RecirError(f"error: @{expand.sym_name.data}: frontier gradients through "
                         "float values made top down (TD-TreeLSTM's states) are not "
                         "supported yet")
    post_fwd = schedule.callee(f"{post.sym_name.data}_fwd")
    post_bwd = schedule.callee(f"{post.sym_name.data}_bwd")
    schedule.number_by_height(len(schedule.roots[0]))
    tables = schedule.post(schedule.children, schedule.stored, schedule.bounds,
                           schedule.total, post_fwd)
    d_tables = [np.zeros_like(t) if t.dtype == np.float32 else None for t in tables]
    seed = d_tables[seeded]
    if seed is None:
        raise RecirError(f"error: the loss, result {seeded} of the schedule, is not f32")
    seed[schedule.inv[:len(schedule.roots[0])]] = 1.0
    d_shared = [np.zeros_like(v) if is_float_tensor(t) else None
                for v, t in zip(schedule.shared, (s.type for s in op.shared), strict=True)]
    nstored, nsites = len(schedule.stored), op.sites.value.data
    ntables = len(tables)
    for rows, inputs, frame in reversed(schedule.frames):
        d_results = [d[rows].copy() for d in d_tables if d is not None]
        accs = []
        for k, arg in enumerate(post.body.block.args):
            if not is_float_tensor(arg.type) or nstored <= k < nstored + nsites:
                continue
            if k < nstored:
                raise RecirError("internal: a float stored value without an expansion "
                                 "gradient")
            j = k - nstored - nsites
            accs.append(d_tables[j] if j < ntables else d_shared[j - ntables])
        schedule.interp.call_op(post_bwd, (frame, *d_results, *inputs, *accs))
    return tables, d_shared
