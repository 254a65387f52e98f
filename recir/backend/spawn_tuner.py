"""Each team call's spawn budget, chosen from the times of earlier calls.

How many levels of a recursion should spawn tasks depends on the shape of
its call tree, which the compiler cannot see: on 2 threads a balanced
64-leaf TreeRNN tree ran fastest with one level of tasks (each task and
each steal has a cost), a moderately unbalanced one with six to eight, fib(35) with four
or more, and a linear one fastest on one thread, without a team at all
(budget 0: no parallelism to find, and a team's start and its idle worker
cost a few percent). So a function times its calls at a few budgets and keeps the
fastest per unit of work (the calls' sizes: a tree's node count), and every
few calls tries another, so that it follows the inputs when they change.
One thread wins a close contest: its times count 5% less, since a team
takes a second core and, where it finds no parallelism, costs a little
(linear TreeLSTM trees' gradients on 2 threads), and single times spread
as much. The budget changes only the schedule: results
are the same (gradients within rounding, whose order of addition varies on
any team).
`$RECIR_SPAWN_BUDGET` fixes it instead.

Calls from several Python threads at once share a function's tuner: one
call at a time is timed (`claim` takes the tuner's lock without waiting,
`release` gives it back), the others run the best budget untimed. Their
times would mix in the contention for cores, and a shared `pick` could say
another call's budget.
"""

from __future__ import annotations

import math
import os
import threading
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
CHANGE = 1.25  # the best's time moved this much since all were measured: measure them again
ALONE_HANDICAP = 1.05  # one thread (budget 0) counts this much faster: a team must win by 5%
IDLE_S = 0.5e-3  # a team idle this long may have gone to sleep (libomp's KMP_BLOCKTIME, 1 ms)


