"""`recir.tune()`: measures the policy's machine costs once, ahead of any call.

It compiles and runs programs (fib; a tiny tree model's frontier form), so
it sits above the pipeline and the frontier's compiler; the policy
(`backend/policy.py`) only reads what it saved.
"""

from __future__ import annotations

import ctypes
import statistics
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import f32, i32

from recir.backend.engine import openmp
from recir.backend.policy import (
    DEFAULT_TASK_S,
    DEFAULT_TEAM_S,
    Costs,
    machine,
    max_budget,
    save_tuned,
)
from recir import frontend as rf
from recir.frontend import SubGraph, TracedModel, cond, structure, trace, vector
from recir.frontier_compile import compile_frontier
from recir.pipeline import compile_module

TINY_SHAPES = {"emb": (3, 2), "w": (2, 4), "b": (2,), "w_out": (5, 2), "b_out": (5,)}
CHAIN_HEIGHTS = 64  # a caterpillar: one internal node and a leaf a height
COMPLETE_HEIGHTS = 10  # a complete tree: 1023 nodes in 10 heights
TUNE_ROUNDS = 9
FIB_N = 30  # ~1.3M calls of a few ns: milliseconds
# fib's one-thread time per thread of the team, at least: a team's start
# (a wake-up of each sleeping worker, hundreds of microseconds on many cores)
# and its steals then cost a few percent of each thread's share
SHARE_S = 2e-3
ASLEEP_S = 0.01  # past any runtime's spin before its workers sleep (libomp 1 ms here)


def tune(cache_dir: Path | str | None = None) -> Costs:
    """Measures `team_s` (a no-op parallel region on all cores, its workers
    asleep), `warm_team_s` (the same region right after another, its
    workers still spinning), and from fib(30) on one thread and on all cores at two budgets,
    `share` and `task_s` (`share_and_task`); keeps them in the cache
    directory for `costs`, with the frontier's costs a call, a height and
    a row (`frontier_costs`) and L3's slowdown (`l3_slowdown`). Run it
    ahead of the calls it should serve: their functions read the costs
    when compiled."""
    library, threads = openmp(), machine().cores
    if library is None or threads < 2:
        return save_tuned(DEFAULT_TASK_S, DEFAULT_TEAM_S, 1.0, cache_dir,
                          **frontier_costs(cache_dir), l3_slowdown=l3_slowdown())
    no_op = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value)

    def team() -> None:
        library.GOMP_parallel(no_op, None, threads, 0)  # free(NULL) on every thread

    team_s = median_seconds(team, before=lambda: time.sleep(ASLEEP_S))
    team()
    warm_team_s = median_seconds(team)
    share, task_s = fib_share_and_task(threads, cache_dir)
    return save_tuned(max(task_s, 1e-8), team_s, share, cache_dir, warm_team_s,
                      **frontier_costs(cache_dir), l3_slowdown=l3_slowdown())


def median_seconds(run: Callable[[], object],
                   before: Callable[[], object] = lambda: None) -> float:
    """The median time of `run()` over `TUNE_ROUNDS` calls, each after an
    untimed `before()` (timeit's: the cycle collector off while timed)."""
    return statistics.median(timeit.repeat(run, before, repeat=TUNE_ROUNDS, number=1))


def fib_share_and_task(threads: int, cache_dir: Path | str | None) -> tuple[float, float]:
    """fib's times on one thread and on `threads` with few tasks (`max_budget`
    + 4 levels: fib's tree is unbalanced; n large enough that each thread's
    share is `SHARE_S`) and with 2^6 times as many (`share_and_task`)."""
    fib = compile_module(fib_model().module, "fib", cache_dir=cache_dir, threads=threads)
    fib.costs = Costs(fib.costs.unit_s, DEFAULT_TASK_S, 0.0)

    def fib_times(n: int, budget: int) -> list[float]:
        fib.fixed_budget = budget  # 0: one thread, no tasks
        fib(n)
        return timeit.repeat(lambda: fib(n), repeat=TUNE_ROUNDS, number=1)

    n, alone = fib_size(lambda k: min(fib_times(k, 0)), threads)
    few = max_budget(threads) + 4
    return share_and_task(alone, fib_times(n, few), fib_times(n, few + 6), threads, few)


def share_and_task(alone: float, with_few: list[float], with_many: list[float],
                   threads: int, few: int) -> tuple[float, float]:
    """The cores a team of `threads` amounts to (one thread's time `alone`
    over the team's with `few` levels of tasks) as a thread's `share`; the
    time that 2^6 times as many tasks add, times those cores, a task's
    cost. From each one's least time: a round that another process slowed
    says nothing of what the cores give, and a share read off slowed rounds
    (0 at worst) would keep every call off a team until the next tune."""
    cores = max(alone / min(with_few), 1.0)
    share = min((cores - 1) / (threads - 1), 1.0)
    task_s = (min(with_many) - min(with_few)) * cores / (2 ** (few + 7) - 2 ** (few + 1))
    return share, task_s


