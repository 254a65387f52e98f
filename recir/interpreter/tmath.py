"""NumPy semantics for every `tmath` op: the oracle later backends are checked against.

Tensors are float32 ndarrays, structure arrays int32 ndarrays; f32 scalars
are Python floats rounded to float32, integers Python ints. Out-of-range
indices raise `InterpretationError` rather than wrapping around.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.utils.exceptions import InterpretationError

from recir.dialects import tmath
from recir.dialects.row_types import is_rows

_UNARY: dict[type, Callable[[np.ndarray], np.ndarray]] = {
    tmath.NegOp: np.negative,
    tmath.SigmoidOp: lambda x: 1.0 / (1.0 + np.exp(-x)),
    tmath.TanhOp: np.tanh,
    tmath.ReluOp: lambda x: np.where(x < 0, np.float32(0), x),  # (-0 stays, as native)
    tmath.ExpOp: np.exp,
    tmath.LogOp: np.log,
}

_BINARY: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    tmath.AddOp: np.add,
    tmath.SubOp: np.subtract,
    tmath.MulOp: np.multiply,
    tmath.DivOp: np.divide,
}


def f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def checked_index(index: int, length: int) -> int:
    if not 0 <= index < length:
        raise InterpretationError(f"index {index} out of range for length {length}")
    return index


def checked_rows(index: np.ndarray, length: int) -> np.ndarray:
    """Rows of indices, each in `[0, length)` (the row form of `checked_index`)."""
    index = np.asarray(index)
    bad = (index < 0) | (index >= length)
    if bad.any():
        raise InterpretationError(f"index {int(index[bad][0])} out of range for length "
                                  f"{length} (row {int(np.argmax(bad))})")
    return index


def per_row(x: np.ndarray) -> np.ndarray:
    """Rows as a matrix: each row's elements flattened."""
    return x.reshape(len(x), int(np.prod(x.shape[1:])))


