"""The runtime's choices, computed from a cost model: no timing of a user's calls.

A call's work is `work_estimate.work` (multiply-adds of one recursive call)
times its size (a tree's node count). Four machine costs turn work into
decisions (`Costs`):

- `unit_s`, the time of one unit of work: one multiply-add per f32 vector
  lane per cycle, from the ISA's vector width and the clock (a
  matrix-vector product, which loads a weight a multiply-add, runs slower
  by what L2 or L3 delivers a cycle: `stream_factor`);
- `task_s`, spawning one task and having another thread steal it (libgomp
  creates a task in 0.1-0.4 us; the steal moves its cache lines);
- `team_s`, starting a team whose workers sleep (a kernel wake-up of each)
  and joining it; `warm_team_s`, starting one while they still spin after
  the last (the runtime's block time, `settings.block_time_ms`): a cache
  line to each and a barrier, what every team after the first of a batched
  function's call costs, its products and row loops following each other
  within microseconds;
- `share`, the part of a core each thread beyond the first gets: 1 on an
  idle machine, less where other processes hold the cores.

From them:

- a call runs on a team only where the team's time, a thread's share of
  the work plus the largest task's imbalance (`IMBALANCE` of a share), the
  team's start and a share of its tasks' cost, is below one thread's time
  (`team_pays`);
- a call spawns tasks `budget` levels down the call tree: enough levels that
  the largest task is at most `IMBALANCE` of a thread's share (Graham's
  bound: the schedule is then within that fraction of ideal), each level
  cutting the largest piece to the share its largest call does
  (`work_estimate.larger_share`: 1/2 unless the IR shows a less even
  split), but no level whose tasks carry less than `GRAIN` times `task_s`
  of work (`call_budget`, `batch_budget`; a batch's calls are tasks already);
- a batch's calls are spawned largest first (`spawn_order`), and split
  into groups of like total size the same way (`balanced_groups`);
- gradients log outer products and add them by one SGEMM (`defer-outer-bytes`)
  when a weight gradient and its weight no longer fit a core's L2 together
  (`defer_outer_bytes`).

`batching="auto"` (`recir/auto_costs.py`) weighs the recursive code against
the frontier with four more costs (their defaults below say why):
`frontier_call_s`, a batched call's fixed cost; `height_s`, a height's;
`row_s`, a row's beyond its products; `l3_slowdown`, how much slower
weights stream from L3 than from L2 (`stream_factor`); and with how much
faster the GEMM kernel's register tile runs a product than a matrix-vector
product does (`gemm_gain`).

`recir.tune()` may measure `team_s`, `task_s`, `share` and `auto`'s costs
once, ahead of the calls; its result is kept in the cache directory and
read by later processes on the same machine. `$RECIR_SPAWN_BUDGET` fixes
the budget instead.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import os
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

from recir.diagnostics import RecirError
from recir.passes.gemm_target import L2_BYTES_PER_CYCLE, L3_BYTES_PER_CYCLE, cache_fact

IMBALANCE = 1 / 8  # the largest task's share of a thread's work that a schedule tolerates
GRAIN = 32  # a task carries at least this many times its own cost: at most 3% overhead
DEFAULT_CLOCK_HZ = 2.0e9  # where neither cpufreq nor /proc/cpuinfo gives one
CPUFREQ = "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"  # kHz, fixed
DEFAULT_L2_BYTES = 1 << 20
DEFAULT_TASK_S, LEAST_TASK_S = 1e-6, 1e-9  # (the least: below any; `tune` keeps 1e-8 or more)
DEFAULT_TEAM_S = 50e-6  # a futex wake-up per worker and the scheduler's latency (a VM: tens of us)
DEFAULT_WARM_TEAM_S = 2e-6  # spinning workers: a cache line each way and a barrier
# A batched call's driver, repeated on the last call's plans (`repeat_call`):
# its inputs converted, laid out and written into the plans, the outputs split
# per element (a few dozen NumPy calls of a microsecond or two, some cold),
# and one native call that starts the loops.
DEFAULT_FRONTIER_CALL_S = 50e-6
# A height: each op of `@post` (a few dozen after fusion) starts a loop over
# the height's rows, a product a kernel call, at some 20 ns each.
DEFAULT_HEIGHT_S = 0.5e-6
# A row beyond its products: its children's rows gathered, its partition's
# take and merge, a few cache lines each (the recursive code reads its
# children's results where they were written).
DEFAULT_ROW_S = 50e-9
# A matrix-vector product loads a weight a multiply-add, so with 16 f32
# lanes (64 bytes a vector) it runs at half of `unit_s`'s rate from L2
# (`L2_BYTES_PER_CYCLE`), with 8 or 4 lanes at the full rate; from L3 at
# `L3_SLOWDOWN` times less.
L3_SLOWDOWN = L2_BYTES_PER_CYCLE / L3_BYTES_PER_CYCLE
# The share of its tile's rate (`gemm_gain`) the GEMM kernel reaches at a
# frontier's shapes (tens to hundreds of rows, a few hundred columns): its
# packing, edge tiles and the k loop's blocks take the rest; `bench/run.py
# roof` measures 0.5-0.7 of the one-core roof at 25-400 rows.
GEMM_EFFICIENCY = 0.55


@dataclass(frozen=True)
class Machine:
    """The facts the policy reads: cores this process may use, a core's L2,
    the f32 lanes of its widest vectors and its clock."""

    cores: int
    l2_bytes: int
    lanes: int
    clock_hz: float


@dataclass(frozen=True)
class Costs:
    """Seconds per unit of work, per task, per team start; the share of a
    core each extra thread gets."""

    unit_s: float
    task_s: float
    team_s: float
    share: float = 1.0
    warm_team_s: float = DEFAULT_WARM_TEAM_S
    frontier_call_s: float = DEFAULT_FRONTIER_CALL_S
    height_s: float = DEFAULT_HEIGHT_S
    row_s: float = DEFAULT_ROW_S
    l3_slowdown: float = L3_SLOWDOWN


@functools.cache
def machine() -> Machine:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    return Machine(cores, l2_bytes(), vector_lanes(), clock_hz())


def l2_bytes() -> int:
    """A core's L2 size (sysfs, else sysconf, else 1 MiB)."""
    size = cache_fact(2, "size", 0)
    if not size:
        try:
            size = os.sysconf("SC_LEVEL2_CACHE_SIZE")
        except (ValueError, OSError):
            size = 0
    return size if size > 0 else DEFAULT_L2_BYTES


