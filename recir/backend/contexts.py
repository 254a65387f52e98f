"""The native contexts a call runs with, as ctypes views.

`Context` (`passes/native_context.py`) is generated from `CONTEXT_FIELDS`,
the one declaration of the layout, and gives the offsets the generated code
reads. A call without a team takes one context (`lone_context`); a team
takes an array of them, one per thread, each pointing at the array
(`team_contexts`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from recir.backend.tape_pool import TAPES
from recir.passes.native_context import INDEX_OUT_OF_RANGE, LINE_BYTES, Context

NO_ERROR = Context()  # what a call without errors returns (never written)
NO_TASKS = -1  # a context's `spawn_budget` for a call that spawns nothing (0: the default)


def lone_context(stack_limit: int, tape: bool = False) -> Context:
    """The context of a call without a team, which spawns nothing (a task
    outside a team would run in place, at a task's cost; a task reads its
    thread's context through `contexts`); with a `tape`, its arena starts in
    a kept chunk."""
    ctx = Context(stack_limit)
    ctx.spawn_budget = NO_TASKS
    ctx.contexts = ctypes.addressof(ctx)
    if tape:
        TAPES.seed(ctx)
    return ctx


def team_contexts(threads: int, tables: Sequence[Any] = (), tape: bool = False) -> Any:
    """A context per thread of a team, each pointing to them all and to
    its table of gradient buffers (and with a `tape`, a kept arena chunk).
    Their `address` and `views` (one `Context` each) are made once: every
    team call reads them, and making a view of an array's item is not free."""
    contexts = on_lines(Context, threads)
    contexts.address = ctypes.addressof(contexts)
    contexts.views = tuple(contexts)
    for ctx in contexts:
        ctx.contexts = ctypes.addressof(contexts)
        if tape:
            TAPES.seed(ctx)
    for ctx, table in zip(contexts, tables):
        ctx.acc_copies = ctypes.addressof(table)
    contexts.tables = tables
    return contexts


def on_lines(kind: Any, count: int) -> Any:
    """`count` zeroed `kind`s in an array that starts on a cache line
    (ctypes aligns one to 8 bytes): where each thread's part is whole lines,
    no two threads write one line."""
    raw = ctypes.create_string_buffer(ctypes.sizeof(kind) * count + LINE_BYTES)
    array = (kind * count).from_address(-(-ctypes.addressof(raw) // LINE_BYTES) * LINE_BYTES)
    array.raw = raw  # the memory, alive as long as the array
    return array


def release_kept(kept: dict[int, list[Any]]) -> None:
    """A function's kept team contexts, when it goes: their tape chunks go
    back to the pool (or are freed)."""
    for same_size in kept.values():
        for contexts in same_size:
            for ctx in contexts:
                TAPES.release(ctx)
    kept.clear()


def failed_check(site: str, ctx: Context) -> str:
    """A failed check's message, its site's (`recir.error_sites`): an index
    check's with the index and the length it compared (a length of -1: a
    check that compared none)."""
    if ctx.check_length < 0:
        return site
    return site.replace(INDEX_OUT_OF_RANGE, f"index {ctx.check_index} out of range for length "
                        f"{ctx.check_length}", 1)
