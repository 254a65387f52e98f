"""NumPy semantics of `frontier.schedule_grad`: the frontier schedule, backwards.

`synthesize-gradients` differentiates the batched functions with the
recursive path's rules table (a row take's gradient is a scatter-add, a
merge's a take of each side, a broadcast's the sum of its rows) and emits
`frontier.schedule_grad` for a schedule. Here the forward runs again with
`@post_fwd` (and `@expand_fwd` where the expansion makes floats), keeping
each height's and depth's inputs, the rows its `_fwd` saves (the products'
outputs: `saving.rebuilds_row`) and its frame; then `@post_bwd` runs height by
height from the roots down, each height adding into its children's result
gradients (lower heights, run later) and into the parameters' gradients, once
per height rather than once per invocation; then `@expand_bwd` depth by depth
from the deepest up.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from recir.dialects import frontier
from recir.dialects.row_types import is_f32_tensor as is_float_tensor
from recir.interpreter.frontier import Schedule, row_shape

HOW = " (run synthesize-gradients{{entry={} wrapper=false}} first)"


@register_impls
class FrontierGradFunctions(InterpreterFunctions):
    @impl(frontier.ScheduleGradOp)
    def run_schedule_grad(self, interp: Interpreter, op: frontier.ScheduleGradOp, args: Any):
        ncot, nmoving = len(op.cotangents), len(op.moving)
        schedule = Schedule(interp, op, args[ncot:ncot + nmoving], args[ncot + nmoving:])
        return tuple(d for d in Backward(schedule).run(args[:ncot]) if d is not None)


class Backward:
    """The schedule's forward with `_fwd`s, then its backward: `@post_bwd` by
    height from the roots down, then `@expand_bwd` (if the expansion makes
    float values, TD-TreeLSTM's states) by depth from the deepest up."""

    def __init__(self, schedule: Schedule):
        self.s = schedule
        post, expand = schedule.post_fn.sym_name.data, schedule.expand_fn.sym_name.data
        self.post_fwd = schedule.callee(f"{post}_fwd", HOW.format(post))
        self.post_bwd = schedule.callee(f"{post}_bwd", HOW.format(post))
        self.moving_types = schedule.expand_fn.function_type.inputs.data[
            :1 + len(schedule.roots)]
        self.top_down = any(is_float_tensor(t) for t in (
            *self.moving_types, *schedule.expand_fn.function_type.outputs.data))
        if self.top_down:
            why = HOW.format(expand) + ": the expansion makes float values"
            schedule.expand_fwd = schedule.callee(f"{expand}_fwd", why)
            self.expand_bwd = schedule.callee(f"{expand}_bwd", why)

    def run(self, cotangents: list[np.ndarray], into: list[Any] | None = None
            ) -> list[np.ndarray | None]:
        """The gradients of the roots' moving arguments and of the shared
        ones (None where not f32 tensors), given the float results' cotangents
        at the roots. `into`: per shared argument, a buffer its gradient is
        added into (and returned), or None for a fresh one."""
        s = self.s
        batch = len(s.roots[0])
        s.number_by_height(batch)
        tables = self.tables = s.post(s.children, s.stored, s.bounds, s.total, self.post_fwd)
        d_tables = [np.zeros_like(t) if t.dtype == np.float32 else None for t in tables]
        for d, cotangent in zip((d for d in d_tables if d is not None), cotangents,
                                strict=True):
            d[s.inv[:batch]] = cotangent
        given = into if into is not None else [None] * len(s.shared)
        self.d_shared = [(d if d is not None else np.zeros_like(v))
                         if is_float_tensor(o.type) else None
                         for v, o, d in zip(s.shared, s.op.shared, given, strict=True)]
        d_stored = [np.zeros_like(v) if v.dtype == np.float32 else None for v in s.stored]
        self.post_backward(d_tables, d_stored)
        self.d_moving: list[np.ndarray | None] = [None] * len(self.moving_types)
        if self.top_down:
            self.expand_backward([d if d is None else d[s.inv] for d in d_stored])
        roots = [d if d is None else d[:batch] for d in self.d_moving[1:]]
        return [*roots, *self.d_shared]

    def post_backward(self, d_tables: list[Any], d_stored: list[Any]) -> None:
        post, nstored, nsites = self.s.post_fn, len(self.s.stored), self.s.sites
        for rows, inputs, kept in reversed(self.s.frames):
            d_results = [d[rows].copy() for d in d_tables if d is not None]
            accs = []
            for k, arg in enumerate(post.body.block.args):
                if not is_float_tensor(arg.type) or nstored <= k < nstored + nsites:
                    continue
                j = k - nstored - nsites
                accs.append(d_stored[k][rows] if k < nstored else
                            d_tables[j] if j < len(d_tables) else
                            self.d_shared[j - len(d_tables)])
            self.s.interp.call_op(self.post_bwd, (*kept, *d_results, *inputs, *accs))

    def expand_backward(self, d_stored: list[Any]) -> None:
        """Depth by depth from the deepest: a depth's children are the next
        depth's rows, whose moving arguments' gradients are then complete."""
        s, total = self.s, self.s.total
        self.d_moving = [np.zeros((total, *row_shape(t)), np.float32)
                         if is_float_tensor(t) else None for t in self.moving_types]
        floats = [d for d in self.d_moving if d is not None]
        for rows, inputs, kept in reversed(s.levels):
            d_results = []
            for children in s.children_by_depth:
                ids = children[rows]
                d_results += [d[ids[ids >= 0]] for d in floats]
            d_results += [d[rows] for d in d_stored if d is not None]
            accs = [*(d[rows] for d in floats), *(d for d in self.d_shared if d is not None)]
            s.interp.call_op(self.expand_bwd, (*kept, *d_results, *inputs, *accs))