def fib_model() -> TracedModel:
    """fib(n) with its two recursive calls independent: tasks at threads > 1."""
    with trace("fib") as m:
        n = m.input("n", i32)
        with SubGraph("fib_rec", [i32], [i32]) as rec:
            (k,) = rec.inputs

            def smaller() -> Any:
                k1, k2 = k - 1, k - 2
                return rec(k1) + rec(k2)

            rec.output(cond(k <= 1, lambda: 1, smaller))
        m.output(rec(n))
    return m.traced


def fib_size(alone_seconds: Callable[[int], float], threads: int) -> tuple[int, float]:
    """The first fib n from `FIB_N` up (by 2: 2.6 times the calls each) whose
    one-thread time gives each of `threads` threads `SHARE_S`, at most
    `FIB_N` + 10, and that time."""
    n, alone = FIB_N, alone_seconds(FIB_N)
    while alone < threads * SHARE_S and n < FIB_N + 10:
        n += 2
        alone = alone_seconds(n)
    return n, alone


def frontier_costs(cache_dir: Path | str | None) -> dict[str, float]:
    """`frontier_call_s`, `height_s` and `row_s` (`batching="auto"`'s), from
    one-thread frontier calls of a tiny tree model (`tiny_tree_model`) on a
    leaf, a caterpillar and a complete tree: the two trees' times over the
    leaf's are (heights - 1) x height_s + (nodes - 1) x row_s each."""
    frontier = compile_frontier(tiny_tree_model(), cache_dir=cache_dir, threads=1)

    def seconds(children: list[tuple[int, int]], root: int) -> float:
        left = np.array([c[0] for c in children], np.int32)
        right = np.array([c[1] for c in children], np.int32)
        zeros = np.zeros(len(children), np.int32)
        batch = [(left, right, zeros, zeros, root)]
        frontier.batch(batch)
        return median_seconds(lambda: frontier.batch(batch))

    leaf = seconds([(-1, -1)], 0)
    chain: list[tuple[int, int]] = [(-1, -1)]  # node 2j: internal over (2j - 2, 2j - 1)
    for j in range(1, CHAIN_HEIGHTS):
        chain += [(-1, -1), (2 * j - 2, 2 * j - 1)]
    nodes = 2 ** COMPLETE_HEIGHTS - 1  # heap order: node i's children 2i + 1, 2i + 2
    complete = [(2 * i + 1, 2 * i + 2) if 2 * i + 2 < nodes else (-1, -1)
                for i in range(nodes)]
    over = np.array([seconds(chain, len(chain) - 1) - leaf, seconds(complete, 0) - leaf])
    counts = np.array([[CHAIN_HEIGHTS - 1, len(chain) - 1], [COMPLETE_HEIGHTS - 1, nodes - 1]],
                      np.float64)
    height_s, row_s = np.maximum(np.linalg.solve(counts, over), 0.0)
    return {"frontier_call_s": float(max(leaf - height_s - row_s, 0.0)),
            "height_s": float(height_s), "row_s": float(row_s)}


def tiny_tree_model() -> TracedModel:
    """TreeRNN with a 2-wide state (`TINY_SHAPES`): its products take no
    time, what remains is the frontier's cost per call, per height and per row."""
    rng = np.random.default_rng(0)
    with trace("tiny") as m:
        left, right, word, label = (m.input(n, structure())
                                    for n in ("left", "right", "word", "label"))
        root = m.input("root", i32)
        p = {k: m.param(k, rng.standard_normal(shape).astype(np.float32))
             for k, shape in TINY_SHAPES.items()}
        with SubGraph("node", [i32], [vector(2), f32]) as node:
            (i,) = node.inputs

            def loss(h: Any) -> Any:
                return rf.softmax_xent(p["w_out"] @ h + p["b_out"], label[i])

            def leaf() -> Any:
                x = rf.gather(p["emb"], word[i])
                return x, loss(x)

            def inner() -> Any:
                (hl, sl), (hr, sr) = node(left[i]), node(right[i])
                h = rf.tanh(p["w"] @ rf.concat([hl, hr]) + p["b"])
                below = sl + sr
                return h, loss(h) + below

            node.output(*cond(left[i] < 0, leaf, inner))
        m.output(*node(root))
    return m.traced


def l3_slowdown() -> float:
    """How many times longer an element of BLAS's dot product (two vectors
    streamed, as a matrix-vector product streams its weights) takes from L3
    (vectors of 8 x L2's bytes) than from L2 (an eighth of it); at least 1."""
    per_element = []
    for nbytes in (machine().l2_bytes // 8, 8 * machine().l2_bytes):
        x = np.ones(nbytes // 8, np.float32)  # two vectors of nbytes in all
        y = np.ones_like(x)
        repeats = max(1, (32 << 20) // nbytes)

        def dots(x: np.ndarray = x, y: np.ndarray = y, repeats: int = repeats) -> None:
            for _ in range(repeats):
                np.dot(x, y)

        per_element.append(median_seconds(dots, dots) / (repeats * len(x)))
    return max(1.0, per_element[1] / per_element[0])
