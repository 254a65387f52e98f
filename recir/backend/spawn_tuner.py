"""Each team call's spawn budget, chosen from the times of earlier calls.

How many levels of a recursion should spawn tasks depends on the shape of
its call tree, which the compiler cannot see: on 2 threads a balanced
64-leaf TreeRNN tree ran fastest with one level of tasks (h=150, the team's
time 57 us against 67 at four levels: each task costs ~0.5 us and a stolen
one more), a moderately unbalanced one with eight (76 against 78), fib(35)
with four or more. So a function on a team times its calls at a few budgets
and keeps the fastest per unit of work (the calls' sizes: a tree's node
count), and every few calls tries a budget beside it, so that it follows
the inputs when they change. The budget changes only the schedule: results
are the same (gradients within rounding, whose order of addition varies
on any team). `$RECIR_SPAWN_BUDGET` fixes it instead.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from recir.diagnostics import RecirError

BUDGETS = (1, 2, 3, 4, 6, 8)
EXPLORE_EVERY = 16  # every 16th call tries the next budget round the list
WEIGHT = 0.1  # of a new time in a budget's running estimate
OUTLIER = 2.0  # a time counts as at most this many times the estimate
IDLE_S = 0.5e-3  # a team idle this long may have gone to sleep (libomp's KMP_BLOCKTIME, 1 ms)


class SpawnTuner:
    """Picks a budget per call (`choose`) and learns from its time (`record`)."""

    def __init__(self, budgets: Sequence[int] = BUDGETS, fixed: int | None = None):
        self.budgets = tuple(budgets)
        self.fixed = fixed
        self.cost: list[float] = [math.inf] * len(self.budgets)  # seconds per unit
        self.measured = [False] * len(self.budgets)
        self.best = 0
        self.calls = 0
        self.next = -1  # the budget the last exploring call tried
        self.last_end = -math.inf  # when the last call ended (perf_counter)

    def choose(self) -> int:
        """The index into `budgets` of this call's budget (-1: `fixed`)."""
        if self.fixed is not None:
            return -1
        self.calls += 1
        if self.calls % EXPLORE_EVERY and all(self.measured):
            return self.best
        self.next = (self.next + 1) % len(self.budgets)
        return self.next

    def budget(self, index: int) -> int:
        return self.fixed if index < 0 else self.budgets[index]  # type: ignore[return-value]

    def record(self, index: int, start: float, end: float, units: int) -> None:
        """Learns from a call at `budgets[index]` that ran from `start` to
        `end` (seconds) over `units` of work. A call that started more than
        `IDLE_S` after the last one ended is not counted: its team had gone
        to sleep, and waking it costs what no budget changes."""
        idle, self.last_end = start - self.last_end, end
        if index < 0 or self.calls <= len(self.budgets) or idle > IDLE_S:
            return  # the first round warms caches up: not counted either
        cost = (end - start) / max(units, 1)
        old = self.cost[index]
        if self.measured[index]:  # a slow spell of the host counts as one slow call
            cost = old + WEIGHT * (min(cost, OUTLIER * old) - old)
        self.cost[index] = cost
        self.measured[index] = True
        if index == self.best and cost > old:  # the best got slower: look again
            self.best = min(range(len(self.cost)), key=self.cost.__getitem__)
        elif cost < self.cost[self.best]:
            self.best = index


def tuner() -> SpawnTuner:
    """A tuner, or a fixed budget where `$RECIR_SPAWN_BUDGET` names one (0:
    the compiled default, `pipeline.spawn_budget`)."""
    fixed = os.environ.get("RECIR_SPAWN_BUDGET", "").strip()
    if not fixed:
        return SpawnTuner()
    if not fixed.isdigit():
        raise RecirError(f"error: RECIR_SPAWN_BUDGET must be a number of levels (0 or more), "
                         f"got '{fixed}'")
    return SpawnTuner(fixed=int(fixed))
