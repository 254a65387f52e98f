"""The native runtime's process-wide settings: `recir.configure_runtime`.

They reach the OpenMP library while recir loads it (its first team) and
nowhere else: importing recir leaves the process environment alone. libgomp
and libomp read them only from the environment, libgomp as it loads and
libomp on its first call, so `openmp_environment` sets them for that moment
and puts the environment back. A variable the user has set (`OMP_STACKSIZE`,
`KMP_BLOCKTIME`) wins over the setting, as OpenMP's own variables always do.
"""

from __future__ import annotations

import dataclasses
import mmap
import numbers
import os
from collections.abc import Iterator
from contextlib import contextmanager

from recir.backend.stack import DEEP_STACK_BYTES, MARGIN_BYTES
from recir.diagnostics import RecirError


@dataclasses.dataclass(frozen=True)
class RuntimeSettings:
    # OpenMP workers run tasks that recurse as deep as the caller's deep-stack
    # thread may (a task spawned near the root recurses through the rest of a
    # deep tree): the same size, reserved, not committed.
    worker_stack_bytes: int = DEEP_STACK_BYTES
    # libomp's workers spin 200 ms after a team by default, taking a core
    # from Python between calls; 1 ms keeps team calls ahead of one thread
    # (`python bench/run.py parallel`). libgomp has no such setting.
    block_time_ms: int = 1


_settings = [RuntimeSettings()]
_applied: list[RuntimeSettings] = []  # the settings the loaded library got


def current() -> RuntimeSettings:
    return _settings[0]


def configure(**changes: int) -> RuntimeSettings:
    """Change the settings (`worker_stack_bytes`, `block_time_ms`) before the
    OpenMP library loads; the library cannot take them afterwards."""
    fields = {f.name for f in dataclasses.fields(RuntimeSettings)}
    for name, value in changes.items():
        if name not in fields:
            raise RecirError(f"error: unknown runtime setting '{name}' "
                             f"(choose from {sorted(fields)})")
        # (a bool reached libomp as KMP_BLOCKTIME=True, which it replaced by 200 ms)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise RecirError(f"error: runtime setting {name} must be a non-negative "
                             f"integer, got {value!r}")
        if name == "worker_stack_bytes" and value < MARGIN_BYTES:
            # (every prologue on a worker would fail: its limit lies above the stack)
            raise RecirError(f"error: runtime setting worker_stack_bytes {value} is less "
                             f"than the {MARGIN_BYTES >> 20} MiB the stack checks keep "
                             "below the deepest frame")
        if name == "worker_stack_bytes" and value > (
                memory := os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")):
            # (libomp aborts the process)
            raise RecirError(f"error: runtime setting worker_stack_bytes {value} is more "
                             f"than this machine's memory ({memory >> 20} MiB)")
    wanted = dataclasses.replace(current(), **{k: int(v) for k, v in changes.items()})
    if _applied and wanted != _applied[0]:
        raise RecirError("error: the OpenMP runtime is already loaded with "
                         f"{_applied[0]}; call recir.configure_runtime before the "
                         "first threaded compile")
    _settings[0] = wanted
    return wanted


@contextmanager
def openmp_environment() -> Iterator[None]:
    """The settings as OpenMP variables while the library loads and reads
    them, then the environment as it was."""
    settings = current()
    values = {"OMP_STACKSIZE": f"{max(settings.worker_stack_bytes >> 10, 1)}K",
              "KMP_BLOCKTIME": str(settings.block_time_ms)}
    added = [name for name in values if name not in os.environ]
    for name in added:
        os.environ[name] = values[name]
    try:
        yield
        _applied[:] = [settings]
    finally:
        for name in added:
            del os.environ[name]


_workers_fit = [1]  # the most threads whose workers' stacks were found to fit
# Linux's values, where Python's mmap module names none
MAP_NORESERVE, PROT_NONE = getattr(mmap, "MAP_NORESERVE", 0x4000), 0


def check_worker_room(threads: int) -> None:
    """That this process can reserve the stacks of a team's other threads
    (an address-space limit such as `ulimit -v`): libgomp and libomp abort
    the process when they cannot start a worker ("OMP: Error #34")."""
    stack = current().worker_stack_bytes
    if threads <= _workers_fit[0] or "OMP_STACKSIZE" in os.environ or stack == 0:
        return
    size = (threads - 1) * stack
    try:
        mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE,
                  prot=PROT_NONE).close()
    except OSError:
        raise RecirError(f"error: this process cannot reserve {size >> 20} MiB for the stacks "
                         f"of {threads - 1} OpenMP worker(s) ({stack >> 20} MiB each: an "
                         "address-space limit?): ask for fewer threads, or give the workers "
                         "smaller stacks: recir.configure_runtime(worker_stack_bytes=...)"
                         ) from None
    _workers_fit[0] = threads
