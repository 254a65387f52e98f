"""One function per tmath op, for use inside a trace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32
from xdsl.irdl import IRDLOperation

from recir.dialects import tmath
from recir.frontend.locations import user_error
from recir.frontend.tracer import Tracer, as_value, is_tensor, traced


def unary(op: type[IRDLOperation], name: str) -> Callable[[Any], Tracer]:
    """The function `name(x)` that traces `op` on one value."""

    def apply(x: Any) -> Tracer:
        return traced(op(as_value(x)))  # pyright: ignore[reportCallIssue]

    apply.__name__ = apply.__qualname__ = name
    apply.__doc__ = f"`{op.name}` of `x`."
    return apply


sigmoid = unary(tmath.SigmoidOp, "sigmoid")
tanh = unary(tmath.TanhOp, "tanh")
relu = unary(tmath.ReluOp, "relu")
exp = unary(tmath.ExpOp, "exp")
log = unary(tmath.LogOp, "log")
softmax = unary(tmath.SoftmaxOp, "softmax")
sum = unary(tmath.SumOp, "sum")  # noqa: A001 - mirrors numpy's name
max = unary(tmath.MaxOp, "max")  # noqa: A001
argmax = unary(tmath.ArgmaxOp, "argmax")
size = unary(tmath.SizeOp, "size")


def matvec(w: Any, x: Any) -> Tracer:
    return traced(tmath.MatvecOp(as_value(w), as_value(x)))


def matmul(a: Any, b: Any) -> Tracer:
    return traced(tmath.MatmulOp(as_value(a), as_value(b)))


def bilinear(v: Any, x: Any, y: Any) -> Tracer:
    """`r[k] = x^T V[k] y`: the RNTN tensor product."""
    return traced(tmath.BilinearOp(as_value(v), as_value(x), as_value(y)))


def concat(values: Sequence[Any]) -> Tracer:
    if isinstance(values, Tracer):  # (`not values` asked it for a truth value)
        raise user_error("concat takes a list of values, got one: rf.concat([a, b])")
    inputs = [as_value(v) for v in values]  # (a generator is always true)
    if not inputs:
        raise user_error("concat needs at least one value")
    return traced(tmath.ConcatOp(inputs))


def slice(x: Any, offset: int, size: int) -> Tracer:  # noqa: A001
    value = as_value(x)
    if not is_tensor(value):  # (SliceOp reads its shape: an AssertionError)
        raise user_error(f"slice takes a tensor, got {value.type}")
    return traced(tmath.SliceOp(value, whole("offset", offset), whole("size", size)))


def whole(what: str, value: Any) -> int:
    """An op's integer argument (a float or a traced value: an xDSL traceback)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise user_error(f"the {what} is a Python integer, got {value!r}")
    return int(value)


def gather(table: Any, index: Any) -> Tracer:
    return traced(tmath.GatherOp(as_value(table), as_value(index)))


def softmax_xent(logits: Any, label: Any) -> Tracer:
    return traced(tmath.SoftmaxCrossEntropyOp(as_value(logits), as_value(label)))


def fill(scalar: Any, shape: Sequence[int]) -> Tracer:
    return traced(tmath.FillOp(as_value(scalar), TensorType(f32, dimensions(shape))))


def dimensions(shape: Sequence[Any]) -> list[int]:
    if not isinstance(shape, Sequence):  # (`fill(1.0, 4)`: a TypeError)
        raise user_error(f"a shape is a list of integers, got {shape!r}")
    dims = [whole("dimension", d) for d in shape]
    if any(d < 0 for d in dims):
        raise user_error(f"a shape's dimensions are >= 0, got {tuple(dims)}")
    return dims


def constant(value: Any) -> Tracer:
    """`value` (numbers) as an f32 tensor; one beyond float32's range is
    refused, not made inf."""
    try:
        given = np.asarray(value)
        if given.dtype.kind not in "biuf":
            raise TypeError(f"{given.dtype} values")
        with np.errstate(over="ignore"):
            array = given.astype(np.float32)
    except (TypeError, ValueError) as e:
        raise user_error(f"constant takes numbers: {e}") from None
    if np.isinf(array).sum() != np.isinf(given).sum():
        raise user_error("a constant holds a number beyond float32's range")
    dense = DenseIntOrFPElementsAttr.from_list(TensorType(f32, list(array.shape)),
                                               array.ravel().tolist())
    return traced(tmath.ConstantOp(dense))


def zeros(*shape: int) -> Tracer:
    typ = TensorType(f32, dimensions(shape))
    return traced(tmath.ConstantOp(DenseIntOrFPElementsAttr.from_list(typ, [0.0])))
