"""The height-order kernel's swaps between groups: `policy.swapped` natively.

LPT (`height_order.group_keys`) leaves a team's fullest group over its
emptiest by up to the last tree it gave the fullest, and a team call waits
at its join for the fullest. Each of T passes finds those two groups (each the
lowest on a tie) and the pair of their trees whose swap leaves them
closest (the first in tree order), and swaps it where that brings them
closer. No pass where the batch's pairs are more than
`policy.SWAP_PAIRS_PER_UNIT` a row: the search stays a small part of the
call.
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects import arith
from xdsl.dialects.builtin import i64
from xdsl.ir import SSAValue

from recir.backend.policy import SWAP_PAIRS_PER_UNIT
from recir.passes.loop_builder import Emitter


def swap_passes(b: Emitter, n: SSAValue, batch: SSAValue, team: SSAValue, sizes: SSAValue,
                group_of: SSAValue, loads: SSAValue) -> None:
    """The passes over each tree's rows `sizes`, its group `group_of` and
    each group's rows `loads` (i64 tables, the last two updated)."""
    best = b.alloca(3, i64)  # the closest two groups' rows so far, and its two trees

    def extremes(e: Emitter, g: SSAValue, carried: Any) -> list[SSAValue]:
        full, most, empty, least = carried
        load = e.load(loads, g, i64)
        more, less = e.compare("sgt", load, most), e.compare("slt", load, least)
        return [select(e, more, g, full), select(e, more, load, most),
                select(e, less, g, empty), select(e, less, load, least)]

    def one_pass(e: Emitter, _: SSAValue) -> None:
        first = e.load(loads, 0, i64)
        full, most, empty, least = e.loop(team, extremes, [e.i64(0), first, e.i64(0), first])
        spread = e.sub(most, least)
        e.store(spread, best, 0)
        e.store(e.i64(-1), best, 1)

        def pair(f: Emitter, a: SSAValue, t: SSAValue) -> None:
            gap = f.sub(spread, f.mul(f.sub(f.load(sizes, a, i64), f.load(sizes, t, i64)), 2))
            apart = select(f, f.compare("slt", gap, 0), f.sub(0, gap), gap)
            closer = f.value(arith.AndIOp(f.compare("eq", f.load(group_of, t, i64), empty),
                                          f.compare("slt", apart, f.load(best, 0, i64))))

            def keep(g: Emitter) -> None:
                for k, value in enumerate((apart, a, t)):
                    g.store(value, best, k)

            f.when(closer, keep)

        e.each(batch, lambda f, a: f.when(
            f.compare("eq", f.load(group_of, a, i64), full),
            lambda g: g.each(batch, lambda h, t: pair(h, a, t))))
        a, t = e.load(best, 1, i64), e.load(best, 2, i64)

        def swap(f: Emitter) -> None:
            moved = f.sub(f.load(sizes, a, i64), f.load(sizes, t, i64))
            f.store(empty, group_of, a)
            f.store(full, group_of, t)
            f.store(f.sub(most, moved), loads, full)
            f.store(f.add(least, moved), loads, empty)

        e.when(e.compare("sge", a, 0), swap)

    few = b.compare("sle", b.mul(batch, batch), b.mul(n, SWAP_PAIRS_PER_UNIT))
    b.each(select(b, few, team, b.i64(0)), one_pass)


def select(b: Emitter, condition: SSAValue, yes: SSAValue, no: SSAValue) -> SSAValue:
    return b.value(arith.SelectOp(condition, yes, no))