class SpawnTuner:
    """Picks a budget per call (`choose`) and learns from its time (`record`),
    starting from `default` (the compiled one, `spawn_budget`). The best
    budget's time is a running estimate; every other budget's is kept
    relative to it, each time over the best's estimate when it was taken, so
    that a slow or fast spell of the host weighs on both sides of the
    comparison. Only the call that `claim`ed it is timed."""

    def __init__(self, budgets: Sequence[int] = BUDGETS, fixed: int | None = None,
                 default: int = 4):
        self.budgets = tuple(budgets)
        self.fixed = fixed
        self.base = math.inf  # the best budget's seconds per unit
        self.rel = [math.inf] * len(self.budgets)  # each budget's over the best's
        self.unmeasured = len(self.budgets)
        self.best = self.budgets.index(default) if default in self.budgets else 0
        self.pick = self.best  # this call's
        self.next = self.best - 1  # the budget the last exploring call tried
        self.every = LEARN_EVERY  # how often a call tries another budget
        self.runner_up = self.best  # the budget with the lowest time after the best's
        self.calls = 0
        self.warm = [False] * len(self.budgets)  # whether a budget has run once
        self.team_end = -math.inf  # when its last call on a team ended (perf_counter)
        self.idle = False  # whether the last call's team had been idle
        self.again = False  # whether the next call runs the last one's budget again
        self.anchor = math.inf  # the best's time when every budget was last measured
        self.timing = threading.Lock()  # held by the call being timed (`claim`)

    def claim(self) -> tuple[int, bool]:
        """This call's budget, and whether the call is timed: then it holds
        the tuner until `release` (after its `record`, if it ran). A call
        that finds another being timed runs the best budget, untimed."""
        if self.fixed is not None:
            return self.fixed, False
        if not self.timing.acquire(blocking=False):
            return self.budgets[self.best], False
        return self.choose(), True

    def release(self, timed: bool) -> None:
        """Ends a `claim`ed call (after its `record`, or without one if it failed)."""
        if timed:
            self.timing.release()

    @property
    def cost(self) -> list[float]:
        """Each budget's estimated seconds per unit."""
        return [r * self.base for r in self.rel]

    def choose(self) -> int:
        """This call's budget."""
        if self.fixed is not None:
            return self.fixed
        self.calls += 1
        if self.again:  # the last call woke its team: time this budget awake
            self.again = False
        elif self.calls % self.every:
            self.pick = self.best
        elif not self.unmeasured and self.calls % (2 * self.every) == 0:
            self.pick = self.runner_up  # the close contest, timed most often
        else:  # the next budget; one far slower than the best only every 4th time round
            self.next = (self.next + 1) % len(self.budgets)
            far = not self.unmeasured and self.rel[self.next] > FAR
            lap = self.calls // (self.every * len(self.budgets))
            self.pick = self.best if far and lap % FAR_EVERY else self.next
        return self.budgets[self.pick]

    def record(self, start: float, end: float, units: int,
               team_ended: float | None = None) -> None:
        """Learns from the chosen call, which ran from `start` to `end`
        (seconds) over `units` of work. A team call that started more than
        `IDLE_S` after the last team call ended (`team_ended`: the process's
        last, default this tuner's) is not counted, unless the call before
        it found its team idle too: its team had gone to sleep, and waking it
        costs what no budget changes, unless every call pays it. The next
        call runs the same budget again, on a team awake: else, while one
        thread (budget 0) was best, every team budget was timed waking a
        team that had slept through the one-thread call before it (25-45
        us)."""
        if self.fixed is not None:
            return
        pick = self.pick
        on_team = self.budgets[pick] != 0
        idle = on_team and start - (self.team_end if team_ended is None else team_ended) > IDLE_S
        counted = not idle or self.idle
        self.idle = idle
        if on_team:
            self.team_end = end
        if not counted:
            self.again = True
            return
        # nor a budget's first call, which warms caches and its team's contexts
        # up (a gradient's tape arena page-faults: slower than the next call)
        if not self.warm[pick]:
            self.warm[pick] = True
            return
        cost = (end - start) / max(units, 1)
        if not on_team:  # (a tie goes to one thread: linear trees)
            cost /= ALONE_HANDICAP
        if self.rel[pick] == math.inf:
            self.unmeasured -= 1
            if not self.unmeasured:
                self.every, self.anchor = EXPLORE_EVERY, self.base
        if self.base == math.inf:  # the first time counted
            self.best, self.base, self.rel[pick] = pick, cost, 1.0
        elif pick == self.best:  # a slow spell of the host counts as one slow call
            self.base += WEIGHT * (min(cost, OUTLIER * self.base) - self.base)
            if not self.unmeasured and not 1 / CHANGE < self.base / self.anchor < CHANGE:
                self.relearn()  # other inputs: the others' times relative to the best
                                # may have changed as much
        else:
            ratio, old = cost / self.base, self.rel[pick]
            self.rel[pick] = ratio if old == math.inf else old + EXPLORED_WEIGHT * (
                min(ratio, OUTLIER * old) - old)
            if self.rel[pick] < 1.0:  # faster than the best: the new best
                faster = self.rel[pick]
                self.base *= faster
                self.rel = [r / faster for r in self.rel]
                self.best = pick
            # (only here do the others' estimates change: the best's own
            # calls, most calls, skip this)
            others = [i for i in range(len(self.rel)) if i != self.best]
            self.runner_up = min(others, key=self.rel.__getitem__) if others else self.best

    def relearn(self) -> None:
        """Times every other budget again, as at the start."""
        self.rel = [1.0 if i == self.best else math.inf for i in range(len(self.rel))]
        self.unmeasured, self.every = len(self.rel) - 1, LEARN_EVERY


def spawn_budget(threads: int) -> int:
    """The compiled budget (what calls start from): 2^budget tasks per tree of
    a binary recursion, 8 per thread. On 2 threads TreeRNN 64-leaf trees gain
    more from 2-4 levels than from 12 (`python bench/run.py parallel`)."""
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
