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

A gradient's `_bwd` loop follows its `_fwd`'s in the same call where
Python made its plan ready too (`NativeBackward.ready`): once the `_fwd`
has run with every thread's context clear, the `_bwd`'s call places the
loss's cotangent rows at the roots' rows of its gradient tables (the
`seeds`) and runs as the `_fwd` ran, reading the `saved_at` it wrote.

Plan, 8-byte fields: the policy's plan, the loop's entry, its plan, the
contexts of one thread and of the loop's team, the scratch and its bytes,
the scratch a row takes, `saved_at` and its entries, the values the loop
saves (a `_bwd`: 0, it reads them), then, written, whether the loop ran;
then the next call's plan (0: none), the roots, the height order's inverse
(i32, each expansion row's row), and the seeds: their count and table, a
record of four fields each (the cotangent's data, the table's, a row's
bytes, the table's rows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import i8, i32, i64
from xdsl.ir import SSAValue

from recir.backend import interrupts
from recir.backend.array_address import data_address
from recir.backend.kernels import height_policy as policy
from recir.passes.height_shares import GROUPS, PIECES
from recir.passes.llvm_functions import call_pointer, ceil_div
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import CONTEXT_BYTES, ERROR_OFFSET
from recir.passes.rows import ALIGN

(POLICY_PLAN, LOOP, LOOP_PLAN, ONE, TEAM, SCRATCH, SCRATCH_BYTES, PER_ROW, SAVED_AT,
 SAVED_AT_SIZE, SAVED, RAN, NEXT, ROOTS, INV, SEEDS, SEED_TABLE) = range(17)
FIELDS = 17
SEED_FIELDS = 4  # a seed's record: cotangent, table, row bytes, table rows
# the loop plan's header (`passes/schedule_loops.py`, `HeightLoop.__call__`; its
# group and piece tables: `height_shares`)
HEIGHTS, BOUNDS, AT, NEEDED, SAVED_WHERE, THREADS, CONTEXTS, SPLIT = range(8)


def height_call(b: Emitter, plan: SSAValue, then: bool = True) -> None:
    """The loop's header from the policy's choice, and the loop's call
    where its scratch and `saved_at` hold what the choice needs; `then`:
    the next call's after it, where there is one and the loop failed on no
    thread."""
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
        for field in range(PIECES + 1):
            e.store(e.i64(0), loop_plan, field)
        for field, value in (
                (HEIGHTS, heights), (BOUNDS, e.load(chosen, policy.BOUNDS, i64)),
                (AT, e.load(plan, SCRATCH, i64)), (NEEDED, needed),
                (SAVED_WHERE, e.load(plan, SAVED_AT, i64)), (THREADS, threads),
                (CONTEXTS, contexts), (SPLIT, e.load(chosen, policy.SPLIT, i64)),
                (GROUPS, e.value(arith.SelectOp(grouped, e.load(chosen, policy.GROUPS, i64),
                                                e.i64(0)))),
                (PIECES, e.value(arith.SelectOp(grouped, e.i64(0),
                                                e.load(chosen, policy.PIECES, i64))))):
            e.store(value, loop_plan, field)
        seeds(e, plan)
        call_pointer(e, e.load(plan, LOOP, PTR), e.load(plan, team, PTR), loop_plan)
        if then:
            clear = e.compare("eq", errors(e, e.load(plan, team, PTR), threads), 0)
            following = e.compare("ne", e.load(plan, NEXT, i64), 0)
            e.when(e.value(arith.AndIOp(clear, following)),
                   lambda f: height_call(f, f.load(plan, NEXT, PTR), then=False))

    b.when(fits, call)


def errors(b: Emitter, contexts: SSAValue, threads: SSAValue) -> SSAValue:
    """The threads' contexts' errors, or'ed (i64; 0: none failed)."""
    def each(e: Emitter, t: SSAValue, found: Sequence[SSAValue]) -> tuple[SSAValue]:
        at = e.offset(contexts, e.add(e.mul(t, CONTEXT_BYTES), ERROR_OFFSET), i8)
        return (e.value(arith.OrIOp(found[0], e.to_i64(e.load(at, 0, i32)))),)

    return b.loop(threads, each, [b.i64(0)])[0]


def seeds(b: Emitter, plan: SSAValue) -> None:
    """Each seed's cotangent rows, the roots', into its table at their rows
    in height order (`inv`); a row outside the table is left out."""
    roots, inv, table = b.load(plan, ROOTS, i64), b.load(plan, INV, PTR), b.load(
        plan, SEED_TABLE, PTR)

    def seed(e: Emitter, k: SSAValue) -> None:
        first = e.mul(k, SEED_FIELDS)
        source, target = e.load(table, first, PTR), e.load(table, e.add(first, 1), PTR)
        width, rows = e.load(table, e.add(first, 2), i64), e.load(table, e.add(first, 3), i64)

        def row(f: Emitter, r: SSAValue) -> None:
            at = f.to_i64(f.load(inv, r, i32))
            f.when(f.compare("ult", at, rows), lambda g: g.move(
                g.offset(target, g.mul(at, width), i8), g.offset(source, g.mul(r, width), i8),
                width, i8))

        e.each(roots, row)

    b.each(b.load(plan, SEEDS, i64), seed)


class HeightCall:
    """The plan of `loop`'s call (a `HeightLoop` whose `Post` is `post`)
    after the policy `chosen` (a `HeightPolicy`): its fixed fields made
    once, the rest written each call (`ready`). `saves`: False for a
    `_bwd`, which reads what its `_fwd` saved."""

    def __init__(self, loop: Any, post: Any, chosen: Any, saves: bool = True):
        self.loop, self.post = loop, post
        self.plan = plan = np.zeros(FIELDS, np.int64)
        plan[[POLICY_PLAN, LOOP, LOOP_PLAN, PER_ROW, SAVED]] = (
            data_address(chosen.plan), loop.address, data_address(loop.kept.plan),
            loop.native.per_row, len(post.rows.layouts) - post.tables if saves else 0)
        self.next: HeightCall | None = None  # the call after this one (`NEXT`)
        self.seed_table = np.zeros(0, np.int64)  # kept while this call's plan points at it
        self.held: tuple[Any, Any] | None = None  # the calls' contexts, for Ctrl-C (`interrupts`)

    def ready(self, inputs: Sequence[Any], outputs: Sequence[Any], rows: int,
              keep: list[np.ndarray], shared: np.ndarray) -> None:
        """The loop's plan over `inputs` and `outputs` (kept arrays), for
        `rows` rows (`KeptPlan.fill`), and this call's contexts, scratch and
        `saved_at` in this plan; no next call until one is given."""
        loop, post, plan = self.loop, self.post, self.plan
        loop.kept.fill(loop, inputs, outputs, rows, keep, shared)
        native = loop.native
        plan[ONE] = loop.contexts(1).address
        plan[TEAM] = loop.contexts(loop.threads).address if loop.threads > 1 else 0
        saved_at = post.saved_at.at_least(1)[0]
        plan[SCRATCH:PER_ROW] = native.scratch_at, native.scratch.nbytes
        plan[SAVED_AT:SAVED] = data_address(saved_at), len(saved_at)
        plan[RAN] = plan[NEXT] = plan[SEEDS] = 0
        self.next = None

    def then(self, following: HeightCall) -> None:
        """`following` (made ready) runs after this call's loop in its call."""
        self.next = following
        self.plan[NEXT] = data_address(following.plan)

    def seed(self, roots: int, inv: np.ndarray, seeds: Sequence[tuple[np.ndarray, np.ndarray]]
             ) -> None:
        """Before the loop, each (cotangent, table)'s `roots` rows into the
        table's rows `inv[:roots]` (i32; C-contiguous arrays of one row
        shape, kept by the caller through the call)."""
        count = SEED_FIELDS * len(seeds)
        if len(self.seed_table) < count:
            self.seed_table = np.zeros(count, np.int64)
        self.seed_table[:count] = [field for c, t in seeds for field in (
            data_address(c), data_address(t), c.strides[0], len(t))]
        self.plan[ROOTS:] = roots, data_address(inv), len(seeds), data_address(self.seed_table)

    def run(self, call: Callable[[], None], expansion: Any) -> None:
        """`call` (the numbering call), Ctrl-C stopping the loops' contexts as
        well as the expansion's (`interrupts`; the caller ends the entry)."""
        if self.held is None or self.held[0] is not self.next:
            calls = [self] if self.next is None else [self, self.next]
            views = [*expansion.views, *(ctx for c in calls for ctx in c.loop.teams[1].views),
                     *(ctx for c in calls if c.loop.threads > 1
                       for ctx in c.loop.teams[c.loop.threads].views)]
            self.held = (self.next, SimpleNamespace(views=views))
        interrupts.begin(self.held[1])
        call()

    def done(self, threads: int) -> bool:
        """Whether the loop ran in the numbering call and needs no second
        try (its scratch was enough; a loop that zeroes what it reads has
        no second try); raises its error."""
        if not self.plan[RAN]:
            return False
        loop = self.loop
        views = loop.teams[threads].views
        failed = [ctx for ctx in views if ctx.error]
        if failed and not loop.clears and any(map(loop.native.scratch_ran_out, views)):
            return False
        loop.native.raise_error(failed[0] if failed else views[0])
        return True
