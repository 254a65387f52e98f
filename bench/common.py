"""Timing, memory and reporting helpers shared by every benchmark subcommand.

Kept free of recir imports so a benchmark can still report *why* a contestant
was skipped when the compiler (or torch) is missing or broken.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Skipped(Exception):
    """A contestant that cannot run here; the message is the printed reason."""


def cell_parser(doc: str | None, mode: str = "infer", hidden: int = 150,
                workload: str = "sst") -> argparse.ArgumentParser:
    """A tool's parser with the options of the cell it times (mode, hidden
    size, workload, batch), its description the first paragraph of `doc`."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default=mode)
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--workload", default=workload)
    parser.add_argument("--batch", type=int, default=25)
    return parser


def attempt(name: str, thunk: Callable[[], Any]) -> tuple[Any, str | None]:
    """Run `thunk`; on any error return (None, reason) and print the reason.

    Benchmarks must survive a missing or half-written contestant (recir.compile
    being developed, torch not installed) and still time everything else.
    """
    try:
        return thunk(), None
    except Exception as e:  # any failure: skip and say why
        text = str(e) if isinstance(e, Skipped) else f"{type(e).__name__}: {e}"
        reason = (text.strip().splitlines() or [type(e).__name__])[0][:300]
        print(f"  [skip] {name}: {reason}", flush=True)
        if os.environ.get("RECIR_BENCH_TRACEBACK"):
            traceback.print_exc()
        return None, reason


QUIET_WINDOW_S = 0.02  # one look at this process's CPU use
QUIET_SHARE = 0.25  # of one core over a window: below it, no other thread is busy
QUIET_MAX_S = 2.0  # a thread pool that spins longer is waited for no more


def wait_quiet(window_s: float = QUIET_WINDOW_S, max_s: float = QUIET_MAX_S) -> bool:
    """Sleep until no thread of this process uses a core: a BLAS's or an
    OpenMP runtime's workers spin for a while after a call (libomp's and
    libiomp5's `KMP_BLOCKTIME`), and while they do they take cores from the
    next contestant's team. Reads the process's CPU time over windows of
    `window_s` (the calling thread sleeps, so what is used is the others');
    True once a window used under `QUIET_SHARE` of a core, else False after
    `max_s`, with a note printed."""
    deadline = time.perf_counter() + max_s
    while True:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(window_s)
        used = time.process_time() - cpu
        if used < QUIET_SHARE * (time.perf_counter() - wall):
            return True
        if time.perf_counter() >= deadline:
            print(f"  [note] other threads of this process still busy after {max_s:g} s; "
                  "timing anyway", flush=True)
            return False


