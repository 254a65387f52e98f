"""One function per tmath op, for use inside a trace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32
from xdsl.irdl import IRDLOperation

from recir.dialects import tmath
from recir.frontend.tracer import Tracer, as_value, traced


def traced_op(op: type[IRDLOperation], name: str, doc: str = "") -> Callable[..., Tracer]:
    """The function `name(*values)` that traces `op` on its operands."""

    def apply(*values: Any) -> Tracer:
        return traced(op(*(as_value(v) for v in values)))  # pyright: ignore[reportCallIssue]

    apply.__name__ = apply.__qualname__ = name
    apply.__doc__ = doc or f"`{op.name}` of its operands."
    return apply


sigmoid = traced_op(tmath.SigmoidOp, "sigmoid")
tanh = traced_op(tmath.TanhOp, "tanh")
relu = traced_op(tmath.ReluOp, "relu")
exp = traced_op(tmath.ExpOp, "exp")
log = traced_op(tmath.LogOp, "log")
softmax = traced_op(tmath.SoftmaxOp, "softmax")
sum = traced_op(tmath.SumOp, "sum")  # noqa: A001 - mirrors numpy's name
max = traced_op(tmath.MaxOp, "max")  # noqa: A001
argmax = traced_op(tmath.ArgmaxOp, "argmax")
size = traced_op(tmath.SizeOp, "size")
matvec = traced_op(tmath.MatvecOp, "matvec")
matmul = traced_op(tmath.MatmulOp, "matmul")
bilinear = traced_op(tmath.BilinearOp, "bilinear", "`r[k] = x^T V[k] y`: the RNTN tensor product.")
gather = traced_op(tmath.GatherOp, "gather")
softmax_xent = traced_op(tmath.SoftmaxCrossEntropyOp, "softmax_xent")


def concat(values: Sequence[Any]) -> Tracer:
    return traced(tmath.ConcatOp([as_value(v) for v in values]))


def slice(x: Any, offset: int, size: int) -> Tracer:  # noqa: A001
    return traced(tmath.SliceOp(as_value(x), offset, size))


def fill(scalar: Any, shape: Sequence[int]) -> Tracer:
    return traced(tmath.FillOp(as_value(scalar), TensorType(f32, list(shape))))


def constant(value: Any) -> Tracer:
    array = np.asarray(value, dtype=np.float32)
    dense = DenseIntOrFPElementsAttr.from_list(TensorType(f32, list(array.shape)),
                                               array.ravel().tolist())
    return traced(tmath.ConstantOp(dense))


def zeros(*shape: int) -> Tracer:
    typ = TensorType(f32, list(shape))
    return traced(tmath.ConstantOp(DenseIntOrFPElementsAttr.from_list(typ, [0.0])))
