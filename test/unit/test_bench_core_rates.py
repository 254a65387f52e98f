"""bench/core_rates.py: each core's SGEMM rate, alone and with all cores busy."""

import math
import os

from bench import core_rates

# a child that reports where it runs instead of a rate (the template's fields)
WHERE = """
import json, os, time
os.sched_setaffinity(0, {core})
shape, seconds = {shape}, {seconds}
time.sleep(max(0.0, {start} - time.time()))
print(json.dumps(sorted(os.sched_getaffinity(0))))
"""


def test_each_child_is_pinned_to_its_core_and_reported_in_order(monkeypatch):
    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(core_rates, "CHILD", WHERE)
    assert core_rates.rates(cores[::-1], seconds=0.0) == [[c] for c in cores[::-1]]


def test_a_real_childs_rate_is_a_positive_rate():
    (found,) = core_rates.rates([min(os.sched_getaffinity(0))], seconds=0.05)
    assert math.isfinite(found) and 0 < found < 1e5  # GFLOP/s of one core


def test_the_spread_names_least_median_most_and_their_ratio():
    assert core_rates.spread([100.0, 150.0, 81.0]) == \
        "81 / 100 / 150 GFLOP/s (least / median / most; most over least 1.85)"
