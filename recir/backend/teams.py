"""Team calls: a function's team contexts, kept between calls, and the run.

A team call (`@f__team`, one call or a batch) takes a set of contexts, one
per thread, kept from an earlier call where one is free: taking a pool chunk
for each thread's tape and giving it back is then not paid every call.
Several Python threads may call one function at once, so each set serves
one call at a time (taken by a list's pop and given back by its append, both
atomic), with its own gradient copies and tables (`tables`), tape arenas and
outer-product logs. Teams with tasks are formed only by threads that live
as long as the process: others hand the team's start to a leader
(`stack.TeamLeaders` says why).
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from recir.backend import stack
from recir.backend.contexts import (
    NO_ERROR,
    NO_TASKS,
    Context,
    release_kept,
    team_contexts,
)
from recir.backend.engine import openmp, openmp_entry
from recir.backend.tape_pool import TAPES


class KeptContexts:
    """A function's team contexts free for the next call, by team size."""

    def __init__(self, arguments: int, copied: Sequence[int],
                 shapes: Sequence[tuple[tuple[int, ...], Any] | None]):
        """`arguments`: the entry's argument count; `copied`: the gradient
        buffers (argument numbers) each thread adds into its own copy of
        (`adjoint.thread_copy`), with `shapes` their shapes."""
        self.arguments, self.copied, self.shapes = arguments, list(copied), shapes
        self.kept: dict[int, list[Any]] = {}
        weakref.finalize(self, release_kept, self.kept)

    def take(self, threads: int, budget: int, args: Sequence[Any], tape: bool) -> Any:
        """A team's contexts for one call, kept from an earlier call where one
        is free (their tape arenas ready: `give_back`), else new ones (with a
        `tape` arena each); with gradient copies, thread 0's table pointing
        at the buffers in `args`; set to spawn `budget` levels down (the
        team entry passes thread 0's on)."""
        try:  # pop is atomic: calls from several threads
            contexts = self.kept[threads].pop()
        except (KeyError, IndexError):
            contexts = team_contexts(threads, self.tables(threads), tape)
        if contexts.tables:
            first = contexts.tables[0]
            for k in self.copied:
                first[k] = args[k]
        contexts.views[0].spawn_budget = budget or NO_TASKS
        return contexts

    def give_back(self, contexts: Any, tape: bool) -> None:
        """Keeps a team's contexts for the next call: each tape arena starts
        again in its first chunk (`TapePool.rearm`)."""
        if tape:
            for ctx in contexts.views:
                TAPES.rearm(ctx)
        self.kept.setdefault(len(contexts), []).append(contexts)

    def tables(self, threads: int) -> list[Any]:
        """Each thread's table of gradient buffers, indexed by argument, for a
        new set of team contexts (whose calls alone use them): threads 1..
        add into zeroed copies of their own, which the team adds into thread
        0's at its end and zeroes again (`passes/thread_copies.py`); thread
        0's entries are each call's buffers (`take`)."""
        if not self.copied or threads < 2:
            return []
        tables = [(ctypes.c_void_p * self.arguments)() for _ in range(threads)]
        for table in tables[1:]:
            table.own = [np.zeros(self.shapes[k][0], np.float32)  # type: ignore[index]
                         for k in self.copied]
            for j, k in enumerate(self.copied):
                table[k] = table.own[j].ctypes.data
        return tables


def run_team(entry: int, contexts: Any, data: Any, switch: bool) -> Context:
    """Runs a generated team function (`@f__team`) on an OpenMP team, one
    thread per context: each sets up its own (stack limit, error, tape
    arena), one runs the call(s) packed in `data` (a writable buffer of u64
    fields: two this fills, the contexts and the stack limit, then {count,
    records...}),
    the others run the tasks it spawns. Thread 0 is this thread (a team
    leader where this one may end: `stack.TeamLeaders`), on its switched
    deep stack if `switch` (and glibc has ucontext), else on the stack it is
    on. The first error found is returned with its context, and the team's
    tape bytes; NO_ERROR where there was neither."""
    def start() -> None:  # on this thread or a team leader (`stack.TeamLeaders`)
        deep = stack.switched_stack() if switch and stack.SWITCHING else None
        data[0], data[1] = contexts.address, deep.limit if deep else stack.stack_limit()
        address = ctypes.addressof(ctypes.c_uint64.from_buffer(data))
        if deep is not None:
            deep.call(openmp_entry(), entry, address, len(contexts), 0)
        else:
            openmp().GOMP_parallel(entry, address, len(contexts), 0)  # type: ignore[union-attr]

    stack.LEADERS.run(start)
    failed, tape_bytes = None, 0
    for ctx in contexts.views:
        tape_bytes += ctx.tape_bytes
        if ctx.error and failed is None:
            failed = ctx
    if failed is None and not tape_bytes:
        return NO_ERROR
    # a copy: the contexts go on to the next call
    found = Context.from_buffer_copy(failed if failed is not None else contexts.views[0])
    found.tape_bytes = tape_bytes  # the team's, for last_tape_bytes
    return found


@cache
def thread_limit() -> int:
    """The most threads the OpenMP runtime gives a team (`OMP_THREAD_LIMIT`):
    a gradient's loops lay out saved rows and copies for the team asked for."""
    library = openmp()
    return int(library.omp_get_thread_limit()) if library is not None else 1
