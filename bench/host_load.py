"""What else the host ran while a benchmark timed: other processes' CPU and the hypervisor's steal.

A ratio of two thread counts timed on a shared machine is only as good as
the cores it had. `HostLoad` reads the machine's CPU time (`/proc/stat`)
and this process's (its waited-for children's too) around a span, and
gives the cores that other processes used through it, on average, and the
share of all CPUs' time that the hypervisor gave to other guests (steal).
A row timed while either was high did not have the cores it counts:
`targets` prints both beside each scaling row.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

STAT = "/proc/stat"
# /proc/stat's "cpu" fields: user nice system idle iowait irq softirq steal
BUSY, STEAL = (0, 1, 2, 5, 6), 7


def machine_jiffies(path: str = STAT) -> tuple[int, int, int] | None:
    """All CPUs' busy, steal and total clock ticks since boot (None off Linux)."""
    try:
        with open(path) as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) <= STEAL:
        return None
    return sum(fields[k] for k in BUSY), fields[STEAL], sum(fields[:STEAL + 1])


def own_seconds() -> float:
    """CPU seconds of this process and the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class HostLoad:
    """`with HostLoad() as load:` ... then `load.others` (cores other
    processes used through the span, on average) and `load.steal` (the
    hypervisor's share of all CPUs' time); both None where the machine's
    counts cannot be read."""

    others: float | None = None
    steal: float | None = None

    def __init__(self, path: str = STAT, ours: Callable[[], float] = lambda: 0.0):
        """`ours`: CPU seconds of running children that are part of the
        measure (`core_probe`'s loops), not other processes."""
        self.path, self.ours = path, ours
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __enter__(self) -> HostLoad:
        self.start = (machine_jiffies(self.path), own_seconds() + self.ours(),
                      time.perf_counter())
        return self

    def __exit__(self, *exc: Any) -> None:
        end = (machine_jiffies(self.path), own_seconds() + self.ours(), time.perf_counter())
        (first, own0, wall0), (last, own1, wall1) = self.start, end
        if first is None or last is None or wall1 <= wall0:
            return
        busy, steal, total = (b - a for a, b in zip(first, last, strict=True))
        self.others = max(0.0, (busy / self.tick - (own1 - own0)) / (wall1 - wall0))
        self.steal = steal / total if total > 0 else 0.0

    def describe(self) -> str:
        if self.others is None or self.steal is None:
            return "host load unknown"
        return f"other processes {self.others:.2f} cores, steal {100 * self.steal:.1f}%"
