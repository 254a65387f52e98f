"""bench/core_latency.py: the cores' round trip, built with cc; `team_state`'s states."""

import os
import shutil

import pytest

from bench import core_latency

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@needs_cc
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core")
def test_each_other_core_gets_a_round_trip_and_the_affinity_is_put_back():
    before = os.sched_getaffinity(0)
    found = core_latency.round_trips(rounds=2000)
    assert os.sched_getaffinity(0) == before
    assert sorted(found) == sorted(before)[1:]
    # a round trip is two cache-line transfers: more than a nanosecond, well
    # under the 100 us a descheduled thread would take
    assert all(1 < ns < 1e5 for ns in found.values())


@needs_cc
def test_a_core_it_cannot_pin_to_is_no_figure(monkeypatch):
    assert core_latency.library()(min(os.sched_getaffinity(0)), 1023, 100) < 0
    monkeypatch.setattr(core_latency.os, "sched_getaffinity", lambda _: {0, 1023})
    assert core_latency.round_trips(rounds=100) == {}


def test_one_core_or_no_compiler_is_unknown(monkeypatch):
    monkeypatch.setattr(core_latency.os, "sched_getaffinity", lambda _: {3})
    assert core_latency.round_trips() == {}
    monkeypatch.setattr(core_latency.os, "sched_getaffinity", lambda _: {0, 1})
    monkeypatch.setattr(core_latency, "library", lambda: None)
    assert core_latency.round_trips() == {}
    assert core_latency.describe({}) == "unknown"
    assert core_latency.describe({1: 50.0, 2: 300.0, 3: 100.0}) == "50-300 ns (median 100)"
    assert core_latency.describe({1: 57.4}) == "57 ns"


def test_a_team_round_counts_in_a_state_only_where_both_round_trips_agree():
    from bench.team_state import state_of

    assert state_of(55, 70, 150) == "one L3"
    assert state_of(340, 150, 150) == "two L3s"
    assert state_of(60, 350, 150) is None and state_of(350, 60, 150) is None
