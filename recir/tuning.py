"""`recir.tune()`: measures the policy's machine costs once, ahead of any call.

It compiles and runs a program (fib), so it sits above the pipeline; the
policy (`backend/policy.py`) only reads what it saved.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from pathlib import Path

from recir.backend.engine import openmp
from recir.backend.policy import (
    DEFAULT_TASK_S,
    DEFAULT_TEAM_S,
    Costs,
    machine,
    max_budget,
    save_tuned,
)
from recir.context import make_context
from recir.parsing import parse_module
from recir.pipeline import compile_module

FIB_IR = """
func.func @fib(%n: i32) -> i32 {
  invoke.subgraph @fib_rec(%k: i32) -> i32 {
    %one = arith.constant 1 : i32
    %two = arith.constant 2 : i32
    %base = arith.cmpi sle, %k, %one : i32
    %r = scf.if %base -> (i32) {
      scf.yield %one : i32
    } else {
      %k1 = arith.subi %k, %one : i32
      %k2 = arith.subi %k, %two : i32
      %a = invoke.invoke @fib_rec(%k1) : (i32) -> i32
      %b = invoke.invoke @fib_rec(%k2) : (i32) -> i32
      %s = arith.addi %a, %b : i32
      scf.yield %s : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @fib_rec(%n) : (i32) -> i32
  func.return %r : i32
}
"""
TUNE_ROUNDS = 9
FIB_N = 30  # ~1.3M calls of a few ns: milliseconds
ASLEEP_S = 0.01  # past any runtime's spin before its workers sleep (libomp 1 ms here)


def tune(cache_dir: Path | str | None = None) -> Costs:
    """Measures `team_s` (a no-op parallel region on all cores, its workers
    asleep), `warm_team_s` (the same region right after another, its
    workers still spinning), and from fib(30) on one thread and on all cores at two budgets,
    `share` and `task_s` (medians of `TUNE_ROUNDS`); keeps them in the cache
    directory for `costs`. Run it ahead of the calls it should serve: their
    functions read the costs when compiled."""
    library, threads = openmp(), machine().cores
    if library is None or threads < 2:
        return save_tuned(DEFAULT_TASK_S, DEFAULT_TEAM_S, 1.0, cache_dir)
    no_op = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value)

    def team() -> None:
        library.GOMP_parallel(no_op, None, threads, 0)  # free(NULL) on every thread

    team_s = median_seconds(team, before=lambda: time.sleep(ASLEEP_S))
    team()
    warm_team_s = median_seconds(team)
    share, task_s = fib_share_and_task(threads, cache_dir)
    return save_tuned(max(task_s, 1e-8), team_s, share, cache_dir, warm_team_s)


def median_seconds(run: Callable[[], object],
                   before: Callable[[], object] = lambda: None) -> float:
    """The median time of `run()` over `TUNE_ROUNDS` calls, each after an
    untimed `before()`."""
    times = []
    for _ in range(TUNE_ROUNDS):
        before()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[TUNE_ROUNDS // 2]


def fib_share_and_task(threads: int, cache_dir: Path | str | None) -> tuple[float, float]:
    """fib's speedup on `threads` threads with few tasks (`max_budget` + 4
    levels: fib's tree is unbalanced) gives the cores the team amounts to;
    the time that 2^6 times as many tasks add, times those cores, their cost."""
    fib = compile_module(parse_module(make_context(), FIB_IR, "fib"), "fib",
                         cache_dir=cache_dir, threads=threads)
    fib.costs = Costs(fib.costs.unit_s, DEFAULT_TASK_S, 0.0)

    def fib_seconds(budget: int) -> float:
        fib.fixed_budget = budget  # 0: one thread, no tasks
        fib(FIB_N)
        return median_seconds(lambda: fib(FIB_N))

    few = max_budget(threads) + 4
    alone, with_few, with_many = fib_seconds(0), fib_seconds(few), fib_seconds(few + 6)
    cores = max(alone / with_few, 1.0)
    share = min((cores - 1) / (threads - 1), 1.0)
    task_s = (with_many - with_few) * cores / (2 ** (few + 7) - 2 ** (few + 1))
    return share, task_s
