"""`frontier.schedule` with natively compiled `@f__expand` and `@f__post`.

The schedule's bookkeeping (expand by depth, number by height, post by
height) is the interpreter's `Schedule`, the reference, run unchanged: its
calls of the two batched functions go to native code here
(`NativeRowFunction`), over NumPy arrays. Each call passes rows by
`{i64 rows, ptr data}` descriptors and a scratch buffer the temporaries lie
in, each in a slot reused after its last use (the ABI is
`passes/row_lowering.py`'s); the results are copied out of it before the
next call reuses it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType

from recir.backend import interrupts, stack
from recir.backend.arguments import ArrayDescriptor, c_scalar
from recir.backend.array_address import data_address
from recir.backend.contexts import Context, failed_check, lone_context
from recir.backend.engine import Engine
from recir.backend.frontier_summary import RowFacts, row_facts
from recir.diagnostics import RecirError
from recir.dialects import tape
from recir.dialects.row_types import is_rows
from recir.interpreter.frontier import dtype_of, row_shape
from recir.passes.native_context import (ERROR_CHECK, ERROR_HEAP, ERROR_INTERRUPT, ERROR_MEMORY,
                                         ERROR_STACK)
from recir.passes.rows import SCRATCH_EXHAUSTED

# A scratch buffer grows (and a call is repeated) at most this often: each
# time four times larger.
MAX_SCRATCH_RETRIES = 12
FORWARD = "_fwd"


class NativeRowFunction:
    """One lowered function over rows, called with NumPy arrays."""

    def __init__(self, engine: Engine, function: func.FuncOp, sites: Sequence[str],
                 per_row: int, facts: RowFacts | None = None):
        """`per_row`: the scratch bytes a row of the largest frontier takes
        (the object's metadata); `facts`: `function`'s (`row_facts`), given
        where it is a declaration."""
        self.name = function.sym_name.data
        self.engine, self.sites = engine, list(sites)
        signature = function.function_type
        self.inputs, self.outputs = list(signature.inputs), list(signature.outputs)
        if not all(isinstance(t, TensorType) for t in self.outputs):
            raise RecirError(f"error: @{self.name}: a batched function returns tensors only")
        self.per_row = per_row
        self.facts = facts or row_facts(function)
        # a backward adds into its arguments: a call cut short and repeated
        # would add twice, so it is not repeated (the size is an upper bound)
        self.retries = 1 if self.facts.accumulates else MAX_SCRATCH_RETRIES
        argtypes = [ctypes.c_void_p] + [ctypes.c_void_p if isinstance(
            t, TensorType | tape.FrameType) else c_scalar(t) for t in self.inputs]
        argtypes += [ctypes.c_void_p] * len(self.outputs) + [ctypes.c_void_p, ctypes.c_int64]
        self.function = ctypes.CFUNCTYPE(None, *argtypes)(engine.address(self.name))
        self.scratch = np.empty(0, np.uint8)
        self.scratch_at = data_address(self.scratch)
        # per input: (is rows, dtype, the shape or row shape it must have), None
        # for a scalar
        self.kinds = [(is_rows(t), dtype_of(t), row_shape(t) if is_rows(t) else tuple(
            t.get_shape())) if isinstance(t, TensorType) else None for t in self.inputs]
        # the rows inputs' descriptors and the results' slots: made once, a
        # call fills them (calls of one function never overlap: see
        # `FrontierFunction.calls`)
        self.row_descriptors = (ArrayDescriptor * max(1, sum(
            1 for k in self.kinds if k is not None and k[0])))()
        self.descriptors = (ArrayDescriptor * max(1, len(self.outputs)))()
        self.rows_outputs = [is_rows(t) for t in self.outputs]
        self.layouts = [(dtype_of(t), row_shape(t), int(np.prod(row_shape(t), dtype=np.int64)))
                        if is_rows(t) else None for t in self.outputs]
        # a uniform input (a parameter) is the same array call after call:
        # its address is looked up once per array (kept, so its id stays its own)
        self.known: list[tuple[Any, int, tuple[int, ...]] | None] = [None] * len(self.inputs)

    def __call__(self, inputs: Sequence[Any]) -> tuple[np.ndarray, ...]:
        keep: list[Any] = []
        args, rows = self.arguments(inputs, keep)
        statics: list[np.ndarray | None] = []
        for k, typ in enumerate(self.outputs):
            if self.rows_outputs[k]:
                args.append(ctypes.addressof(self.descriptors[k]))
                statics.append(None)
            else:
                out = np.empty(typ.get_shape(), dtype_of(typ))
                args.append(data_address(out))
                statics.append(out)
        needed = self.per_row * max(rows, 1)
        for _ in range(self.retries):
            if self.scratch.nbytes < needed:
                self.scratch = np.empty(needed, np.uint8)
                self.scratch_at = data_address(self.scratch)
            for descriptor in self.descriptors:  # no room given: results go to the scratch
                descriptor.length, descriptor.data = 0, 0
            ctx = lone_context(stack.stack_limit())
            key = interrupts.begin(ctx)
            try:
                self.function(ctypes.addressof(ctx), *args, self.scratch_at, self.scratch.nbytes)
            finally:
                interrupts.end(key)
            if not self.scratch_ran_out(ctx):
                break
            needed *= 4
        self.raise_error(ctx)
        return tuple(out if out is not None else self.copied(k)
                     for k, out in enumerate(statics))

    def arguments(self, inputs: Sequence[Any], keep: list[Any]) -> tuple[list[Any], int]:
        """The native arguments for `inputs` (kept alive by `keep`), and the
        most rows any input has: the frontier the scratch is sized by."""
        if len(inputs) != len(self.kinds):
            raise RecirError(f"error: @{self.name} takes {len(self.kinds)} inputs, "
                             f"got {len(inputs)}")
        used, rows = 0, 1
        args: list[Any] = []
        for k, (value, kind) in enumerate(zip(inputs, self.kinds)):
            if kind is None:
                args.append(value)
                continue
            known = self.known[k]
            if known is not None and known[0] is value and value.shape == known[2]:
                args.append(known[1])
                continue
            batched, _, shape = kind
            array = self.checked(k, value, keep)
            if not batched:
                args.append(data_address(array))
                if array is value:
                    self.known[k] = (value, args[-1], shape)
                continue
            descriptor = self.row_descriptors[used]
            descriptor.length, descriptor.data = array.shape[0], data_address(array)
            args.append(ctypes.addressof(descriptor))
            used += 1
            rows = max(rows, array.shape[0])
        return args, rows

    def checked(self, k: int, value: Any, keep: list[Any]) -> np.ndarray:
        """Input `k` as a C-contiguous array of its type (a converted copy
        kept alive by `keep`), its shape checked."""
        kind = self.kinds[k]
        assert kind is not None
        batched, dtype, shape = kind
        array = value
        if not (type(value) is np.ndarray and value.dtype == dtype
                and value.flags.c_contiguous):
            array = np.ascontiguousarray(value, dtype)
            keep.append(array)
        if (array.shape[1:] if batched else array.shape) != shape:
            raise RecirError(f"error: @{self.name} takes an array of shape "
                             f"{('?', *shape) if batched else shape}, got {array.shape}")
        return array

    def copied(self, k: int) -> np.ndarray:
        """Rows result `k` out of the scratch (or the argument) it lies in."""
        dtype, shape, width = self.layouts[k]  # type: ignore[misc]
        descriptor = self.descriptors[k]
        count = descriptor.length
        if count == 0:
            return np.zeros((0, *shape), dtype)
        nbytes = count * width * dtype.itemsize
        start = descriptor.data - self.scratch_at
        if 0 <= start and start + nbytes <= self.scratch.nbytes:
            raw = self.scratch[start:start + nbytes]
        else:
            raw = np.frombuffer((ctypes.c_char * nbytes).from_address(descriptor.data),
                                np.uint8)
        rows = raw.view(dtype).reshape(count, *shape)
        return rows.copy()

    def scratch_ran_out(self, ctx: Context) -> bool:
        return ctx.error == ERROR_CHECK and 0 <= ctx.site < len(self.sites) and (
            self.sites[ctx.site] == SCRATCH_EXHAUSTED)

    def raise_error(self, ctx: Context) -> None:
        if ctx.error == 0:
            return
        if ctx.error == ERROR_INTERRUPT:  # (Ctrl-C: `interrupts`, as `NativeFunction`'s)
            raise KeyboardInterrupt(f"native @{self.name} was interrupted")
        if ctx.error == ERROR_CHECK and 0 <= ctx.site < len(self.sites):
            raise RecirError(f"{failed_check(self.sites[ctx.site], ctx)} (at run time, in native "
                             f"@{self.name})")
        if ctx.error in (ERROR_MEMORY, ERROR_HEAP):  # (a log's or a buffer's allocation)
            raise RecirError(f"error: native @{self.name} ran out of memory")
        if ctx.error == ERROR_STACK:  # (calls go to a deep stack first: `stack.with_room`)
            raise RecirError(f"error: native @{self.name} ran out of its thread's stack")
        raise RecirError(f"error: native @{self.name} failed with code {ctx.error}")


class NativeCalls:
    """What `Schedule` calls its functions through (an interpreter's `call_op`)."""

    def __init__(self, functions: dict[str, NativeRowFunction]):
        self.functions = functions
        self.loops: dict[str, Any] = {}  # a function's `NativeLoop`, where it has one
        self.callees: dict[Any, func.FuncOp] = {}  # the schedule's functions, by name
        self.kept: dict[str, Any] = {}  # arrays a schedule keeps between calls (`kept_plans`)
        self.folder: Path | None = None  # the functions' cache folder: the kernels' too

    def call_op(self, function: func.FuncOp, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """A batched function's `_fwd` saves nothing in its frame, so it is
        compiled without one (`frontier_gradients.without_frame`): its
        results and saved rows come back, and None stands for the frame."""
        name = function.sym_name.data
        native = self.functions[name]
        if not name.endswith(FORWARD):
            return native(inputs)
        return (*native(inputs), None)
