"""A team's rows of each height of a height loop (`schedule_loops`).

Each thread of a loop's team takes, of each height its team splits, a
block of ceil(rows / threads) rows in thread order; with groups, its
group's rows from the group table (`backend/height_groups.py`); of a
height cut into blocks (`native_schedule.in_blocks`: the loop plan's
pieces, i64[heights][4], each bound's height's first row and rows and
which block of how many it starts), block j of k of its own block of the
whole height. So the rows a thread computes at one height are the
children its rows read at the next (on a complete tree all of them),
in its own caches rather than another core's: evenly split blocks gave
each thread half of its children from the other's.
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i1, i64
from xdsl.ir import SSAValue

from recir.passes.llvm_functions import ceil_div
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.plan_functions import both

GROUPS, PIECES = 11, 12  # the loop plan's fields of the group and piece tables


class TeamShares:
    """`share` and what it takes, for a `PlanFunction` built for a team
    (`grouped`: whether the plan has groups, an i1; None off a team)."""

    grouped: SSAValue | None
    thread: SSAValue
    threads: SSAValue
    plan: SSAValue

    def share(self, e: Emitter, h: SSAValue, lo: SSAValue, hi: SSAValue,
              thread: SSAValue | None = None) -> tuple[SSAValue, SSAValue, list[SSAValue]]:
        """This thread's (or `thread`'s) rows of height h's [lo, hi), and
        the checks they need: all of them; on a team its block, its group's
        rows, or of a height cut into blocks its piece (`piece`)."""
        if self.grouped is None:
            return lo, hi, []
        thread = self.thread if thread is None else thread
        block_lo, block_hi = self.block(e, lo, e.sub(hi, lo), thread)
        slot = e.alloca(4, i64)  # the rows, then the span they must lie in
        for k, value in enumerate((block_lo, block_hi, lo, hi)):
            e.store(value, slot, k)
        at = e.add(e.mul(h, e.add(self.threads, 1)), thread)

        def group_rows(t: Emitter) -> None:
            table = t.load(self.plan, GROUPS, PTR)
            t.store(t.load(table, at, i64), slot, 0)
            t.store(t.load(table, t.add(at, 1), i64), slot, 1)

        e.when(self.grouped, group_rows)
        e.when(self.pieced(e), lambda t: self.piece(t, t.offset(
            t.load(self.plan, PIECES, PTR), t.mul(h, 4), i64), thread, slot))
        lo_, hi_, least, most = (e.load(slot, k, i64) for k in range(4))
        return lo_, hi_, [e.compare("sle", least, lo_), e.compare("sle", lo_, hi_),
                          e.compare("sle", hi_, most)]

    def pieced(self, e: Emitter) -> SSAValue:
        """Whether the team takes its heights cut into blocks by pieces."""
        assert self.grouped is not None
        pieces = e.value(llvm.PtrToIntOp(e.load(self.plan, PIECES, PTR), i64))
        return both(e, e.value(arith.XOrIOp(self.grouped, e.const(1, i1))),
                    e.compare("ne", pieces, e.i64(0)))

    def block(self, e: Emitter, lo: SSAValue, count: SSAValue, thread: SSAValue
              ) -> tuple[SSAValue, SSAValue]:
        """`thread`'s block of `count` rows from `lo`: ceil(count / threads)
        each, in thread order."""
        per = ceil_div(e, count, self.threads)
        first = e.min(e.mul(thread, per), count)
        return e.add(lo, first), e.add(lo, e.min(e.add(first, per), count))

    def piece(self, e: Emitter, record: SSAValue, thread: SSAValue, slot: SSAValue) -> None:
        """Into `slot`: of a height's block j of k (`record`: the height's
        first row and rows, j, k), `thread`'s rows, block j of k of its own
        block of the height, and the height's rows they lie in."""
        first, count, j, k = (e.load(record, f, i64) for f in range(4))
        count = e.value(arith.MaxSIOp(count, e.i64(0)))
        k = e.value(arith.MaxSIOp(k, e.i64(1)))  # (a divisor)
        mine_lo, mine_hi = self.block(e, first, count, thread)
        mine = e.sub(mine_hi, mine_lo)
        e.store(e.add(mine_lo, e.value(arith.DivSIOp(e.mul(mine, j), k))), slot, 0)
        e.store(e.add(mine_lo, e.value(arith.DivSIOp(e.mul(mine, e.add(j, 1)), k))), slot, 1)
        e.store(first, slot, 2)
        e.store(e.add(first, count), slot, 3)
