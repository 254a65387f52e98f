"""The cores' cache-line round trip: what a team pays to hand data between threads.

Two threads pinned to cores a and b hand one cache line back and forth
(`core_latency.c`, built with the system `cc`); the time per round trip is
how long a line one core wrote takes to reach the other and come back. On
one die with a shared L3 that is tens of nanoseconds; across L3 caches
(AMD's CCXs, a VM whose virtual CPUs the host places on either) several
hundred, and every line a team's threads pass each other (a table's rows,
the gradients' copies, the workers' wake-up) costs that much more. The
host's ceiling (`copies`: independent processes) does not see it, so
`targets` prints it beside each scaling row:

    python -m bench.core_latency [--rounds 20000]

prints core 0's (the first core this process may run on) round trip to
each other core.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from bench.common import c_library

SOURCE = Path(__file__).resolve().parent / "core_latency.c"


@cache
def library() -> Any:
    """`round_trip_ns(a, b, rounds)` built with `cc`; None where it cannot be."""
    with tempfile.TemporaryDirectory() as folder:  # (loaded, the file may go)
        try:
            function = c_library(SOURCE, folder, "-pthread").round_trip_ns
        except (OSError, subprocess.SubprocessError):
            return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long]
    function.restype = ctypes.c_double
    return function


def round_trips(rounds: int = 20000) -> dict[int, float]:
    """The first allowed core's round trip to each other allowed core, in ns
    (empty where there is one core, or no `cc`, or a thread was not pinned)."""
    function = library()
    cores = sorted(os.sched_getaffinity(0))
    if function is None or len(cores) < 2:
        return {}
    found = {b: function(cores[0], b, rounds) for b in cores[1:]}
    return {} if any(ns < 0 for ns in found.values()) else found


def describe(found: dict[int, float]) -> str:
    """`round_trips`' spread: "min-max ns (median m)", one pair's "n ns",
    or "unknown"."""
    if not found:
        return "unknown"
    values = list(found.values())
    if len(values) == 1:
        return f"{values[0]:.0f} ns"
    return f"{min(values):.0f}-{max(values):.0f} ns (median {statistics.median(values):.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20000)
    args = parser.parse_args()
    found = round_trips(args.rounds)
    for core, ns in found.items():
        print(f"core {min(os.sched_getaffinity(0))} <-> {core}: {ns:.0f} ns")
    print(f"cores' round trip {describe(found)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
