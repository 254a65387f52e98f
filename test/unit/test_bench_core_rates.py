"""bench/core_rates.py: each core's SGEMM rate, alone and with all cores busy."""

import os
import time

import numpy as np

from bench import core_rates


def test_a_pinned_childs_rate_is_the_products_rate_measured_here():
    core = min(os.sched_getaffinity(0))
    (found,) = core_rates.rates([core], seconds=0.2)
    m, k, n = core_rates.SHAPE
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    c = a @ b
    count, begin = 0, time.perf_counter()
    while time.perf_counter() - begin < 0.2:
        np.matmul(a, b, out=c)
        count += 1
    here = 2 * m * k * n * count / (time.perf_counter() - begin) / 1e9
    # this process's BLAS may use every core, the child's one: at most that
    # many times faster here, and a shared host's spells within a factor 3
    assert here / (3 * len(os.sched_getaffinity(0))) < found < 3 * here


def test_the_spread_names_least_median_most_and_their_ratio():
    assert core_rates.spread([100.0, 150.0, 81.0]) == \
        "81 / 100 / 150 GFLOP/s (least / median / most; most over least 1.85)"
