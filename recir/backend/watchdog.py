"""`timeout=` for native calls: one thread that stops calls past their deadline.

A call is stopped as Ctrl-C stops one (`interrupts.stop`): its context's
`error` becomes ERROR_TIMEOUT and its `stack_limit` goes to the top of the
address space, so the next prologue of every frame fails and the stack
unwinds (prologues load the limit atomically: a loop LLVM made of a tail
call sees it too). One thread serves every watched call (a timer thread per
call would cost ~100 us).
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from recir.backend.interrupts import stop
from recir.diagnostics import RecirError
from recir.passes.native_context import ERROR_TIMEOUT

# the longest the watchdog sleeps at once: a longer wait than the platform's
# clock can take would end its thread, and every later call's timeout with it
LONGEST_WAIT = 3600.0


class Watch:
    """The deadline of one call and the contexts it runs on now."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.contexts: list[Any] = []
        self.fired = self.finished = False


class Watchdog:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.due: list[tuple[float, int, Watch]] = []
        self.order = itertools.count()
        self.thread: threading.Thread | None = None
        self.finished = 0  # finished entries still in `due` (about)

    def watch(self, seconds: float) -> Watch:
        watch = Watch(time.monotonic() + seconds)
        with self.cond:
            if self.thread is None:
                self.thread = threading.Thread(target=self.serve, daemon=True,
                                               name="recir-watchdog")
                self.thread.start()
            heapq.heappush(self.due, (watch.deadline, next(self.order), watch))
            self.cond.notify()
        return watch

    def add(self, watch: Watch, ctx: Any) -> None:
        """`ctx` runs for `watch` from now on (stopped at once if it fired)."""
        with self.cond:
            watch.contexts.append(ctx)
            if watch.fired:
                stop(ctx, ERROR_TIMEOUT)

    def remove(self, watch: Watch, ctx: Any) -> None:
        with self.cond:
            watch.contexts.remove(ctx)

    def finish(self, watch: Watch) -> None:
        """The call is over; its entry goes when it comes up, or when
        finished entries are most of the heap (long timeouts, quick calls)."""
        with self.cond:
            watch.finished = True
            self.finished += 1
            if self.finished * 2 > len(self.due) > 64:
                self.due = [entry for entry in self.due if not entry[2].finished]
                heapq.heapify(self.due)
                self.finished = 0

    def serve(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                while self.due and (self.due[0][0] <= now or self.due[0][2].finished):
                    watch = heapq.heappop(self.due)[2]
                    if not watch.finished:
                        watch.fired = True
                        for ctx in watch.contexts:
                            stop(ctx, ERROR_TIMEOUT)
                self.cond.wait(min(self.due[0][0] - now, LONGEST_WAIT) if self.due else None)


WATCHDOG = Watchdog()


def call_within(native: Any, inputs: Sequence[Any], seconds: float) -> tuple[Any, ...]:
    """A `NativeFunction` call on one thread, stopped after `seconds`, on
    the stacks `NativeFunction.run` gives any call (gradients on a deep one,
    others retried there if their recursion ran out of this thread's)."""
    if isinstance(seconds, bool) or not (isinstance(seconds, int | float) and seconds > 0
                                         and math.isfinite(seconds)):
        raise RecirError(f"error: timeout must be a positive, finite number of seconds, "
                         f"got {seconds!r}")
    watch = WATCHDOG.watch(seconds)

    def watched(ctx: Any) -> Any:
        WATCHDOG.add(watch, ctx)
        return lambda: WATCHDOG.remove(watch, ctx)

    def once(args: list[Any], switch: bool) -> tuple[Any, Any]:
        ctx, returned = native.alone(args, switch, watched)
        if ctx.error == ERROR_TIMEOUT:
            raise RecirError(f"error: native @{native.name} did not finish within "
                             f"{seconds} s (timeout)")
        return ctx, returned

    keep: list[Any] = []
    args, results = native.arguments.prepare(inputs, keep)
    try:
        return native.arguments.outputs_of(results, native.run(
            args, 1, 0, lambda switch: once(args, switch)))
    finally:
        WATCHDOG.finish(watch)
