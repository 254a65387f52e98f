"""NumPy semantics of `frontier.schedule_grad`: the frontier schedule, backwards.

`synthesize-gradients` differentiates the batched functions with the recursive
path's rules table (a row take's gradient is a scatter-add, a merge's a take
of each side, a broadcast's the sum of its rows) and emits
`frontier.schedule_grad` for a schedule. Here the forward runs again with
`@post_fwd` (and `@expand_fwd` where the expansion makes floats), keeping each
height's and depth's inputs, the rows its `_fwd` saves (the products' and
transcendentals' outputs: `saving.rebuilds_row`) and its frame; then
`@post_bwd` runs height by height from the roots down, each height adding into
its children's result gradients (lower heights, run later) and into the
parameters' gradients, once per height rather than once per invocation; then
`@expand_bwd` depth by depth from the deepest up.
"""

from __future__ import annotations

from collections.abc import Sequence
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

    def __init__(self, schedule: Schedule, facts: Any = None):
        """`facts`: another call's `self.facts` for the same schedule op."""
        self.s = schedule
        if facts is None:
            facts = self.find_facts(schedule)
        self.facts = facts
        (self.post_fwd, self.post_bwd, self.moving_types, self.top_down, expand_fwd,
         self.expand_bwd, self.float_shared, self.accumulated) = facts
        if self.top_down:
            schedule.expand_fwd = expand_fwd

    @staticmethod
    def find_facts(schedule: Schedule) -> tuple[Any, ...]:
        """The `_fwd`/`_bwd` functions, the moving arguments' types, whether
        the expansion is differentiated, which shared operands are f32
        tensors and where `@post_bwd`'s accumulators come from
        (`accumulated`: per accumulated argument of `@post`, its stored
        value's, result table's or shared operand's number, by kind)."""
        post, expand = schedule.post_fn.sym_name.data, schedule.expand_fn.sym_name.data
        post_fwd = schedule.callee(f"{post}_fwd", HOW.format(post))
        post_bwd = schedule.callee(f"{post}_bwd", HOW.format(post))
        moving_types = schedule.expand_fn.function_type.inputs.data[:1 + len(schedule.roots)]
        top_down = any(is_float_tensor(t) for t in (
            *moving_types, *schedule.expand_fn.function_type.outputs.data))
        expand_fwd = expand_bwd = None
        if top_down:
            why = HOW.format(expand) + ": the expansion makes float values"
            expand_fwd = schedule.callee(f"{expand}_fwd", why)
            expand_bwd = schedule.callee(f"{expand}_bwd", why)
        float_shared = [is_float_tensor(o.type) for o in schedule.op.shared]
        nsites = schedule.sites
        nstored = len(schedule.expand_fn.function_type.outputs.data) - nsites * (
            2 + len(schedule.roots))  # after each site's rows and moving values
        ntables = len(schedule.post_fn.function_type.outputs.data)
        accumulated = []
        for k, typ in enumerate(schedule.post_fn.function_type.inputs.data):
            if is_float_tensor(typ) and not nstored <= k < nstored + nsites:
                j = k - nstored - nsites
                accumulated.append(("stored", k) if k < nstored else ("table", j)
                                   if j < ntables else ("shared", j - ntables))
        return (post_fwd, post_bwd, moving_types, top_down, expand_fwd, expand_bwd,
                float_shared, accumulated)

    def run(self, cotangents: list[np.ndarray | None], into: list[Any] | None = None
            ) -> list[np.ndarray | None]:
        """The gradients of the roots' moving arguments and of the shared
        ones (None where not f32 tensors), given the float results' cotangents
        at the roots (None: zeros). `into`: per shared argument, a buffer its
        gradient is added into (and returned), or None for a fresh one."""
        s = self.s
        batch = len(s.roots[0])
        self.d_shared = shared_gradients(s.shared, self.float_shared, into)
        s.number_by_height(batch)
        tables = self.tables = s.post(s.children, s.stored, s.bounds, s.total, self.post_fwd)
        d_stored = self.backward(tables, cotangents, batch)
        self.d_moving: list[np.ndarray | None] = [None] * len(self.moving_types)
        if self.top_down:
            self.expand_backward([d if d is None else d[s.inv] for d in d_stored])
        roots = [d if d is None else d[:batch] for d in self.d_moving[1:]]
        return [*roots, *self.d_shared]

    def backward(self, tables: list[np.ndarray], cotangents: list[np.ndarray | None],
                 batch: int) -> list[np.ndarray | None]:
        """`@post_bwd` over the heights from the cotangents at the roots into
        `d_shared`; the stored values' gradients."""
        s = self.s
        d_tables = self.zeroed(tables, "tables")
        for d, cotangent in zip((d for d in d_tables if d is not None), cotangents,
                                strict=True):
            if cotangent is not None:
                d[s.inv[:batch]] = cotangent
        d_stored = self.zeroed(s.stored, "stored")
        self.post_backward(d_tables, d_stored)
        return d_stored

    def zeroed(self, values: list[np.ndarray], what: str) -> list[np.ndarray | None]:
        """A zeroed gradient per f32 array of `values` (None for the rest):
        the result tables' or (`what`) the stored values'."""
        return [np.zeros(v.shape, v.dtype) if v.dtype == np.float32 else None for v in values]

    def accumulators(self, d_tables: list[Any], d_stored: list[Any]) -> list[Any]:
        """`@post_bwd`'s accumulator operands, whole (`find_facts`)."""
        sources = {"stored": d_stored, "table": d_tables, "shared": self.d_shared}
        return [sources[kind][k] for kind, k in self.accumulated]

    def post_backward(self, d_tables: list[Any], d_stored: list[Any]) -> None:
        for rows, inputs, kept in reversed(self.s.frames):
            d_results = [d[rows].copy() for d in d_tables if d is not None]
            accs = [d_stored[k][rows] if kind == "stored" else acc for (kind, k), acc in zip(
                self.accumulated, self.accumulators(d_tables, d_stored), strict=True)]
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


def shared_gradients(shared: Sequence[Any], floats: Sequence[bool],
                     into: Sequence[Any] | None) -> list[np.ndarray | None]:
    """Per shared operand the buffer its gradient is added into: `into`'s
    where given, else zeros (None where `floats` says it is no f32 tensor)."""
    given = into if into is not None else [None] * len(shared)
    return [(d if d is not None else np.zeros_like(v)) if is_float else None
            for v, is_float, d in zip(shared, floats, given, strict=True)]
