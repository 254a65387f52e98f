"""`run.py targets`' scaling rows: N threads over one, judged over the rounds the host gave its cores.

For the recir modes at batch 25 (`CELLS`), the two thread counts are timed
in the same rounds (`settled_rounds`), each round between probes of the
cores the host gave (`core_probe`), again after a pause where too few
rounds found them free (`probed_rounds`); fib(35) in a child process, by the
rounds its own copies found free (`fib_speedup`). `targets` prints and
judges the rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import batching, copies, core_latency, core_probe, deepest_tree, openmp
from bench.common import attempt, fmt, median, ratio, rounds_times, write_json
from bench.host_load import HostLoad

# what each target asks; scaling by core count (the two machines)
SCALING = {16: {"frontier": 10.0, "recursive": 12.0, "fib": 12.0},
           2: {"frontier": 1.8, "recursive": 1.8, "fib": 1.8}}
CELLS = (("complete-128", 256, 25), ("sst", 150, 25), ("sst", 150, 1))
SPELL_TURNS, SPELL_PAUSE_S = 2, 20.0  # more rounds where the host shared cores
SCALED = {"frontier": batching.recir_frontier, "recursive": batching.recir_recursive}


def scaling(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """N threads over one for each recir mode at batch 25 (`CELLS`), the two
    timed in the same rounds: on a shared host a slow spell then falls on
    both, where two cells timed minutes apart each catch their own. Beside
    each, the host's ceiling for it (`copies`: N x one one-thread copy alone
    over the slowest of N at once), and what else the host ran while it was
    timed (`host_load`).
    Each round ends with a probe of the cores the host gave (`core_probe`);
    the judged ratio is the medians over the rounds it found free
    (`scaling_all_rounds`: over every round), none where too few were.
    A mode that fails to build or run leaves its ratio out."""
    probe = core_probe.started(args.threads) if args.threads > 1 else None
    try:
        scaled_cells(args, report, probe)
    finally:
        if probe is not None:
            probe.close()


def scaled_cells(args: argparse.Namespace, report: dict[str, Any],
                 probe: core_probe.CoreProbe | None) -> None:
    for name, hidden, batch in CELLS:
        if batch == 1 or args.threads < 2:
            continue
        trees, vocab, _ = batching.workload(name, batch)
        params = batching.make_params(hidden, vocab)
        for kind, build in SCALED.items():
            for mode in ("infer", "train"):
                key = f"{name} {kind} {mode}"
                runs, _ = attempt(key, lambda b=build, m=mode: built(
                    {str(t): b(params, m, t) for t in (1, args.threads)}, trees[:batch]))
                if runs is None:
                    continue
                before, cores = core_latency.round_trips(), []
                # what else ran while these were timed (the probe is ours)
                with HostLoad(ours=probe.cpu_seconds if probe else lambda: 0.0) as load:
                    times, _ = attempt(key, lambda r=runs: probed_rounds(
                        r, trees, batch, args, probe, cores))
                if times is None:
                    continue
                trips = [before, core_latency.round_trips()]
                report["host_load"][key] = {"others": load.others, "steal": load.steal}
                report["core_latency"][key] = [list(t.values()) for t in trips]
                report.setdefault("host_cores", {})[key] = cores
                report.setdefault("round_seconds", {})[key] = times
                report.setdefault("scaling_all_rounds", {})[key] = \
                    median(times["1"]) / median(times[str(args.threads)])
                kept = core_probe.free_rounds(cores, args.threads, len(times["1"]))
                if not kept:
                    print(f"scaling {key}: the host shared cores in all but "
                          f"{sum(core_probe.free(c, args.threads) for c in cores)} of "
                          f"{len(cores)} rounds; unjudged", flush=True)
                    continue
                one, many = (median([times[k][i] for i in kept]) for k in ("1", str(args.threads)))
                report["scaling"][key] = one / many
                # a call's seconds on each, as the ratio's parts (a pass is
                # the workload's batches, each a call)
                calls = -(-len(trees) // batch)
                report["call_seconds"][key] = {"1": one / calls, str(args.threads): many / calls}
                found = copies.ceiling(kind, mode, name, hidden, batch, args.threads)
                report["ceiling"][key] = found
                if (name, kind) == ("sst", "frontier"):
                    report["tree_bound"][key], _ = attempt(key, lambda m=mode: tree_bound(
                        m, hidden, name, batch))
                if args.json:
                    write_json(args.json, report)
                print(f"scaling {key}: {report['scaling'][key]:.2f}x over {len(kept)} rounds "
                      f"(all rounds {report['scaling_all_rounds'][key]:.2f}x; "
                      f"{1e3 * one / calls:.2f} "
                      f"and {1e3 * many / calls:.2f} ms a call); {args.threads} copies "
                      f"of one thread at once: {fmt(found)}x; while timed, {load.describe()}"
                      f"; cores' round trip {core_latency.describe(trips[0])} before, "
                      f"{core_latency.describe(trips[1])} after",
                      flush=True)


def probed_rounds(runs: dict[str, Any], trees: list[Any], batch: int,
                  args: argparse.Namespace, probe: core_probe.CoreProbe | None,
                  cores: list[float]) -> dict[str, list[float]]:
    """`settled_rounds` in turns (`in_turns`), each round's probe appended to
    `cores` (`core_probe.each_round`)."""
    found = in_turns(lambda: settled_rounds(
        runs, trees, batch, args.scaling_rounds,
        each_round=probe and core_probe.each_round(probe, cores)),
        lambda times: bool(core_probe.free_rounds(cores, args.threads, len(times["1"]))),
        "  these rounds")
    assert found is not None  # (settled_rounds returns its rounds or raises)
    return found


def in_turns(take: Callable[[], dict[str, list[float]] | None],
             enough: Callable[[dict[str, list[float]]], bool], what: str
             ) -> dict[str, list[float]] | None:
    """`take()`'s rounds, and more of them after a pause (a spell of shared
    cores lasts minutes) while too few found the host's cores free
    (`enough`), at most `SPELL_TURNS` more times; None where a take fails."""
    times: dict[str, list[float]] = {}
    for turn in range(1 + SPELL_TURNS):
        if turn:
            print(f"{what}: the host shared cores; again in {SPELL_PAUSE_S:g} s", flush=True)
            time.sleep(SPELL_PAUSE_S)
        found = take()
        if found is None:
            return None
        for k, rounds in found.items():
            times.setdefault(k, []).extend(rounds)
        if enough(times):
            break
    return times


def tree_bound(mode: str, hidden: int, name: str, batch: int) -> float:
    """A pass's batches on one thread over their deepest trees alone, native
    time (`deepest_tree`): no team by groups of whole trees ends before them."""
    found = deepest_tree.measure(mode, hidden, name, batch, rounds=3, calls=3)
    return sum(f["whole"] for f in found) / sum(f["deepest"] for f in found)


def built(runs: dict[str, Any], batch: list[Any]) -> dict[str, Any]:
    """`runs`, each called once: compiled and loaded before any timing."""
    for run in runs.values():
        run(batch)
    return runs


def settled_rounds(runs: dict[str, Any], trees: list[Any], batch: int, repeats: int,
                   warmup_s: float = 0.3, each_round: Callable[[], Any] | None = None
                   ) -> dict[str, list[float]]:
    """Each thread count's pass over the trees in batches, timed in rounds
    (`rounds_times`), each pass after one untimed batch of its own: the
    other count's turn leaves its first call a transient (its OpenMP
    workers asleep after the 1 ms block time, their cores idle, its data
    out of the caches), which a run on one thread count meets once, not
    once every pass."""
    return rounds_times({k: batching.in_batches(run, trees, batch) for k, run in runs.items()},
                        repeats, warmup_s=warmup_s,
                        settle={k: (lambda run=run: run(trees[:batch])) for k, run in runs.items()},
                        each_round=each_round)


def fib_speedup(threads: int, repeats: int, n: int = 35, timeout: float = 600
                ) -> list[float | None] | None:
    """fib(n) on `threads` over one, and the host's ceiling for as many
    threads (`openmp.fib_times`' copies, in the same rounds), in a child
    process as `run.py openmp` times it: this process's earlier teams and
    PyTorch's pool would share its cores. Both over the rounds whose
    ceiling says the host gave its cores (`core_probe.free_rounds`; again
    after a pause where too few did, as `probed_rounds`; the ratio None
    after that). None, with the reason printed, where the child fails, runs
    over `timeout` seconds or prints no rounds last."""
    code = (f"import json, sys; sys.path.insert(0, {str(openmp.ROOT)!r}); "
            f"from bench.openmp import fib_times; "
            f"print(json.dumps(fib_times([1, {threads}], {n}, {repeats}, copies={threads})))")
    def ceilings(times: dict[str, list[float]]) -> list[float]:
        return [a / b for a, b in zip(times["alone"], times["together"], strict=True)]

    def kept(times: dict[str, list[float]]) -> list[int]:
        return core_probe.free_rounds(ceilings(times), threads, len(times["alone"]))

    times = in_turns(lambda: child_rounds(code, f"fib({n})", timeout),
                     lambda found: bool(kept(found)), f"fib({n})")
    if times is None:
        return None
    free = kept(times)
    one, many, alone, together = ([times[k][i] for i in free or range(len(times[k]))]
                                  for k in ("1", str(threads), "alone", "together"))
    return [ratio(median(one), median(many)) if free else None,
            median(alone) / median(together)]


def child_rounds(code: str, what: str, timeout: float) -> dict[str, list[float]] | None:
    """The rounds a child running `code` prints last as JSON; None, with
    the reason printed, where it fails, runs over `timeout` or prints
    something else."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"{what}: over {timeout:g} s, not judged", flush=True)
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        try:
            found = json.loads(lines[-1])
            return {k: [float(x) for x in v] for k, v in found.items()}
        except (ValueError, TypeError, AttributeError):
            why = f"printed {lines[-1][:80]!r}"
    else:
        why = (done.stderr.strip().splitlines()[-1] if done.stderr.strip()
               else f"exit {done.returncode}")
    print(f"{what} in a child process failed, not judged: {why}", flush=True)
    return None
