"""A frontier call made again on the plans the last one left.

A frontier call (`FrontierFunction.run`, a gradient's `run_grad`) builds a
`NativeSchedule`, which finds its kept arrays and plans (`kept_plans`, the
numbering call's, the height loops'), fills them and makes one native
call: the expansion, the height order, the policy and the loop, a
gradient's `_bwd` after its `_fwd` (`kernels/height_call`). Once a call has
run that way, the next differs only in its inputs: `RepeatCall` writes
just those (the roots, the batch's size, the shared operands' fields; a
gradient's cotangents and the buffers its gradients are added into,
`RepeatGradient`) into the same plans, clears the contexts and makes the
same call, a hundred and more Python calls fewer on the calling thread
while the team waits. The plans' row counts and `saved_at` are the ones
that call made ready, and only the schedule changes them; each function's
scratch is written as it is now (the policy checks that it is enough). So
anything else (more rows than the kept tables hold, a scratch the policy
finds short, an error) it leaves to the schedule: it returns None, and the
caller drops it and runs the call as before, which grows or raises, and
makes the next repeat from the plans it leaves. A Ctrl-C's stop it raises
(KeyboardInterrupt): run again, the call would add a stopped `_bwd`'s
gradients twice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from recir.backend import interrupts, native_schedule, stack
from recir.backend.array_address import data_address
from recir.backend.kernels import height_call as call_fields
from recir.backend.kernels import height_order as order
from recir.backend.kept_plans import CLEAN
from recir.backend.native_backward import seeds_of
from recir.backend.native_loops import NativeExpansion
from recir.backend.native_schedule import NUMBERING, NativeSchedule, operand_fields
from recir.interpreter.frontier_grad import shared_gradients
from recir.passes.expansion_loop import EXPANSION_HEADER
from recir.passes.native_context import ERROR_INTERRUPT
from recir.passes.rows import ALIGN


class RepeatCall:
    """The call `schedule` made, made again for other inputs (`repeat`)."""

    def __init__(self, schedule: NativeSchedule, expansion: NativeExpansion):
        self.expansion, self.called = expansion, schedule.called
        assert expansion.kept is not None and self.called is not None
        self.plan, self.arrays = expansion.kept  # (its plan points into them all)
        self.tables, self.capacity = self.arrays[0], int(self.plan[0])
        self.index = np.arange(self.capacity, dtype=self.tables[0].dtype)
        self.needed = -(-expansion.native.per_row * self.capacity // ALIGN) * ALIGN  # its scratch
        numbering = schedule.interp.kept[NUMBERING]
        self.numbering = numbering  # (its fields point into its plans and arrays)
        self.fields, self.inv = data_address(numbering[3]), numbering[1][0]
        self.status = schedule.numbered[0].plan[order.STATUS:order.STATUS + 1]
        post = self.called.post
        self.results = post.rows.arrays[:post.tables]
        # the loops' calls: the `@post`'s or `_fwd`'s, a gradient's `_bwd`'s after it
        self.calls = [self.called, *([self.called.next] if self.called.next else [])]
        self.first = expansion.spec.moving
        # each loop's plan of the shared operands' fields, and whether it
        # takes them as the expansion does (their fields found once)
        types = schedule.interp.kept.get((expansion.native.name, self.first))
        self.shared_plans = [(loop, loop.kept.shared.start, types is not None and (
            types is schedule.interp.kept.get((loop.native.name, loop.kept.shared.start))))
            for loop in [c.loop for c in self.calls]]
        teams = [expansion.teams[1]] + [team for loop, _, _ in self.shared_plans for team in (
            [loop.teams[1]] + ([loop.teams[loop.threads]] if loop.threads > 1 else []))]
        self.views = [ctx for team in teams for ctx in team.views]
        self.callers = [team.views[0] for team in teams]  # the calling thread's
        self.context = expansion.teams[1].address
        self.held = self.called.held[1]  # what Ctrl-C stops (`interrupts`)

    @classmethod
    def after(cls, schedule: NativeSchedule, *more: Any) -> RepeatCall | None:
        """The repeat of the call `schedule` just made, where it made it as
        one native call that ran the height loop (and `more`'s call after
        it, a gradient's); else None."""
        expansion = schedule.interp.loops.get(schedule.expand_fn.sym_name.data)
        called = schedule.called
        if not isinstance(expansion, NativeExpansion) or expansion.kept is None or (
                called is None or called.held is None or schedule.numbered is None):
            return None
        calls = [called, *([called.next] if called.next is not None else [])]
        kept = schedule.interp.kept.get(NUMBERING)
        if kept is None or kept[0] is not expansion.kept[0] or not all(
                c.plan[call_fields.RAN] for c in calls) or len(calls) != 1 + len(more) or (
                called.loop.kept.rest.numbers):  # (a `_bwd`'s: `RepeatGradient`'s to place)
            return None
        return cls(schedule, expansion, *more)

    def repeat(self, roots: Sequence[Any], shared: Sequence[Any], wanted: Any
               ) -> list[np.ndarray | None] | None:
        """The schedule's outputs for these operands (those `wanted`, else
        None), as `Schedule.run` gives them; None where the call is not one
        to repeat (nothing returned is written then but kept arrays)."""
        keep: list[np.ndarray] = []  # what operands were converted to, alive through the call
        count = self.place(roots, shared, keep)
        if count is None or not self.made():
            return None
        return self.gathered(count, wanted)

    def place(self, roots: Sequence[Any], shared: Sequence[Any], keep: list[np.ndarray]
              ) -> int | None:
        """The batch's size, its roots and shared operands written into the
        plans; None where the kept tables cannot hold it (nothing written)."""
        expansion, count = self.expansion, len(roots[0]) if roots else 0
        if not 0 < count <= self.capacity or expansion.first_capacity(
                count, shared) > self.capacity or expansion.native.scratch.nbytes < self.needed:
            return None
        fields = operand_fields(expansion, shared, keep, self.first)
        plan = self.plan
        self.tables[0][:count] = self.index[:count]
        for table, value in zip(self.tables[1:], roots, strict=True):
            table[:count] = value
        plan[2:4] = expansion.native.scratch_at, self.needed
        plan[5:8] = 0, 0, count  # total and depths written back
        at = EXPANSION_HEADER + 2 * len(self.tables)
        plan[at:at + len(fields)] = fields
        for loop, first, same in self.shared_plans:
            found = fields if same else operand_fields(loop, shared, keep, first)
            at = loop.kept.header + 2 * first
            loop.kept.plan[at:at + len(found)] = found
        return count

    def made(self) -> bool:
        """The call made, its contexts cleared; whether every loop ran
        without an error."""
        for call in self.calls:  # (each loop's scratch as it is now: the policy checks it)
            native, plan = call.loop.native, call.plan
            plan[call_fields.SCRATCH:call_fields.PER_ROW] = native.scratch_at, native.scratch.nbytes
            plan[call_fields.RAN] = 0
        for ctx in self.views:
            ctx.error, ctx.site, ctx.stack_limit = 0, 0, 0
        limit = stack.stack_limit()
        for ctx in self.callers:
            ctx.stack_limit = limit
        key = interrupts.begin(self.held)
        try:
            native_schedule.numbering_kernel()(self.context, self.fields)  # (as the schedule's)
        finally:
            interrupts.end(key)
        for ctx in self.views:  # a Ctrl-C's stop is raised, not taken for a call to rerun
            if ctx.error == ERROR_INTERRUPT:
                self.called.loop.native.raise_error(ctx)
        return all(call.plan[call_fields.RAN] for call in self.calls) and not any(
            ctx.error for ctx in self.views) and not self.status[0]

    def gathered(self, count: int, wanted: Any) -> list[np.ndarray | None]:
        rows = self.inv[:count]  # the roots' rows in height order
        return [t[rows] if k in wanted else None for k, t in enumerate(self.results)]


class RepeatGradient(RepeatCall):
    """A gradient's call (`NativeBackward`: the `_fwd`'s loop, the `_bwd`'s
    after it) made again: besides the forward's inputs, the loss's
    cotangents placed at the roots' rows of the gradient tables, which the
    last `_bwd` left zeroed (`CLEAN`), and the buffers the shared operands'
    gradients are added into (`repeat_gradient`)."""

    def __init__(self, schedule: NativeSchedule, expansion: NativeExpansion, backward: Any):
        super().__init__(schedule, expansion)
        self.following = self.calls[1]
        loop = self.loop = self.following.loop
        self.d_tables = loop.layouts["tables"][1].arrays  # the results' gradients, f32 ones
        self.float_shared = backward.float_shared
        first = loop.kept.shared.start + len(schedule.shared)
        # the `_bwd`'s inputs the shared operands' gradients are added into
        self.into = [(first + j, k) for j, (kind, k) in enumerate(backward.accumulated)
                     if kind == "shared"]

    @classmethod
    def after(cls, schedule: NativeSchedule, *more: Any) -> RepeatCall | None:
        backward, = more
        following, loop = backward.following, backward.loop
        if following is None or backward.top_down or schedule.called is None or (
                schedule.called.next is not following) or loop.layouts.get(CLEAN) is not (
                loop.layouts["tables"][1].arrays):
            return None
        return super().after(schedule, backward)

    def repeat_gradient(self, roots: Sequence[Any], shared: Sequence[Any], wanted: Any,
                        cotangents: Sequence[np.ndarray | None], into: Sequence[Any] | None
                        ) -> tuple[list[np.ndarray | None], list[np.ndarray | None]] | None:
        """The outputs as `repeat` gives them and the gradients as
        `Backward.run` does (`into`: per shared operand, the buffer its
        gradient is added into, or None); None where the call is not one to
        repeat (the gradient tables then to be zeroed by the schedule)."""
        layouts, loop = self.loop.layouts, self.loop
        if layouts.get(CLEAN) is not self.d_tables:
            return None
        keep: list[np.ndarray] = []
        count = self.place(roots, shared, keep)
        seeds = None if count is None else seeds_of(cotangents, self.d_tables, count)
        if seeds is None:
            return None
        d_shared = shared_gradients(shared, self.float_shared, into)
        inputs: list[Any] = [None] * len(loop.inputs)
        for at, k in self.into:
            inputs[at] = d_shared[k]
        loop.kept.rest.fill(loop, loop.kept.plan, inputs, keep)
        loop.place_copies(loop.kept.plan, loop.threads)
        self.following.seed(count, self.inv, seeds)
        layouts[CLEAN] = None  # until the `_bwd` has read every row it uses
        if not self.made():
            return None
        layouts[CLEAN] = self.d_tables
        return self.gathered(count, wanted), [*[None] * len(roots), *d_shared]
