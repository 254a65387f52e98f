"""The context every native function takes first, and how errors are recorded.

`{i64 stack_limit, i32 error, i32 site, ptr tape_next, ptr tape_end,
ptr tape_chunks, i64 tape_bytes, ptr contexts, ptr acc_copies,
ptr outer_logs, i64 spawn_budget, i64 stack_owner, i64 depth}`,
CONTEXT_BYTES apart in an array with one context per thread (`contexts`
points at it, so a task can find its thread's): `recir/backend/runtime.py`
mirrors it. The tape fields are the per-call arena that activation frames
come from; `acc_copies` is this thread's table of gradient buffers, indexed
by the entry's argument number (`adjoint.thread_copy`), or null;
`outer_logs` this thread's logs of deferred outer products, one
`{ptr data, i64 used, i64 capacity, i64 unused}` per entry argument
(`adjoint.log_reserve`); `spawn_budget` the budget a call starts spawning
with (`invoke.spawn_budget`), 0 for the compiled default; `stack_owner` the
thread whose stack `stack_limit` was read off (a team's worker keeps it
from one call to the next); `depth` the calls this thread is nested in, in
code compiled with a max-depth (each returns it as it found it).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import i8, i32
from xdsl.ir import SSAValue

from recir.passes.loop_builder import Emitter

ERROR_STACK, ERROR_CHECK, ERROR_MEMORY = 1, 2, 3
# set by the runtime as it stops a call (Ctrl-C: `backend/interrupts.py`;
# `backend/watchdog.py`), and by prologues (`passes/prologue.py`)
ERROR_INTERRUPT, ERROR_DEPTH, ERROR_HEAP, ERROR_TIMEOUT = 4, 5, 6, 7
ERROR_OFFSET, SITE_OFFSET = 8, 12
TAPE_NEXT, TAPE_END, TAPE_CHUNKS, TAPE_BYTES = 16, 24, 32, 40
CONTEXTS, ACC_COPIES, OUTER_LOGS, SPAWN_BUDGET, STACK_OWNER = 48, 56, 64, 72, 80
DEPTH = 88
CONTEXT_BYTES = 96
LOG_BYTES = 32  # one log descriptor


def field(b: Emitter, ctx: SSAValue, offset: int) -> SSAValue:
    return b.offset(ctx, offset, i8)


def record_error(b: Emitter, ctx: SSAValue, code: int | SSAValue, site: int = 0) -> None:
    """Records the first error only (a later one may be its consequence),
    and raises `stack_limit` to the top so that every prologue fails."""
    fields = [field(b, ctx, offset) for offset in (ERROR_OFFSET, SITE_OFFSET)]
    olds = [b.load(f, 0, i32) for f in fields]
    first = b.value(arith.CmpiOp(olds[0], b.const(0, i32), "eq"))
    for f, old, value in zip(fields, olds, (code, site)):
        new = value if isinstance(value, SSAValue) else b.const(value, i32)
        b.store(b.value(arith.SelectOp(first, new, old)), f, 0)
    b.store(b.i64(-1), ctx, 0)