def vector_lanes() -> int:
    """f32 lanes of the host's widest vector registers (LLVM's host features)."""
    import llvmlite.binding as llvm

    try:
        features = llvm.get_host_cpu_features()
    except RuntimeError:
        return 4
    if features.get("avx512f"):
        return 16
    return 8 if features.get("avx2") or features.get("avx") else 4


def clock_hz(root: Path = Path("/")) -> float:
    """cpufreq's top clock, else /proc/cpuinfo's (a VM's nominal one): the
    current clock would move the policy and the kept costs' file name."""
    try:
        return float((root / CPUFREQ).read_text()) * 1e3
    except (OSError, ValueError):
        try:
            found = (root / "proc/cpuinfo").read_text().split("cpu MHz", 1)[1]
            return float(found.split(":", 1)[1].split("\n", 1)[0]) * 1e6
        except (OSError, ValueError, IndexError):
            return DEFAULT_CLOCK_HZ


def costs(cache_dir: Path | str | None = None) -> Costs:
    """The machine's costs: `recir.tune`'s measurement where one is kept,
    else the stated defaults."""
    facts = machine()
    unit_s = 1 / (facts.lanes * facts.clock_hz)
    try:
        measured = json.loads(tuned_path(cache_dir).read_text())
        tuned = Costs(unit_s, float(measured["task_s"]), float(measured["team_s"]),
                      float(measured["share"]), float(measured.get("warm_team_s",
                                                                   DEFAULT_WARM_TEAM_S)),
                      *(float(measured.get(k, v)) for k, v in FRONTIER_DEFAULTS.items()))
        if all(0 <= v < 1e3 for v in astuple(tuned)) and (  # (not NaN, nor 1e308: inf after)
                tuned.task_s >= LEAST_TASK_S):  # (a negative, NaN or 0 cost: divisions fail)
            return tuned
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
        pass  # none kept, or unreadable (a folder it cannot read): the defaults
    return Costs(unit_s, DEFAULT_TASK_S, DEFAULT_TEAM_S)


FRONTIER_DEFAULTS = {"frontier_call_s": DEFAULT_FRONTIER_CALL_S, "height_s": DEFAULT_HEIGHT_S,
                     "row_s": DEFAULT_ROW_S, "l3_slowdown": L3_SLOWDOWN}


def tuned_path(cache_dir: Path | str | None = None) -> Path:
    from recir.backend.cache import cache_folder
    facts = machine()
    name = f"policy-{facts.cores}c-{facts.lanes}l-{int(facts.clock_hz // 1e6)}mhz.json"
    return cache_folder(cache_dir) / name


