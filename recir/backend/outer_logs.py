"""The logs of a call's deferred outer products, added after the call.

With `defer-outer-bytes` (`passes/outer_log.py`), each thread of a call
appends a record `dy ++ x` to its log for a big weight gradient where it
would have added the outer product into the buffer (which a node at a
time would read and write whole, from memory); after the call a buffer's
logs are added by one product, each thread of its team a block of the
buffer through every log.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recir.backend.contexts import on_lines
from recir.backend.kernels import gemm
from recir.backend.tape_pool import LOGS
from recir.passes.native_context import LINE_BYTES


class LogDescriptor(ctypes.Structure):
    """One thread's log for one argument (`recir/passes/outer_log.py`)."""

    _fields_ = [("data", ctypes.c_void_p), ("used", ctypes.c_uint64),
                ("capacity", ctypes.c_uint64), ("unused", ctypes.c_uint64)]


class OuterLogs:
    """The logs of deferred outer products of one call: a table of
    descriptors per context (one per argument), each log `count` records of
    `dy ++ x`. `add_into` adds `DY^T X` into each logged gradient buffer (one
    product per buffer over every thread's log, `gemm.add_outer_logs`,
    through the address the call was given, cut across the team's threads:
    the buffer read and written once, not once a thread); the logs' buffers
    come from and go back to `LOGS`, the largest to the largest weights.
    `team_work`: the least multiply-adds a product splits across the team
    for (`policy.team_min_work`, found once by the caller: not a read of
    the kept policy per product); `folder`: the function's cache folder,
    where the product's kernels are kept."""

    def __init__(self, contexts: Sequence[Any], arguments: int,
                 logged: Sequence[tuple[int, int, int]], team_work: int = -1,
                 folder: Path | None = None):
        self.logged, self.threads = logged, len(contexts)
        self.team_work, self.folder = team_work, folder
        # each thread's descriptors on whole cache lines (`used` grows at every record)
        size = ctypes.sizeof(LogDescriptor)
        on_a_line = LINE_BYTES // size
        self.per = -(-arguments // on_a_line) * on_a_line
        self.table = on_lines(LogDescriptor, len(contexts) * self.per) if logged else None
        if self.table is None:
            return
        base = ctypes.addressof(self.table)
        for i, ctx in enumerate(contexts):
            ctx.outer_logs = base + i * self.per * size
        for k, _, _ in sorted(logged, key=lambda kept: -kept[1] * kept[2]):
            for i in range(len(contexts)):
                chunk = LOGS.take()
                if chunk is not None:
                    log = self.table[i * self.per + k]
                    log.data, log.capacity = chunk

    def add_into(self, args: Sequence[Any]) -> None:
        """Each logged gradient buffer += every thread's log, by one
        product whose team reads and writes the buffer once."""
        if self.table is None:
            return
        for k, rows, cols in self.logged:
            logs = [log for log in self.table[k::self.per] if log.data]
            stride = rows + cols
            segments = [(log.data, stride, log.data + 4 * rows, stride, log.used // (4 * stride))
                        for log in logs if log.used]
            if segments:  # the tn kernel: faster than OpenBLAS here (`bench/run.py smallgemm`)
                gemm.add_outer_logs(args[k], rows, cols, np.array(segments, np.int64),
                                    self.threads, self.team_work, self.folder)
            for log in logs:
                LOGS.keep(log.data, log.capacity)
                log.data, log.used, log.capacity = None, 0, 0


NO_LOGS = OuterLogs((), 0, ())  # a call without deferred outer products

