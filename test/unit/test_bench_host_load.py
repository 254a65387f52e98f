"""bench/host_load.py: other processes' CPU and the hypervisor's steal over a span."""

import subprocess
import sys
import time

from bench import host_load


def stat_line(user, system, idle, steal, irq=0):
    return f"cpu  {user} 0 {system} {idle} 0 {irq} 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"


def test_the_machines_ticks_less_this_process_over_the_wall_time(tmp_path, monkeypatch):
    """From two readings of /proc/stat: busy ticks (user, nice, system, irq,
    softirq) in seconds less this process's CPU seconds, over the wall
    seconds; steal over all ticks counted through the span."""
    stat = tmp_path / "stat"
    stat.write_text(stat_line(100, 50, 1000, 10))
    clock = iter([10.0, 11.0])
    own = iter([2.0, 2.5])
    monkeypatch.setattr(host_load.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(host_load, "own_seconds", lambda: next(own))
    load = host_load.HostLoad(str(stat))
    load.tick = 100
    with load:
        stat.write_text(stat_line(300, 90, 1100, 30, irq=10))
    # busy: 200 + 40 + 10 ticks = 2.5 s, less 0.5 s of our own, over 1 s
    assert abs(load.others - 2.0) < 1e-9
    assert abs(load.steal - 20 / (250 + 100 + 20)) < 1e-9
    assert load.describe() == "other processes 2.00 cores, steal 5.4%"


def test_an_unreadable_stat_leaves_the_load_unknown(tmp_path):
    with host_load.HostLoad(str(tmp_path / "missing")) as load:
        pass
    assert load.others is None and load.steal is None
    assert load.describe() == "host load unknown"


def test_a_busy_child_process_counts_as_another_process():
    """A child spinning through the span, not waited for inside it, is
    another process's CPU; this process sleeps meanwhile."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started and spinning
        with host_load.HostLoad() as load:
            time.sleep(0.6)
    finally:
        child.kill()
        child.wait()
    assert load.others is not None and load.others >= 0.3
    assert 0 <= load.steal <= 1


def test_a_child_that_is_part_of_the_measure_is_not_another_process():
    """The core probe's loops run between a span's rounds: their CPU time,
    given as `ours`, is taken off the others'."""
    from bench import core_probe
    with core_probe.CoreProbe(1, seconds=0.3) as probe:
        before, start = probe.cpu_seconds(), time.perf_counter()
        with host_load.HostLoad() as counted, host_load.HostLoad(ours=probe.cpu_seconds) as load:
            probe.ceiling()  # 0.6 s of one core, the loop's
        wall, used = time.perf_counter() - start, probe.cpu_seconds() - before
    assert used > 0.05  # (the loop ran; under load it gets less than 0.6 s)
    assert counted.others is not None and load.others is not None
    # the same span, less the loop's CPU over the span (a loaded host's
    # span is longer than 0.6 s; the counts are clock ticks)
    assert abs(counted.others - load.others - used / wall) < 0.1
