"""Waking a team's sleeping threads while Python prepares a batch.

A millisecond after its last team (`KMP_BLOCKTIME`), libomp's workers go
to sleep, and the next team call waits for the kernel to wake them, several
times as long as a call right after another; a batch of TreeRNN trees spends
about as long in Python before its team starts. So where the workers may be
asleep, the batch opens a parallel region first (`GOMP_parallel_start`,
which returns once the workers are signalled; they run free(NULL), a
no-op), prepares its calls, and closes it (`GOMP_parallel_end`): the
workers wake meanwhile and are spinning when the batch's team starts.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator
from contextlib import contextmanager

from recir.backend.engine import openmp
from recir.backend.spawn_tuner import IDLE_S

_ended = [-float("inf")]  # when this process's last team call returned (perf_counter)
_NO_OP = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value  # free(NULL) does nothing


def team_ended() -> None:
    """Notes that a team call has just returned: its workers spin a while."""
    _ended[0] = time.perf_counter()


def last_team_end() -> float:
    """When this process's last team call returned (perf_counter seconds)."""
    return _ended[0]


@contextmanager
def waking(threads: int) -> Iterator[None]:
    """Wakes a team of `threads` while the body runs, where one may have
    gone to sleep since the last team call. The body must not start a team."""
    library = openmp()
    if library is None or threads < 2 or time.perf_counter() - _ended[0] < IDLE_S:
        yield
        return
    library.GOMP_parallel_start(ctypes.c_void_p(_NO_OP), None, ctypes.c_uint(threads))
    try:
        yield
    finally:
        library.GOMP_parallel_end()
        team_ended()