def max_budget(threads: int, share: float = 0.5) -> int:
    """Levels that split a recursion whose largest call does `share` of its
    caller's work (`work_estimate.larger_share`; 1/2: balanced) into pieces
    of at most `IMBALANCE` of a thread's share: log(threads / IMBALANCE) / log(1 / share)."""
    return max(0, math.ceil(math.log(max(threads, 1) / IMBALANCE) / -math.log(share)))


def grain_levels(work: float, costs: Costs) -> int:
    """Levels a binary recursion of `work` units can halve before a piece
    carries less than `GRAIN` tasks' cost."""
    pieces = work * costs.unit_s / (GRAIN * costs.task_s)
    return max(0, int(math.floor(math.log2(pieces)))) if pieces >= 1 else 0


def team_pays(work: float | None, threads: int, costs: Costs, tasks: int | None = None
              ) -> bool:
    """Whether `work` units (None: unknown, taken as large) in `tasks` tasks
    (None: those of `call_budget`) take less time on a team of `threads`
    than on one thread."""
    if threads < 2:
        return False
    if work is None:
        return True
    if tasks is None:  # one call: without a level of tasks a team has nothing to share
        tasks = 2 ** call_budget(work, threads, costs) - 1
        if not tasks:
            return False
    alone = work * costs.unit_s
    return team_seconds(alone, threads, costs, tasks) < alone


def team_seconds(alone_s: float, threads: int, costs: Costs, tasks: int, warm: bool = False
                 ) -> float:
    """The time on a team of `threads` of what takes `alone_s` on one
    thread in `tasks` tasks: a thread's share of it and the largest task's
    imbalance, the team's start (`warm`: its workers still spinning) and a
    share of its tasks' cost."""
    cores = 1 + (max(threads, 1) - 1) * costs.share  # what the team's threads amount to
    start = costs.warm_team_s if warm else costs.team_s
    return alone_s / cores * (1 + IMBALANCE) + start + tasks * costs.task_s / cores


def team_min_work(threads: int, costs: Costs, warm: bool = False) -> int:
    """The fewest units of work (multiply-adds) that one product split
    across a team of `threads` does faster than one thread: where a
    thread's share plus the largest block's imbalance and the team's start
    (`warm`: with its workers still spinning) is below the whole
    (`team_pays` without tasks); -1 where no size does (one thread, or
    extra threads that get too little of a core)."""
    cores = 1 + (max(threads, 1) - 1) * costs.share
    saved = 1 - (1 + IMBALANCE) / cores  # the part of the time a team saves
    if threads < 2 or saved <= 0:
        return -1
    start = costs.warm_team_s if warm else costs.team_s
    return math.ceil(start / (costs.unit_s * saved))


def call_budget(work: float | None, threads: int, costs: Costs, share: float = 0.5) -> int:
    """The levels of tasks of one call of `work` units on `threads` threads."""
    if work is None:
        return max_budget(threads, share)
    return min(max_budget(threads, share), grain_levels(work, costs))


def batch_budget(works: list[float] | None, count: int, threads: int, costs: Costs,
                 share: float = 0.5) -> int:
    """The levels of tasks below each call of a batch of `count` calls of
    `works` units (None: unknown, taken as equal and large), themselves a
    team's tasks: none where the largest call is at most `IMBALANCE` of a
    thread's share, else enough levels that its pieces are."""
    if works is None:
        ratio = threads / (IMBALANCE * count)
    else:
        total, largest = sum(works), max(works, default=0)
        if total <= 0:
            return 0
        ratio = largest * threads / (IMBALANCE * total)
    levels = math.ceil(math.log(ratio) / -math.log(share)) if ratio > 1 else 0
    levels = min(levels, max_budget(threads, share))
    return levels if works is None else min(levels, grain_levels(max(works), costs))


def spawn_order(works: list[float] | None, count: int) -> list[int]:
    """The order a batch's `count` calls of `works` units are spawned in:
    the largest first, ties in batch order, so that the other threads of
    the team, which take the oldest tasks first (libgomp's team queue,
    libomp's deques stolen from the head), start on the largest calls.
    For calls that spawn nothing this is Graham's LPT, within 4/3 of the
    best schedule, where batch order allows twice it. Batch order where
    the works are unknown."""
    if works is None:
        return list(range(count))
    return sorted(range(count), key=lambda k: -works[k])


def balanced_groups(sizes: Sequence[float], groups: int) -> list[int]:
    """Each item's group of `groups`, sizes balanced: the largest first,
    each to the group with the least so far (the lowest on a tie), Graham's
    LPT again: the largest group within 4/3 of the best split's, where runs
    of consecutive items can leave one twice another. Then `swapped`. Every
    caller computes the same (the height-order kernel too)."""
    loads = [(0.0, g) for g in range(groups)]  # a heap, by (load, group)
    found = [0] * len(sizes)
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        load, group = heapq.heappop(loads)
        found[k] = group
        heapq.heappush(loads, (load + sizes[k], group))
    if len(sizes) ** 2 <= SWAP_PAIRS_PER_UNIT * sum(sizes):
        swapped(sizes, found, groups)
    return found


