"""`frontier.schedule` with natively compiled `@f__expand` and `@f__post`.

The schedule's bookkeeping (expand by depth, number by height, post by
height) is the interpreter's `Schedule`, the reference, run unchanged: its
calls of the two batched functions go to native code here
(`NativeRowFunction`), over NumPy arrays. Each call passes rows by
`{i64 rows, ptr data}` descriptors and a scratch buffer the temporaries are
bump-allocated from (the ABI is `passes/row_lowering.py`'s); the results are
copied out of it before the next call reuses it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType

from recir.backend import stack
from recir.backend.engine import Engine
from recir.backend.runtime import ArrayDescriptor, Context, c_scalar
from recir.diagnostics import RecirError
from recir.dialects import frontier
from recir.dialects.row_types import is_rows
from recir.interpreter.frontier import Schedule, dtype_of, row_shape
from recir.passes.native_context import ERROR_CHECK
from recir.passes.row_lowering import scratch_bytes_per_row
from recir.passes.rows import SCRATCH_EXHAUSTED

# A scratch buffer grows (and a call is repeated) at most this often: each
# time four times larger.
MAX_SCRATCH_RETRIES = 12


class NativeRowFunction:
    """One lowered function over rows, called with NumPy arrays."""

    def __init__(self, engine: Engine, function: func.FuncOp, sites: Sequence[str]):
        self.name = function.sym_name.data
        self.engine, self.sites = engine, list(sites)
        signature = function.function_type
        self.inputs, self.outputs = list(signature.inputs), list(signature.outputs)
        if not all(isinstance(t, TensorType) for t in self.outputs):
            raise RecirError(f"error: @{self.name}: a batched function returns tensors only")
        self.per_row = scratch_bytes_per_row(function)
        argtypes = [ctypes.c_void_p] + [
            ctypes.c_void_p if isinstance(t, TensorType) else c_scalar(t) for t in self.inputs]
        argtypes += [ctypes.c_void_p] * len(self.outputs) + [ctypes.c_void_p, ctypes.c_int64]
        self.function = ctypes.CFUNCTYPE(None, *argtypes)(engine.address(self.name))
        self.scratch = np.empty(0, np.uint8)

    def __call__(self, inputs: Sequence[Any]) -> tuple[np.ndarray, ...]:
        keep: list[Any] = []
        args = [self.argument(v, t, keep) for v, t in zip(inputs, self.inputs, strict=True)]
        descriptors = (ArrayDescriptor * max(1, len(self.outputs)))()
        statics: list[np.ndarray | None] = []
        for k, typ in enumerate(self.outputs):
            if is_rows(typ):
                args.append(ctypes.addressof(descriptors[k]))
                statics.append(None)
            else:
                out = np.empty(typ.get_shape(), dtype_of(typ))
                args.append(out.ctypes.data)
                statics.append(out)
        rows = max((len(v) for v, t in zip(inputs, self.inputs) if is_rows(t)), default=1)
        needed = self.per_row * max(rows, 1)
        for _ in range(MAX_SCRATCH_RETRIES):
            if self.scratch.nbytes < needed:
                self.scratch = np.empty(needed, np.uint8)
            ctx = Context(stack.stack_limit())
            ctx.contexts = ctypes.addressof(ctx)
            self.function(ctypes.addressof(ctx), *args, self.scratch.ctypes.data,
                          self.scratch.nbytes)
            if not self.scratch_ran_out(ctx):
                break
            needed *= 4
        self.raise_error(ctx)
        return tuple(out if out is not None else copied(descriptors[k], typ)
                     for k, (out, typ) in enumerate(zip(statics, self.outputs)))

    def argument(self, value: Any, typ: Any, keep: list[Any]) -> Any:
        if not isinstance(typ, TensorType):
            return value
        array = np.ascontiguousarray(value, dtype_of(typ))
        keep.append(array)
        if not is_rows(typ):
            if array.shape != tuple(typ.get_shape()):
                raise RecirError(f"error: @{self.name} takes {typ}, got shape {array.shape}")
            return array.ctypes.data
        if array.shape[1:] != row_shape(typ):
            raise RecirError(f"error: @{self.name} takes {typ}, got shape {array.shape}")
        descriptor = ArrayDescriptor(array.shape[0], array.ctypes.data)
        keep.append(descriptor)
        return ctypes.addressof(descriptor)

    def scratch_ran_out(self, ctx: Context) -> bool:
        return ctx.error == ERROR_CHECK and 0 <= ctx.site < len(self.sites) and (
            self.sites[ctx.site] == SCRATCH_EXHAUSTED)

    def raise_error(self, ctx: Context) -> None:
        if ctx.error == 0:
            return
        if ctx.error == ERROR_CHECK and 0 <= ctx.site < len(self.sites):
            raise RecirError(f"{self.sites[ctx.site]} (at run time, in native @{self.name})")
        raise RecirError(f"error: native @{self.name} failed with code {ctx.error}")


def copied(descriptor: ArrayDescriptor, typ: Any) -> np.ndarray:
    """A rows result out of the scratch (or an argument) it lies in."""
    dtype, shape = dtype_of(typ), row_shape(typ)
    count = descriptor.length
    if count == 0:
        return np.zeros((0, *shape), dtype)
    elements = count * int(np.prod(shape, dtype=np.int64))
    raw = (ctypes.c_char * (elements * dtype.itemsize)).from_address(descriptor.data)
    return np.frombuffer(raw, dtype).reshape(count, *shape).copy()


class NativeCalls:
    """What `Schedule` calls its functions through (an interpreter's `call_op`)."""

    def __init__(self, functions: dict[str, NativeRowFunction]):
        self.functions = functions

    def call_op(self, function: func.FuncOp, inputs: Sequence[Any]) -> tuple[np.ndarray, ...]:
        return self.functions[function.sym_name.data](inputs)


def run_schedule(op: frontier.ScheduleOp, calls: NativeCalls, moving: Sequence[Any],
                 shared: Sequence[Any]) -> tuple[np.ndarray, ...]:
    """The schedule's outputs, one row per root."""
    return Schedule(calls, op, moving, shared).run()  # type: ignore[arg-type]
