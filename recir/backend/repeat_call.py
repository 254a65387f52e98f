"""A frontier call made again on the plans the last one left.

A frontier inference call (`FrontierFunction.run`) builds a `NativeSchedule`,
which finds its kept arrays and plans (`kept_plans`, the numbering call's,
the height loop's), fills them and makes one native call: the expansion,
the height order, the policy and the loop (`kernels/height_call`). Once a
call has run that way, the next differs only in its inputs: `RepeatCall`
writes just those (the roots, the batch's size, the shared operands'
fields) into the same plans, clears the contexts and makes the same call,
about a hundred Python calls fewer on the calling thread while the team
waits. The plans' scratch, row counts and `saved_at` are the ones that
call made ready, and only the schedule changes them. So anything else
(more rows than the kept tables hold, a scratch the policy finds short, an
error) it leaves to the schedule: it returns None, and the caller drops
it and runs the call as before, which grows or raises, and makes the next
repeat from the plans it leaves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from recir.backend import interrupts, native_schedule, stack
from recir.backend.array_address import data_address
from recir.backend.kernels import height_call as call_fields
from recir.backend.kernels import height_order as order
from recir.backend.native_loops import NativeExpansion
from recir.backend.native_schedule import NUMBERING, NativeSchedule, operand_fields
from recir.passes.expansion_loop import EXPANSION_HEADER


class RepeatCall:
    """The call `schedule` made, made again for other inputs (`repeat`)."""

    def __init__(self, schedule: NativeSchedule, expansion: NativeExpansion):
        self.expansion, self.called = expansion, schedule.called
        assert expansion.kept is not None and self.called is not None
        self.plan, self.arrays = expansion.kept  # (its plan points into them all)
        self.tables, self.capacity = self.arrays[0], int(self.plan[0])
        self.index = np.arange(self.capacity, dtype=self.tables[0].dtype)
        numbering = schedule.interp.kept[NUMBERING]
        self.numbering = numbering  # (its fields point into its plans and arrays)
        self.fields, self.inv = data_address(numbering[3]), numbering[1][0]
        self.status = schedule.numbered[0].plan[order.STATUS:order.STATUS + 1]
        loop = self.loop = self.called.loop
        post = self.called.post
        self.results = post.rows.arrays[:post.tables]
        self.first = expansion.spec.moving
        self.shared_at = loop.kept.header + 2 * loop.kept.shared.start
        # the loop takes the shared operands as the expansion does: their fields once
        types = schedule.interp.kept.get((expansion.native.name, self.first))
        self.same = types is not None and types is schedule.interp.kept.get(
            (loop.native.name, loop.kept.shared.start))
        teams = [expansion.teams[1], loop.teams[1]] + (
            [loop.teams[loop.threads]] if loop.threads > 1 else [])
        self.views = [ctx for team in teams for ctx in team.views]
        self.callers = [team.views[0] for team in teams]  # the calling thread's
        self.context = expansion.teams[1].address
        self.held = self.called.held[1]  # what Ctrl-C stops (`interrupts`)

    @staticmethod
    def after(schedule: NativeSchedule) -> RepeatCall | None:
        """The repeat of the call `schedule` just made, where it made it as
        one native call that ran the height loop; else None."""
        expansion = schedule.interp.loops.get(schedule.expand_fn.sym_name.data)
        called = schedule.called
        if not isinstance(expansion, NativeExpansion) or expansion.kept is None or (
                called is None or not called.plan[call_fields.RAN] or called.next is not None
                or called.loop.kept.rest.numbers or schedule.numbered is None
                or called.held is None):
            return None
        kept = schedule.interp.kept.get(NUMBERING)
        if kept is None or kept[0] is not expansion.kept[0]:
            return None
        return RepeatCall(schedule, expansion)

    def repeat(self, roots: Sequence[Any], shared: Sequence[Any], wanted: Any
               ) -> list[np.ndarray | None] | None:
        """The schedule's outputs for these operands (those `wanted`, else
        None), as `Schedule.run` gives them; None where the call is not one
        to repeat (nothing returned is written then but kept arrays)."""
        expansion, loop, count = self.expansion, self.loop, len(roots[0]) if roots else 0
        if not 0 < count <= self.capacity or expansion.first_capacity(
                count, shared) > self.capacity:
            return None
        keep: list[np.ndarray] = []  # what operands were converted to, alive through the call
        fields = operand_fields(expansion, shared, keep, self.first)
        loop_fields = fields if self.same else operand_fields(
            loop, shared, keep, loop.kept.shared.start)
        plan = self.plan
        self.tables[0][:count] = self.index[:count]
        for table, value in zip(self.tables[1:], roots, strict=True):
            table[:count] = value
        plan[5:8] = 0, 0, count  # total and depths written back
        at = EXPANSION_HEADER + 2 * len(self.tables)
        plan[at:at + len(fields)] = fields
        loop.kept.plan[self.shared_at:self.shared_at + len(loop_fields)] = loop_fields
        call = self.called.plan
        call[call_fields.RAN] = 0
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
        if not call[call_fields.RAN] or any(ctx.error for ctx in self.views) or (
                self.status[0]):
            return None
        rows = self.inv[:count]  # the roots' rows in height order
        return [t[rows] if k in wanted else None for k, t in enumerate(self.results)]
