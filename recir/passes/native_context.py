"""The context every native function takes first, and how errors are recorded.

`CONTEXT_FIELDS` is the one declaration of its layout: the runtime's ctypes
`Context`, the offsets the passes emit (ctypes' layout of it, C's) and the
LLVM struct type (`context_type`) are all generated from it. Contexts sit
CONTEXT_BYTES apart in an array with one per thread (`contexts` points at
it, so a task can find its thread's), each on whole cache lines of its own
(`LINE_BYTES`): a thread writes its own during a call (its stack limit
around frames with heap buffers, the tape's next frame, its depth, its
tables) and reads it in every prologue, so contexts sharing a line would
pass it between cores. The tape fields are the per-call
arena that activation frames come from; `acc_copies` is this thread's table
of gradient buffers, indexed by the entry's argument number
(`adjoint.thread_copy`), or null; `outer_logs` this thread's logs of
deferred outer products, one `{ptr data, i64 used, i64 capacity, i64
unused}` per entry argument (`adjoint.log_reserve`); `spawn_budget` the
budget a call starts spawning with (`invoke.spawn_budget`), 0 for the
compiled default; `stack_owner` the thread whose stack `stack_limit` was
read off (a team's worker keeps it from one call to the next); `depth` the
calls this thread is nested in, in code compiled with a max-depth (each
returns it as it found it); `row_logs` this thread's table of logged outer
products (`row_logs.open_logs`), or null; `packed` its table of weights
packed for the products of a height loop's call (`gemm_cached.open_table`),
or null; `check_index` and `check_length` what a failed index check
compared (`INDEX_OUT_OF_RANGE`).
"""

from __future__ import annotations

import ctypes
from typing import Any

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i8, i32, i64
from xdsl.ir import Attribute, SSAValue

from recir.passes.loop_builder import PTR, Emitter

# (name, kind) in memory order; a kind is "u64", "i64", "i32" or "ptr"
CONTEXT_FIELDS: tuple[tuple[str, str], ...] = (
    ("stack_limit", "u64"), ("error", "i32"), ("site", "i32"),
    ("tape_next", "ptr"), ("tape_end", "ptr"), ("tape_chunks", "ptr"),
    ("tape_bytes", "u64"), ("contexts", "ptr"), ("acc_copies", "ptr"),
    ("outer_logs", "ptr"), ("spawn_budget", "i64"), ("stack_owner", "u64"),
    ("depth", "u64"), ("row_logs", "ptr"), ("packed", "ptr"),
    ("check_index", "i64"), ("check_length", "i64"))
C_TYPES: dict[str, Any] = {"u64": ctypes.c_uint64, "i64": ctypes.c_int64,
                           "i32": ctypes.c_int32, "ptr": ctypes.c_void_p}


LINE_BYTES = 64  # a cache line: no two contexts share one


class Fields(ctypes.Structure):
    """The fields (`CONTEXT_FIELDS`), each naturally aligned and the size a
    multiple of the widest, as C lays out the struct."""

    _fields_ = [(name, C_TYPES[kind]) for name, kind in CONTEXT_FIELDS]


PADDING = -ctypes.sizeof(Fields) % LINE_BYTES


class Context(ctypes.Structure):
    """One thread's context: the fields, padded to whole cache lines."""

    _fields_ = [*Fields._fields_, ("padding", ctypes.c_uint8 * PADDING)]


def context_type() -> llvm.LLVMStructType:
    """The context as an LLVM struct (the layout LLVM gives it is ctypes':
    `test_native_context.py` checks)."""
    types: dict[str, Attribute] = {"u64": i64, "i64": i64, "i32": i32, "ptr": PTR}
    return llvm.LLVMStructType.from_type_list([*(types[kind] for _, kind in CONTEXT_FIELDS),
                                               llvm.LLVMArrayType(PADDING, i8)])


OFFSETS = {name: getattr(Context, name).offset for name, _ in CONTEXT_FIELDS}
CONTEXT_BYTES = ctypes.sizeof(Context)

# `stack_limit` is a thread's stack bottom plus this margin for the deepest
# frame: the runtime (`backend/stack.py`) and the team entry (`entry_points.py`)
# both set it.
MARGIN_BYTES = 2 << 20
# The stack deep recursions run on (`backend/stack.py`): reserved, not committed.
DEEP_STACK_BYTES = 1 << 30
ERROR_STACK, ERROR_CHECK, ERROR_MEMORY = 1, 2, 3
# set by the runtime as it stops a call (Ctrl-C: `backend/interrupts.py`;
# `backend/watchdog.py`), and by prologues (`passes/prologue.py`)
ERROR_INTERRUPT, ERROR_DEPTH, ERROR_HEAP, ERROR_TIMEOUT = 4, 5, 6, 7
ERROR_OFFSET, SITE_OFFSET = OFFSETS["error"], OFFSETS["site"]
TAPE_NEXT, TAPE_END = OFFSETS["tape_next"], OFFSETS["tape_end"]
TAPE_CHUNKS, TAPE_BYTES = OFFSETS["tape_chunks"], OFFSETS["tape_bytes"]
CONTEXTS, ACC_COPIES, OUTER_LOGS = OFFSETS["contexts"], OFFSETS["acc_copies"], OFFSETS["outer_logs"]
SPAWN_BUDGET, STACK_OWNER, DEPTH = OFFSETS["spawn_budget"], OFFSETS["stack_owner"], OFFSETS["depth"]
ROW_LOGS, PACKED = OFFSETS["row_logs"], OFFSETS["packed"]
CHECK_INDEX, CHECK_LENGTH = OFFSETS["check_index"], OFFSETS["check_length"]
# the message of a bounds check (`tmath_kernels.checked`), whose failure
# records the index and the length it was checked against
INDEX_OUT_OF_RANGE = "index out of range"
LOG_BYTES = 32  # one log descriptor


def field(b: Emitter, ctx: SSAValue, offset: int) -> SSAValue:
    return b.offset(ctx, offset, i8)


def record_error(b: Emitter, ctx: SSAValue, code: int | SSAValue, site: int | SSAValue = 0,
                 *found: SSAValue) -> None:
    """Records the first error only (a later one may be its consequence),
    with what a failed index check `found` (its index and length), and
    raises `stack_limit` to the top so that every prologue fails."""
    kinds = ((ERROR_OFFSET, i32), (SITE_OFFSET, i32), (CHECK_INDEX, i64), (CHECK_LENGTH, i64))
    written = [(field(b, ctx, offset), typ, value)
               for (offset, typ), value in zip(kinds, (code, site, *found))]
    olds = [b.load(at, 0, typ) for at, typ, _ in written]
    first = b.value(arith.CmpiOp(olds[0], b.const(0, i32), "eq"))
    for (at, typ, value), old in zip(written, olds):
        new = value if isinstance(value, SSAValue) else b.const(value, typ)
        b.store(b.value(arith.SelectOp(first, new, old)), at, 0)
    b.store(b.i64(-1), ctx, 0)
