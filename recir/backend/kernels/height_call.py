"""A height loop's call in the native call that numbers its rows.

Once the height policy has chosen how the loop runs (`height_policy.py`),
the numbering call (`kernels/numbering`) goes on with `height_call`'s code,
the call `HeightLoop.__call__` makes from Python: the loop plan's header
(the heights, the policy's bounds, the scratch and each thread's share of
it, `saved_at` zeroed for the heights and threads, the team's contexts, the
heights it splits, the group table where the team runs by groups), then
the loop. The rest of the loop's plan (its tables, kept at the expansion's
capacity, and the shared operands) Python fills before the numbering call
(`HeightCall.ready`). Where the scratch or `saved_at` is short of what the
choice needs, it does not call the loop and says so: Python then calls it
as before, growing them.

Plan, 8-byte fields: the policy's plan, the loop's entry, its plan, the
contexts of one thread and of the loop's team, the scratch and its bytes,
the scratch a row takes, `saved_at` and its entries, the values the loop
saves; then, written, whether the loop ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import i64
from xdsl.ir import SSAValue

from recir.backend import interrupts
from recir.backend.array_address import data_address
from recir.backend.kernels import height_policy as policy
from recir.passes.llvm_functions import call_pointer, ceil_div
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.rows import ALIGN

(POLICY_PLAN, LOOP, LOOP_PLAN, ONE, TEAM, SCRATCH, SCRATCH_BYTES, PER_ROW, SAVED_AT,
 SAVED_AT_SIZE, SAVED, RAN) = range(12)
FIELDS = 12
# the loop plan's header (`passes/schedule_loops.py`, `HeightLoop.__call__`)
HEIGHTS, BOUNDS, AT, NEEDED, SAVED_WHERE, THREADS, CONTEXTS, SPLIT, GROUPS = (
    0, 1, 2, 3, 4, 5, 6, 7, 11)


def height_call(b: Emitter, plan: SSAValue) -> None:
    """The loop's header from the policy's choice, and the loop's call
    where its scratch and `saved_at` hold what the choice needs."""
    chosen = b.load(plan, POLICY_PLAN, PTR)
    heights = b.load(chosen, policy.HEIGHTS, i64)
    threads = b.load(chosen, policy.TEAM_THREADS, i64)
    needed = b.mul(ceil_div(b, b.mul(b.load(plan, PER_ROW, i64), b.load(
        chosen, policy.MOST, i64)), ALIGN), ALIGN)
    count = b.mul(b.mul(heights, threads), b.mul(b.load(plan, SAVED, i64), 2))
    fits = b.value(arith.AndIOp(
        b.compare("sle", b.mul(needed, threads), b.load(plan, SCRATCH_BYTES, i64)),
        b.compare("sle", count, b.load(plan, SAVED_AT_SIZE, i64))))
    b.store(b.value(arith.ExtUIOp(fits, i64)), plan, RAN)

    def call(e: Emitter) -> None:
        saved_at, loop_plan = e.load(plan, SAVED_AT, PTR), e.load(plan, LOOP_PLAN, PTR)
        e.clear(saved_at, e.mul(count, 8))
        team = e.value(arith.SelectOp(e.compare("sgt", threads, 1), e.i64(TEAM), e.i64(ONE)))
        contexts = e.load(plan, team, i64)
        grouped = e.compare("ne", e.load(chosen, policy.GROUPED, i64), 0)
        for field in range(GROUPS + 1):
            e.store(e.i64(0), loop_plan, field)
        for field, value in (
                (HEIGHTS, heights), (BOUNDS, e.load(chosen, policy.BOUNDS, i64)),
                (AT, e.load(plan, SCRATCH, i64)), (NEEDED, needed),
                (SAVED_WHERE, e.load(plan, SAVED_AT, i64)), (THREADS, threads),
                (CONTEXTS, contexts), (SPLIT, e.load(chosen, policy.SPLIT, i64)),
                (GROUPS, e.value(arith.SelectOp(grouped, e.load(chosen, policy.GROUPS, i64),
                                                e.i64(0))))):
            e.store(value, loop_plan, field)
        call_pointer(e, e.load(plan, LOOP, PTR), e.load(plan, team, PTR), loop_plan)

    b.when(fits, call)


class HeightCall:
    """The plan of `loop`'s call (a `HeightLoop` whose `Post` is `post`)
    after the policy `chosen` (a `HeightPolicy`): its fixed fields made
    once, the rest written each call (`ready`)."""

    def __init__(self, loop: Any, post: Any, chosen: Any):
        self.loop, self.post = loop, post
        self.plan = plan = np.zeros(FIELDS, np.int64)
        plan[[POLICY_PLAN, LOOP, LOOP_PLAN, PER_ROW, SAVED]] = (
            data_address(chosen.plan), loop.address, data_address(loop.kept.plan),
            loop.native.per_row, len(post.rows.layouts) - post.tables)
        self.held = None  # both calls' contexts, for Ctrl-C (`interrupts`)

    def ready(self, inputs: Sequence[Any], rows: int, keep: list[np.ndarray],
              shared: np.ndarray) -> None:
        """The loop's plan over `inputs` and the kept outputs, for `rows`
        rows (`KeptPlan.fill`), and this call's contexts, scratch and
        `saved_at` in this plan."""
        loop, post, plan = self.loop, self.post, self.plan
        loop.kept.fill(loop, inputs, post.rows.at_least(rows), rows, keep, shared)
        native = loop.native
        plan[ONE] = loop.contexts(1).address
        plan[TEAM] = loop.contexts(loop.threads).address if loop.threads > 1 else 0
        saved_at = post.saved_at.at_least(1)[0]
        plan[SCRATCH:PER_ROW] = native.scratch_at, native.scratch.nbytes
        plan[SAVED_AT:SAVED] = data_address(saved_at), len(saved_at)
        plan[RAN] = 0

    def run(self, call: Callable[[], None], expansion: Any) -> None:
        """`call` (the numbering call), Ctrl-C stopping the loop's contexts as
        well as the expansion's (`interrupts`; the caller ends the entry)."""
        if self.held is None:
            views = [*expansion.views, *self.loop.teams[1].views, *(
                self.loop.teams[self.loop.threads].views if self.loop.threads > 1 else ())]
            self.held = SimpleNamespace(views=views)
        interrupts.begin(self.held)
        call()

    def done(self, threads: int) -> bool:
        """Whether the loop ran in the numbering call and needs no second
        try (its scratch was enough); raises its error."""
        if not self.plan[RAN]:
            return False
        loop = self.loop
        views = loop.teams[threads].views
        failed = [ctx for ctx in views if ctx.error]
        if failed and any(map(loop.native.scratch_ran_out, views)):
            return False
        loop.native.raise_error(failed[0] if failed else views[0])
        return True