# LPT leaves the fullest group over the emptiest by up to the last item it
# gave it: 1-3% of a team call on SST batches of 25 trees, paid at its join.
# `groups` passes of swaps check about len(sizes)^2 pairs: at most this many
# a unit of size (a tree's node). A check costs what one of the height-order
# kernel's dozen passes over the rows spends on a row.
SWAP_PAIRS_PER_UNIT = 4


def swapped(sizes: Sequence[float], found: list[int], groups: int) -> None:
    """`groups` passes, each swapping the pair of items between the fullest
    and the emptiest group (each the lowest on a tie) that leaves the two
    closest (the first such pair in item order), where a pair brings them
    closer: as the height-order kernel does."""
    loads = [sum(s for s, g in zip(sizes, found, strict=True) if g == k) for k in range(groups)]
    for _ in range(groups):
        full, empty = loads.index(max(loads)), loads.index(min(loads))
        spread = loads[full] - loads[empty]
        closest, best = spread, None  # a swap moving m leaves them |spread - 2m| apart
        for a in (a for a in range(len(sizes)) if found[a] == full):
            for b in (b for b in range(len(sizes)) if found[b] == empty):
                apart = abs(spread - 2 * (sizes[a] - sizes[b]))
                if apart < closest:
                    closest, best = apart, (a, b)
        if best is None:
            return
        (a, b), moved = best, sizes[best[0]] - sizes[best[1]]
        found[a], found[b] = empty, full
        loads[full], loads[empty] = loads[full] - moved, loads[empty] + moved


def defer_outer_bytes() -> int:
    """Weight gradients from this size up log their outer products: a
    gradient and its weight of this size each fill half a core's L2."""
    return machine().l2_bytes // 2


def gemm_gain(rows: float) -> float:
    """How many times `unit_s`'s rate the GEMM kernel runs a product of
    `rows` rows at: `unit_s` is a load of a weight per multiply-add, the
    kernel's tile of r x v vectors (`gemm_target`) loads r + v values per
    r v vector multiply-adds, with at most `rows` of its r rows filled; of
    that, `GEMM_EFFICIENCY`."""
    from recir.passes.gemm_target import host_target

    tile_rows, vectors = host_target().tile
    filled = min(float(tile_rows), max(rows, 1.0))
    return filled * vectors / (filled + vectors) * GEMM_EFFICIENCY


def stream_factor(weight_bytes: int, costs: Costs) -> float:
    """How many times slower than `unit_s` a matrix-vector product runs:
    its weights stream from L2 (`L2_BYTES_PER_CYCLE`), and the part of them
    (with the rest of a call's) beyond what L2 holds `l3_slowdown` times
    slower: weights a little over L2 mostly stay there, weights many times
    its size come from L3."""
    facts = machine()
    from_l2 = max(1.0, 4 * facts.lanes / L2_BYTES_PER_CYCLE)
    beyond = max(0.0, 1.0 - facts.l2_bytes / max(weight_bytes, 1))
    return from_l2 * (1.0 + (costs.l3_slowdown - 1.0) * beyond)


def fixed_budget() -> int | None:
    """`$RECIR_SPAWN_BUDGET`'s budget, None where unset."""
    fixed = os.environ.get("RECIR_SPAWN_BUDGET", "").strip()
    if not fixed:
        return None
    if not fixed.isdecimal():  # (isdigit takes '²', which int() refuses)
        raise RecirError(f"error: RECIR_SPAWN_BUDGET must be a number of levels (0 or more), "
                         f"got '{fixed}'")
    return int(fixed)


def save_tuned(task_s: float, team_s: float, share: float = 1.0,
               cache_dir: Path | str | None = None,
               warm_team_s: float = DEFAULT_WARM_TEAM_S, **frontier: float) -> Costs:
    """Keeps measured costs for `costs`; `frontier`: any of
    `FRONTIER_DEFAULTS`'s (the others keep their defaults)."""
    if unknown := set(frontier) - set(FRONTIER_DEFAULTS):
        raise RecirError(f"error: unknown costs {sorted(unknown)}")
    path = tuned_path(cache_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"task_s": task_s, "team_s": team_s, "share": share,
                                    "warm_team_s": warm_team_s, **frontier}))
    except OSError as e:
        raise RecirError(f"error: cannot keep the measured costs in {path}: {e.strerror}") from None
    return costs(cache_dir)