class TMathFunctions(InterpreterFunctions):
    """Each op also runs its row form (`row_types`): one result row per row."""

    @impl(tmath.FusedOp)
    def run_fused(self, interp: Interpreter, op: tmath.FusedOp, args: Any):
        """The body on whole arrays: exactly what the unfused ops computed."""
        return interp.run_ssacfg_region(op.body, args, "fused")

    @impl_terminator(tmath.YieldOp)
    def run_yield(self, interp: Interpreter, op: tmath.YieldOp, args: Any):
        return ReturnedValues(args), ()

    @impl(tmath.ConstantOp)
    def run_constant(self, interp: Interpreter, op: tmath.ConstantOp, args: Any):
        shape = tmath.shape_of(op.result)
        values = f32(op.value.get_values())  # (a splat fills any shape, rank 0 too)
        return (np.full(shape, values[0], np.float32) if values.size == 1
                else values.reshape(shape),)

    @impl(tmath.FillOp)
    def run_fill(self, interp: Interpreter, op: tmath.FillOp, args: Any):
        if is_rows(op.result):  # one scalar per row
            scalar = np.asarray(args[0], np.float32)
            shape = (len(scalar), *tmath.shape_of(op.result)[1:])
            return (np.broadcast_to(scalar.reshape(-1, *[1] * (len(shape) - 1)), shape).copy(),)
        return (np.full(tmath.shape_of(op.result), args[0], dtype=np.float32),)

    @impl(tmath.MatvecOp)
    def run_matvec(self, interp: Interpreter, op: tmath.MatvecOp, args: Any):
        matrix, vector = args
        return (f32(vector @ matrix.T if vector.ndim == 2 else matrix @ vector),)

    @impl(tmath.MatmulOp)
    def run_matmul(self, interp: Interpreter, op: tmath.MatmulOp, args: Any):
        return (f32(args[0] @ args[1]),)

    @impl(tmath.BilinearOp)
    def run_bilinear(self, interp: Interpreter, op: tmath.BilinearOp, args: Any):
        v, x, y = args
        return (f32(np.einsum("...i,kij,...j->...k", x, v, y)),)

    @impl(tmath.ConcatOp)
    def run_concat(self, interp: Interpreter, op: tmath.ConcatOp, args: Any):
        return (np.concatenate(args, axis=1 if is_rows(op.result) else 0),)

    @impl(tmath.SliceOp)
    def run_slice(self, interp: Interpreter, op: tmath.SliceOp, args: Any):
        start = op.offset.value.data
        if is_rows(op.result):
            size = tmath.shape_of(op.result)[1]
            return (args[0][:, start : start + size].copy(),)
        size = tmath.shape_of(op.result)[0]
        return (args[0][start : start + size].copy(),)

    @impl(tmath.GatherOp)
    def run_gather(self, interp: Interpreter, op: tmath.GatherOp, args: Any):
        table, index = args
        if isinstance(index, np.ndarray):
            return (table[checked_rows(index, table.shape[0])],)
        return (table[checked_index(index, table.shape[0])].copy(),)

    @impl(tmath.ExtractOp)
    def run_extract(self, interp: Interpreter, op: tmath.ExtractOp, args: Any):
        array, index = args
        if isinstance(index, np.ndarray):
            return (array[checked_rows(index, array.shape[0])],)
        value = array[checked_index(index, array.shape[0])]
        return (int(value) if array.dtype.kind in "iu" else float(value),)

    @impl(tmath.SizeOp)
    def run_size(self, interp: Interpreter, op: tmath.SizeOp, args: Any):
        return (int(args[0].shape[0]),)

    @impl(tmath.SumOp)
    def run_sum(self, interp: Interpreter, op: tmath.SumOp, args: Any):
        if is_rows(op.result):
            return (per_row(args[0]).sum(axis=1, dtype=np.float32),)
        return (float(np.float32(args[0].sum(dtype=np.float32))),)

    @impl(tmath.MaxOp)
    def run_max(self, interp: Interpreter, op: tmath.MaxOp, args: Any):
        """The element argmax picks (the first largest, or the first NaN), as
        native code's loop keeps it: NumPy's max of 0 and -0 is either."""
        if is_rows(op.result):
            rows = per_row(args[0])
            return (rows[np.arange(len(rows)), np.argmax(rows, axis=1)],)
        flat = args[0].reshape(-1)
        return (float(flat[np.argmax(flat)]),)

    @impl(tmath.ArgmaxOp)
    def run_argmax(self, interp: Interpreter, op: tmath.ArgmaxOp, args: Any):
        if is_rows(op.result):
            return (np.argmax(args[0], axis=1).astype(np.int32),)
        return (int(np.argmax(args[0])),)

    @impl(tmath.SoftmaxOp)
    def run_softmax(self, interp: Interpreter, op: tmath.SoftmaxOp, args: Any):
        return (softmax(args[0]),)

    @impl(tmath.SoftmaxCrossEntropyOp)
    def run_xent(self, interp: Interpreter, op: tmath.SoftmaxCrossEntropyOp, args: Any):
        logits, label = args
        if isinstance(label, np.ndarray):
            label = checked_rows(label, logits.shape[1])
            shifted = logits - logits.max(axis=1, keepdims=True)
            picked = shifted[np.arange(len(label)), label]
            return (f32(np.log(np.exp(shifted).sum(axis=1)) - picked),)
        label = checked_index(label, logits.shape[0])
        shifted = logits - logits.max()
        return (float(np.float32(np.log(np.exp(shifted).sum()) - shifted[label])),)


def _elementwise(fn: Callable[..., np.ndarray]) -> Callable[..., tuple[Any, ...]]:
    def run(self: Any, interp: Interpreter, op: Any, args: tuple[Any, ...]):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return (f32(fn(*args)),)

    return run


def register_table(functions: type[InterpreterFunctions], table: dict[type, Any],
                   make_run: Callable[[Any], Any]) -> None:
    """Registers `make_run(fn)` as the impl of each op class of `table` (xDSL
    dispatches on exact classes, so each concrete op gets its own)."""
    for op_type, fn in table.items():
        setattr(functions, f"run_{op_type.__name__}", impl(op_type)(make_run(fn)))
    register_impls(functions)


register_table(TMathFunctions, _UNARY | _BINARY, _elementwise)


def softmax(x: np.ndarray) -> np.ndarray:
    """Of a vector, or of each row (of none: empty, as native code gives)."""
    if x.size == 0:
        return f32(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return f32(e / e.sum(axis=-1, keepdims=True))