def repeat_times(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of `repeats` calls of `fn` after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


WARMUP_S = 1.0  # run.py native --quick lowers it
MAX_SPREAD = 3.0  # a contestant's repeats with max/min above this are timed again
SPREAD_RETRIES = 2  # at most this many times
# One entry per re-timed contestant: {"contestant", "spreads", "final_spread"};
# bench/suite.py reads and clears it to report which figures were redone.
SPREAD_LOG: list[dict[str, Any]] = []


def spread(times: list[float]) -> float:
    """max/min of a contestant's repeats (1.0 for a single repeat)."""
    return max(times) / min(times) if times and min(times) > 0 else 1.0


def contest_times(fns: dict[str, Callable[[], Any]], repeats: int,
                  warmup_s: float | None = None) -> dict[str, list[float]]:
    """`repeats` timed calls per contestant, one contestant after the other.

    Each first runs untimed for `warmup_s` seconds (at least once) and is then
    timed back to back, in its own steady state. Taking turns instead looked
    fairer but was not: the NumPy reference allocates ~6-11 MB per tree (it
    casts all parameters to float64) and, interleaved with torch and recir,
    kept page-faulting: 3-4x slower than on its own. Repeats whose max/min
    exceeds `MAX_SPREAD` (a noisy neighbour, not the code) are timed again, up
    to `SPREAD_RETRIES` times; each redo is recorded in `SPREAD_LOG`.
    """
    budget = WARMUP_S if warmup_s is None else warmup_s
    times: dict[str, list[float]] = {}
    for name, fn in fns.items():
        wait_quiet()  # the last contestant's threads asleep
        start = time.perf_counter()
        fn()
        while time.perf_counter() - start < budget:
            fn()
        times[name] = repeat_times(fn, repeats, warmup=0)
        spreads = [spread(times[name])]
        while spreads[-1] > MAX_SPREAD and len(spreads) <= SPREAD_RETRIES:
            times[name] = repeat_times(fn, repeats, warmup=1)
            spreads.append(spread(times[name]))
        if len(spreads) > 1:
            SPREAD_LOG.append({"contestant": name, "spreads": spreads,
                               "final_spread": spreads[-1]})
    return times


def rounds_times(fns: dict[str, Callable[[], Any]], repeats: int,
                 warmup_s: float | None = None, warmup_calls: int = 1,
                 settle: dict[str, Callable[[], Any]] | None = None,
                 each_round: Callable[[], Any] | None = None) -> dict[str, list[float]]:
    """Like `contest_times`, but in rounds: each round times every contestant
    once, so a slow spell of this shared host falls on all of them alike.
    For contestants that are the same code on different thread counts
    (`bench/parallel.py`), whose ratio is the figure. Each is first run for
    `warmup_s` and at least `warmup_calls` times. `settle[name]`, where
    given, runs untimed before that contestant's turn in each round: what
    brings it back to its steady state after the others' turns
    (`target_scaling.scaling`). `each_round`, where given, runs after each round's
    contestants (`target_scaling.settled_rounds`: the host's cores in that round)."""
    budget = WARMUP_S if warmup_s is None else warmup_s
    for fn in fns.values():
        start = time.perf_counter()
        for _ in range(warmup_calls):
            fn()
        while time.perf_counter() - start < budget:
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if settle is not None:
                settle[name]()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
        if each_round is not None:
            each_round()
    return times


def majority(picks: list[str]) -> str:
    """The mode `batching="auto"` took most often over a run's minibatches,
    marked `*` where it did not take it for all of them."""
    best = max(sorted(set(picks)), key=picks.count)
    return best if len(set(picks)) == 1 else best + "*"


def median(values: list[float]) -> float:
    return statistics.median(values)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either side was skipped."""
    return None if a is None or b is None or b == 0 else a / b


def rss_kb() -> int:
    """Resident set size of this process (VmRSS), in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def version_of(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except Exception:  # absent or broken: report None
        return None


def machine_info() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {m: version_of(m) for m in ("numpy", "llvmlite", "torch", "xdsl")},
        "threads_env": {k: os.environ.get(k) for k in
                        ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
    }


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e5:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """A plain fixed-width table: first column left-aligned, others right."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def sst_folder_or_complain() -> Any:
    """SST's folder with its train and dev splits, or None once the user is
    told how to fetch it (the sentiment scripts' first step)."""
    from recir.data import sst_folder

    folder = sst_folder("train", "dev")
    if folder is None:
        print("error: SST not found: python -m recir.data.sst fetch", file=sys.stderr)
    return folder


def c_library(source: Path, folder: str, *flags: str) -> ctypes.CDLL:
    """`source` compiled with the system `cc` into a shared library in
    `folder`, loaded; raises OSError or SubprocessError where it cannot be."""
    lib = Path(folder) / f"lib{source.stem}.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", *flags, "-o", str(lib), str(source)],
                   check=True, capture_output=True, timeout=60)
    return ctypes.CDLL(str(lib))


def write_json(path: str, data: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, default=float)
        f.write("\n")


def run_script(doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
               run: Callable[[argparse.Namespace], int]) -> int:
    """A bench script run directly (`python -m bench.NAME`): its arguments
    parsed, then `run(args)`."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args())
