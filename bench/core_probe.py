"""The cores the host gives right now: N one-thread SGEMM loops at once, N x the slowest over one alone.

A VM's virtual CPUs are the host's to place. For seconds or minutes at a
time it may run two of them on one physical core, and then every team of
ours runs at one core's speed whatever its code does: on the 2-core VM two
independent loops each ran at half speed (1.03 together over one alone)
in exactly the rounds where a frontier team's 2 threads over 1 read 1.04,
and both rose to about 2 together when the spell ended. `copies` measures
a cell's ceiling minutes away from its rounds and misses such spells;
this probe is cheap enough (about 0.2 s) to run inside each round
(`target_scaling.settled_rounds`), so that a scaling ratio is read against the
cores the host gave in the same rounds.

Each loop is a product that fits one core's L2 (B 256 x 512 floats), so it
measures the core, not memory bandwidth; a core of its own gives at least
three quarters of one alone even at all-core clocks, one shared gives half.
The slowest loop sets the figure, as the slowest thread sets a team's pace.

    python -m bench.core_probe [--copies N] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from types import TracebackType

from bench.core_rates import ONE_THREAD

FREE_SHARE = 0.75  # of N: below it the host shares cores between the N loops
FEWEST_FREE = 3  # rounds a judged ratio needs
SECONDS = 0.08
CHILD = """
import json, sys, time
import numpy as np
a, b = np.ones((64, 256), np.float32), np.ones((256, 512), np.float32)
c = a @ b
print("ready", flush=True)
for line in sys.stdin:
    seconds = float(line)
    count, begin = 0, time.perf_counter()
    while time.perf_counter() - begin < seconds:
        np.matmul(a, b, out=c)
        count += 1
    print(json.dumps(count / (time.perf_counter() - begin)), flush=True)
"""


class CoreProbe:
    """`with CoreProbe(n) as probe:` ... `probe.ceiling()`: n for a host
    that gives n cores of their own."""

    def __init__(self, copies: int, seconds: float = SECONDS) -> None:
        self.seconds = seconds
        self.children = [subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env={**os.environ, **ONE_THREAD}) for _ in range(copies)]
        for child in self.children:
            if child.stdout is None or child.stdout.readline().strip() != "ready":
                self.close()
                raise RuntimeError("a core probe's loop did not start")

    def rates(self, children: list[subprocess.Popen[str]]) -> list[float]:
        for child in children:  # all started before any is read
            assert child.stdin is not None
            child.stdin.write(f"{self.seconds}\n")
            child.stdin.flush()
        return [float(json.loads(child.stdout.readline())) for child in children
                if child.stdout is not None]

    def ceiling(self) -> float:
        """N x the slowest loop's rate at once over one loop's alone: a team
        with even shares waits at each barrier for its slowest thread, so a
        core the host slows by half halves it, where the loops' sum would
        still read 1.5 for two (as `copies` reckons it)."""
        alone = self.rates(self.children[:1])[0]
        together = self.rates(self.children)
        return len(together) * min(together) / alone

    def cpu_seconds(self) -> float:
        """The loops' CPU time so far (`HostLoad`'s `ours`): 0 for one
        whose counts cannot be read."""
        used = 0
        for child in self.children:
            try:
                with open(f"/proc/{child.pid}/stat") as f:
                    fields = f.read().rsplit(") ", 1)[1].split()
                used += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, IndexError, ValueError):
                pass
        return used / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        for child in self.children:
            if child.stdin is not None:
                child.stdin.close()
            child.wait()

    def __enter__(self) -> CoreProbe:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def started(copies: int) -> CoreProbe | None:
    """A probe of `copies` loops, or None (the reason printed) where one
    cannot start: the rounds are then all taken as the host's own."""
    try:
        return CoreProbe(copies)
    except (OSError, RuntimeError, ValueError) as error:
        print(f"no core probe: {error}", flush=True)
        return None


def each_round(probe: CoreProbe, cores: list[float]) -> Callable[[], None]:
    """A `rounds_times` `each_round` that appends to `cores` each round's
    lesser of the probes just before and just after it: a spell that starts
    or ends within a round marks it shared. The first probe is taken now."""
    last = probe.ceiling()

    def probed() -> None:
        nonlocal last
        now = probe.ceiling()
        cores.append(min(last, now))
        last = now

    return probed


def free(ceiling: float, copies: int) -> bool:
    """Whether a round's probe says the host gave `copies` cores of their own."""
    return ceiling >= FREE_SHARE * copies


def free_rounds(ceilings: list[float], copies: int, rounds: int) -> list[int]:
    """The rounds to judge a ratio on: those the probe found free, all where
    there was no probe, none where fewer than `FEWEST_FREE` were free."""
    if not ceilings:
        return list(range(rounds))
    kept = [i for i, found in enumerate(ceilings) if free(found, copies)]
    return kept if len(kept) >= FEWEST_FREE else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with CoreProbe(args.copies) as probe:
        for _ in range(args.rounds):
            found = probe.ceiling()
            print(f"{args.copies} loops at once / one alone: {found:.2f}"
                  f"{'' if free(found, args.copies) else ' (cores shared)'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
