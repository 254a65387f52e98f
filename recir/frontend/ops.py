"""One function per tmath op, for use inside a trace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32

from recir.dialects import tmath
from recir.frontend.tracer import Tracer, as_value, emit


def _unary(op: type, x: Any) -> Tracer:
    return Tracer(emit(op(as_value(x))).results[0])


def sigmoid(x: Any) -> Tracer:
    return _unary(tmath.SigmoidOp, x)


def tanh(x: Any) -> Tracer:
    return _unary(tmath.TanhOp, x)


def relu(x: Any) -> Tracer:
    return _unary(tmath.ReluOp, x)


def exp(x: Any) -> Tracer:
    return _unary(tmath.ExpOp, x)


def log(x: Any) -> Tracer:
    return _unary(tmath.LogOp, x)


def softmax(x: Any) -> Tracer:
    return _unary(tmath.SoftmaxOp, x)


def sum(x: Any) -> Tracer:  # noqa: A001 - mirrors numpy's name
    return _unary(tmath.SumOp, x)


def max(x: Any) -> Tracer:  # noqa: A001
    return _unary(tmath.MaxOp, x)


def argmax(x: Any) -> Tracer:
    return _unary(tmath.ArgmaxOp, x)


def size(x: Any) -> Tracer:
    return _unary(tmath.SizeOp, x)


def matvec(w: Any, x: Any) -> Tracer:
    return Tracer(emit(tmath.MatvecOp(as_value(w), as_value(x))).results[0])


def matmul(a: Any, b: Any) -> Tracer:
    return Tracer(emit(tmath.MatmulOp(as_value(a), as_value(b))).results[0])


def bilinear(v: Any, x: Any, y: Any) -> Tracer:
    """`r[k] = x^T V[k] y`: the RNTN tensor product."""
    op = tmath.BilinearOp(as_value(v), as_value(x), as_value(y))
    return Tracer(emit(op).results[0])


def concat(values: Sequence[Any]) -> Tracer:
    return Tracer(emit(tmath.ConcatOp([as_value(v) for v in values])).results[0])


def slice(x: Any, offset: int, size: int) -> Tracer:  # noqa: A001
    return Tracer(emit(tmath.SliceOp(as_value(x), offset, size)).results[0])


def gather(table: Any, index: Any) -> Tracer:
    return Tracer(emit(tmath.GatherOp(as_value(table), as_value(index))).results[0])


def softmax_xent(logits: Any, label: Any) -> Tracer:
    op = tmath.SoftmaxCrossEntropyOp(as_value(logits), as_value(label))
    return Tracer(emit(op).results[0])


def fill(scalar: Any, shape: Sequence[int]) -> Tracer:
    op = tmath.FillOp(as_value(scalar), TensorType(f32, list(shape)))
    return Tracer(emit(op).results[0])


def constant(value: Any) -> Tracer:
    array = np.asarray(value, dtype=np.float32)
    typ = TensorType(f32, list(array.shape))
    dense = DenseIntOrFPElementsAttr.from_list(typ, array.ravel().tolist())
    return Tracer(emit(tmath.ConstantOp(dense)).results[0])


def zeros(*shape: int) -> Tracer:
    typ = TensorType(f32, list(shape))
    return Tracer(emit(tmath.ConstantOp(DenseIntOrFPElementsAttr.from_list(typ, [0.0]))).results[0])
