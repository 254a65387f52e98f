"""Native height loops of the frontier TreeLSTM on 1 and N threads, on a shared host.

Issue 33's "N threads over 1" for frontier batching is a ratio of two
timings that another process on a shared host distorts unevenly: while it
holds a core, two of a team's threads share one and the team's call runs
at the pace of the slower (on 2 cores about as slowly as one thread), and
the one-thread call barely notices. So both forms of one model run in one process, in alternating
chunks of calls, and a chunk is dropped where this process's threads waited
runnable (`/proc/self/task/*/schedstat`, Linux) for more than `--waited` of
its time: what is left was timed with the cores free. Only the native
calls that run the height loops (`@post`, `_fwd`, `_bwd`:
`native_loops.HeightLoop`, and the numbering call, which runs a `@post`'s
or `_fwd`'s loop, and a `_bwd` after it, after the expansion and the
height order) are timed, besides each call's wall time: Python around
them does not split across threads.

    .venv/bin/python -m bench.native_scaling --mode infer --calls 300
    .venv/bin/python -m bench.native_scaling --threads 16 --hidden 256 --workload complete-128
    .venv/bin/python -m bench.native_scaling --mode train --hidden 256 --workload complete-128

With `--work` the OpenMP workers sleep as soon as they are idle
(`OMP_WAIT_POLICY=passive`, block time 0), so each thread's CPU time is
the work it did, and it prints the
CPU a call takes on 1 and N threads: work that grows on N threads (each
thread streaming the weights at every height, the copies' sums) beside
what the calling thread runs alone, and the least, median and most CPU of
the other threads that worked: where a height's rows are split evenly, a
thread far above the median runs on a slower core (a busy sibling, a
neighbour's load), and the team waits for it at every barrier.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.batching import keep_freed_memory, make_params, recir_frontier, workload
from bench.common import cell_parser
from recir import configure_runtime
from recir.backend import native_loops, native_schedule
from recir.backend.kernels import numbering

CHUNK = 10  # calls timed together between two looks at the threads' waits


def schedstat(field: int) -> dict[int, int] | None:
    """Each thread's field of /proc's schedstat, by thread id: 0, its
    nanoseconds on a CPU; 1, waiting runnable (None off Linux)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    found = {}
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                found[int(task)] = int(f.read().split()[field])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended
    return found


def waited_ns() -> int | None:
    """Nanoseconds this process's threads have waited runnable (None off Linux)."""
    found = schedstat(1)
    return None if found is None else sum(found.values())


def thread_cpu_ns() -> dict[int, int]:
    """Each thread's nanoseconds on a CPU so far, by thread id (empty off Linux)."""
    return schedstat(0) or {}


def work_split(before: dict[int, int], after: dict[int, int], caller: int
               ) -> tuple[float, float]:
    """Seconds on a CPU between two `thread_cpu_ns` looks: the calling
    thread's and every other thread's together."""
    spent = {t: after[t] - before.get(t, 0) for t in after}
    own = spent.pop(caller, 0)
    return own * 1e-9, sum(spent.values()) * 1e-9


def workers_spread(before: dict[int, int], after: dict[int, int], caller: int
                   ) -> tuple[float, float, float]:
    """The least, median and most seconds on a CPU of the threads besides
    the calling one that worked between two `thread_cpu_ns` looks (a
    twentieth of the busiest's or more: not the idle threads of other
    pools): with workers asleep once idle and rows split evenly, a thread
    that takes longer than the others for the same rows runs on a slower
    core, and the team waits for it at every barrier."""
    spent = [after[t] - before.get(t, 0) for t in after if t != caller]
    busiest = max(spent, default=0)
    busy = sorted(v * 1e-9 for v in spent if busiest and v * 20 >= busiest)
    if not busy:
        return (float("nan"),) * 3
    return busy[0], statistics.median(busy), busy[-1]


def timed_loops(spent: Any, clock: Callable[[], float] = time.perf_counter
                ) -> Callable[[], None]:
    """Makes each HeightLoop made from now on, and the numbering call (which
    runs a `@post`'s or `_fwd`'s loop once that loop has run, and a `_bwd`
    after it, after the expansion and the height order:
    `kernels/height_call`), add their
    native calls' seconds by `clock` to `spent[0]`; returns the undo."""
    made, kernel = native_loops.NativeLoop.__init__, numbering.numbering_kernel()

    def number(*call: Any) -> None:
        start = clock()
        kernel(*call)
        spent[0] += clock() - start

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        if isinstance(self, native_loops.HeightLoop):
            function = self.function

            def timed(*call: Any) -> None:
                start = clock()
                function(*call)
                spent[0] += clock() - start

            self.function = timed

    native_loops.NativeLoop.__init__ = init  # type: ignore[method-assign]
    native_schedule.numbering_kernel = lambda folder=None: number  # type: ignore[attr-defined]

    def undo() -> None:
        native_loops.NativeLoop.__init__ = made  # type: ignore[method-assign]
        native_schedule.numbering_kernel = numbering.numbering_kernel  # type: ignore
    return undo


