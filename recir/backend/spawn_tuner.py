"""Each team call's spawn budget, chosen from the times of earlier calls.

How many levels of a recursion should spawn tasks depends on the shape of
its call tree, which the compiler cannot see: on 2 threads a balanced
64-leaf TreeRNN tree ran fastest with one level of tasks (h=150, the team's
time 54 us against 62 at four levels: each task costs ~0.5 us and a stolen
one more), a moderately unbalanced one with six to eight, fib(35) with four
or more, and a linear one fastest on one thread, without a team at all
(budget 0: no parallelism to find, and a team's start and its idle worker
cost ~5%). So a function times its calls at a few budgets and keeps the
fastest per unit of work (the calls' sizes: a tree's node count), and every
few calls tries another, so that it follows the inputs when they change.
The budget changes only the schedule: results are the same (gradients
within rounding, whose order of addition varies on any team).
`$RECIR_SPAWN_BUDGET` fixes it instead.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from recir.diagnostics import RecirError

BUDGETS = (1, 2, 3, 4, 6, 8)
LEARN_EVERY = 2  # until every budget is measured, every 2nd call tries one
EXPLORE_EVERY = 32  # then every 32nd call tries the next budget round the list, or
# (every other time) the runner-up, whose estimate decides the close calls
WEIGHT = 0.1  # of a new time in the best budget's running estimate (timed at every call)
EXPLORED_WEIGHT = 0.3  # in another's (timed 1 call in 64 to 1 in 900)
OUTLIER = 2.0  # a time counts as at most this many times the estimate
FAR, FAR_EVERY = 1.3, 4  # a budget this much slower than the best is tried 1 time in 4
IDLE_S = 0.5e-3  # a team idle this long may have gone to sleep (libomp's KMP_BLOCKTIME, 1 ms)


class SpawnTuner:
    """Picks a budget per call (`choose`) and learns from its time (`record`),
    starting from `default` (the compiled one, `spawn_budget`). Calls from
    several threads at once may mix up which time was whose: they only
    weigh on the estimates."""

    def __init__(self, budgets: Sequence[int] = BUDGETS, fixed: int | None = None,
                 default: int = 4):
        self.budgets = tuple(budgets)
        self.fixed = fixed
        self.cost: list[float] = [math.inf] * len(self.budgets)  # seconds per unit
        self.unmeasured = len(self.budgets)
        self.best = self.budgets.index(default) if default in self.budgets else 0
        self.pick = self.best  # this call's
        self.next = self.best - 1  # the budget the last exploring call tried
        self.every = LEARN_EVERY  # how often a call tries another budget
        self.runner_up = self.best  # the budget with the lowest cost after the best's
        self.second = math.inf  # its cost
        self.calls = 0
        self.last_end = -math.inf  # when the last call ended (perf_counter)
        self.idle = False  # whether the last call started after an idle spell

    def choose(self) -> int:
        """This call's budget."""
        if self.fixed is not None:
            return self.fixed
        self.calls += 1
        if self.calls % self.every:
            self.pick = self.best
        elif not self.unmeasured and self.calls % (2 * self.every) == 0:
            self.pick = self.runner_up  # the close contest, timed most often
        else:  # the next budget; one far slower than the best only every 4th time round
            self.next = (self.next + 1) % len(self.budgets)
            far = not self.unmeasured and self.cost[self.next] > FAR * self.cost[self.best]
            lap = self.calls // (self.every * len(self.budgets))
            self.pick = self.best if far and lap % FAR_EVERY else self.next
        return self.budgets[self.pick]

    def record(self, start: float, end: float, units: int) -> None:
        """Learns from the chosen call, which ran from `start` to `end`
        (seconds) over `units` of work. A call that started more than
        `IDLE_S` after the last one ended is not counted unless that one did
        too: its team had gone to sleep, and waking it costs what no budget
        changes, unless every call pays it."""
        idle = start - self.last_end > IDLE_S
        counted = not idle or self.idle
        self.last_end, self.idle = end, idle
        if self.fixed is not None or self.calls <= 1 or not counted:
            return  # nor the first call, which warms caches up
        pick, cost = self.pick, (end - start) / max(units, 1)
        old = self.cost[pick]
        if old == math.inf:
            self.unmeasured -= 1
            if not self.unmeasured:
                self.every = EXPLORE_EVERY
        else:  # a slow spell of the host counts as one slow call
            weight = WEIGHT if pick == self.best else EXPLORED_WEIGHT
            cost = old + weight * (min(cost, OUTLIER * old) - old)
        self.cost[pick] = cost
        if pick != self.best or cost > self.second:  # the best may have changed
            self.rank()

    def rank(self) -> None:
        """The best budget and the one after it, and its cost."""
        order = sorted(range(len(self.cost)), key=self.cost.__getitem__)
        self.best = order[0]
        self.runner_up = order[1] if len(order) > 1 else order[0]
        self.second = self.cost[self.runner_up] if len(order) > 1 else math.inf


def spawn_budget(threads: int) -> int:
    """The compiled budget (what calls start from): 2^budget tasks per tree of
    a binary recursion, 8 per thread. On 2 threads TreeRNN 64-leaf trees ran
    1.2x faster than one thread at 12 levels, 1.4x at 2-4 (bench/run.py
    parallel)."""
    return 3 + max(0, threads - 1).bit_length()


def tuner(threads: int, budgets: Sequence[int] = BUDGETS) -> SpawnTuner:
    """A tuner over `budgets` for a team of `threads`, or a fixed budget where
    `$RECIR_SPAWN_BUDGET` names one (0: no tasks)."""
    fixed = os.environ.get("RECIR_SPAWN_BUDGET", "").strip()
    if not fixed:
        return SpawnTuner(budgets, default=spawn_budget(threads))
    if not fixed.isdigit():
        raise RecirError(f"error: RECIR_SPAWN_BUDGET must be a number of levels (0 or more), "
                         f"got '{fixed}'")
    return SpawnTuner(fixed=int(fixed))