def measure(mode: str, hidden: int, name: str, batch: int, calls: int, waited: float,
            threads: int = 2, work: bool = False, batches: int = 1) -> dict[str, Any]:
    """Median per call of each thread count's native loops, wall time and
    threads' CPU time, over the chunks kept, and how many chunks were
    dropped; `work`: the workers sleep once idle (`main`), so the CPU
    times are work; `batches`: the calls go through that many batches in
    turn (a training loop's: each call's rows fall to other threads than
    the last call's), else all take the first."""
    keep_freed_memory()  # (as `targets`' cells: no array's pages faulted in every call)
    trees, vocab, _ = workload(name, batch)
    params = make_params(hidden, vocab)
    spent = [0.0]
    undo = timed_loops(spent)
    turns = [trees[k * batch:(k + 1) * batch] for k in range(batches)]
    if len(turns[-1]) < batch:
        raise SystemExit(f"{name} has {len(trees)} trees: fewer than {batches} batches of {batch}")
    try:  # the loops are made at a function's first call, once its code is loaded
        forms = {t: recir_frontier(params, mode, t) for t in (1, threads)}
        for run in forms.values():
            for k in range(CHUNK):
                run(turns[k % batches])
        return timed(forms, turns, calls, waited, spent) | {
            "mode": mode, "hidden": hidden, "workload": name, "batch": batch, "work": work,
            "batches": batches}
    finally:
        undo()


def timed(forms: dict[int, Callable[[Any], Any]], turns: list[list[Any]], calls: int,
          waited: float, spent: list[float]) -> dict[str, Any]:
    """`measure`'s chunks of calls, the thread counts in turn, each call
    on the next of the batches `turns`."""
    kept: dict[int, dict[str, list[float]]] = {
        t: {"native": [], "wall": [], "caller_cpu": [], "others_cpu": [], "least": [],
            "median": [], "most": []} for t in forms}
    dropped, caller = 0, threading.get_native_id()
    for _ in range(max(calls // CHUNK, 1)):
        for threads, run in forms.items():
            run(turns[-1])  # the team's workers awake, as in back-to-back calls
            cpu = thread_cpu_ns()
            spent[0], before, start = 0.0, waited_ns(), time.perf_counter()
            for k in range(CHUNK):
                run(turns[k % len(turns)])
            wall, after, cpu_after = time.perf_counter() - start, waited_ns(), thread_cpu_ns()
            own, others = work_split(cpu, cpu_after, caller)
            spread = workers_spread(cpu, cpu_after, caller)
            if before is not None and after is not None and (after - before) * 1e-9 > (
                    waited * wall):
                dropped += 1
                continue
            for key, value in (("native", spent[0]), ("wall", wall), ("caller_cpu", own),
                               ("others_cpu", others), *zip(("least", "median", "most"),
                                                            spread)):
                kept[threads][key].append(value / CHUNK)
    medians = {t: {k: statistics.median(v) if v else float("nan") for k, v in kinds.items()}
               for t, kinds in kept.items()}
    return {"medians": medians, "kept": {t: len(kept[t]["wall"]) for t in kept},
            "dropped": dropped}


def report(found: dict[str, Any]) -> str:
    n = max(found["medians"])
    one, many = found["medians"][1], found["medians"][n]
    turns = f" ({found['batches']} batches in turn)" if found.get("batches", 1) > 1 else ""
    text = (f"{found['mode']} h={found['hidden']} {found['workload']} b{found['batch']}{turns}: "
            f"native 1t {one['native'] * 1e6:.0f} us, {n}t {many['native'] * 1e6:.0f} us, "
            f"{n}t/1t {one['native'] / many['native']:.3f}x; wall {one['wall'] * 1e6:.0f} / "
            f"{many['wall'] * 1e6:.0f} us, {one['wall'] / many['wall']:.3f}x "
            f"(chunks kept {found['kept'][1]}+{found['kept'][n]}, dropped {found['dropped']})")
    if found.get("work"):
        work = {t: m["caller_cpu"] + m["others_cpu"] for t, m in ((1, one), (n, many))}
        text += (f"\nCPU a call (workers asleep once idle): 1t {work[1] * 1e6:.0f} us; {n}t "
                 f"{work[n] * 1e6:.0f} us ({work[n] / work[1]:.3f}x the work), the calling "
                 f"thread {many['caller_cpu'] * 1e6:.0f} us, its own besides the native loops "
                 f"{(many['wall'] - many['native']) * 1e6:.0f} us; each other thread "
                 f"that worked: least {many['least'] * 1e6:.0f}, median "
                 f"{many['median'] * 1e6:.0f}, most {many['most'] * 1e6:.0f} us")
    return text


def main() -> int:
    parser = cell_parser(__doc__)
    parser.add_argument("--threads", type=int, default=2, help="N, timed against 1")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per thread count")
    parser.add_argument("--batches", type=int, default=1,
                        help="the calls go through this many batches in turn")
    parser.add_argument("--waited", type=float, default=0.01,
                        help="drop a chunk whose threads waited runnable this part of it")
    parser.add_argument("--work", action="store_true",
                        help="OpenMP workers asleep as soon as idle, so that each thread's "
                        "CPU time is its work: print the work a call takes on 1 and N threads")
    args = parser.parse_args()
    if args.work:  # every runtime's workers asleep once idle, before one loads
        if os.environ.get("OMP_WAIT_POLICY", "passive").lower() != "passive" or \
                os.environ.get("KMP_BLOCKTIME", "0") != "0":
            parser.error("--work needs the OpenMP workers asleep once idle: unset "
                         "OMP_WAIT_POLICY and KMP_BLOCKTIME")
        os.environ["OMP_WAIT_POLICY"] = "passive"
        configure_runtime(block_time_ms=0)
    print(report(measure(args.mode, args.hidden, args.workload, args.batch, args.calls,
                         args.waited, args.threads, args.work, args.batches)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
