"""Tracer values: Python operators on traced values emit IR.

Every op goes through `emit`, which inserts it at the current insertion
block, stamps it with the user's source line and verifies it at once, so a
shape error is reported at the user's line rather than at some later pass.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseIntOrFPElementsAttr,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    TensorType,
    f32,
    i32,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import VerifyException

from recir.diagnostics import RecirError, format_error, location_prefix
from recir.dialects import tmath
from recir.frontend.locations import user_attribute_error, user_error, user_location
from recir.frontend.method_hints import attribute_hint, logical_hint

_blocks: list[Block] = []


def current_block() -> Block:
    if not _blocks:
        raise user_error("recir operations must be traced inside recir.trace")
    return _blocks[-1]


def open_block() -> Block:
    """The current block, refused once its output is given: an op after the
    terminator failed to verify at the `with` line, far from this one."""
    block = current_block()
    last = block.last_op
    if last is not None and last.has_trait(IsTerminator):
        raise user_error("this is traced after the output of its model or subgraph: "
                         "give .output(...) last in its with-block")
    return block


class insertion_block:
    """Context manager: emitted ops go to `block` while it is active."""

    def __init__(self, block: Block):
        self.block = block

    def __enter__(self) -> Block:
        _blocks.append(self.block)
        return self.block

    def __exit__(self, *exc: object) -> None:
        _blocks.pop()


def check_visible(operands: Sequence[SSAValue], block: Block) -> None:
    """Each operand defined in `block` or a block enclosing it: a value kept
    from another subgraph's body, a `cond` branch or another trace made IR
    that verified and then failed in a pass (or compiled wrong)."""
    enclosing: list[Block] = []
    at: Block | None = block
    while at is not None:
        enclosing.append(at)
        parent = at.parent_op()
        at = parent.parent_block() if parent is not None else None
    for value in operands:
        home = value.block if isinstance(value, BlockArgument) else value.owner.parent_block()
        if not any(home is b for b in enclosing):
            owner = value.owner if isinstance(value, OpResult) else None
            where = location_prefix(owner).removesuffix(": ") if owner is not None else ""
            raise user_error(
                f"a traced value ({value.type}{', made at ' + where if where else ''}) is "
                "used outside the subgraph, cond branch or trace that made it: pass it "
                "in as an input, or return it")


def emit(op: Operation, verify: bool = True) -> Operation:
    """Insert, locate and verify `op`; errors point at the user's line.

    Terminators pass `verify=False`: their parent is finished only later.
    """
    block = open_block()
    check_visible(op.operands, block)
    op.location = user_location()
    block.add_op(op)
    if not verify:
        return op
    try:
        op.verify_()  # the op's own constraints; its block is still growing
    except VerifyException as e:
        op.detach()
        raise RecirError(format_error(op, str(e.args[0]))) from None
    return op


def emit_value(op: Operation) -> SSAValue:
    """`emit(op)`'s one result."""
    return emit(op).results[0]


def traced(op: Operation) -> Tracer:
    """`emit(op)`'s one result, as a traced value."""
    return Tracer(emit_value(op))


def is_tensor(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType)


F32_MAX = float(np.finfo(np.float32).max)
# NumPy's ufuncs for the operators a traced value has
PYTHON_OPERATORS = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
    np.true_divide: operator.truediv, np.less: operator.lt, np.less_equal: operator.le,
    np.greater: operator.gt, np.greater_equal: operator.ge, np.equal: operator.eq,
    np.not_equal: operator.ne,
}


def shown(value: Any) -> str:
    """`repr(value)`, short for a huge integer (beyond 4300 digits `repr` raises)."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"(an integer of {value.bit_length()} bits)"
    return repr(value)


def checked_number(value: Any, typ: Attribute) -> Any:
    """A Python number that `typ` holds: a finite number beyond float32's range
    would become inf (an int, an OverflowError), an integer beyond the type's
    signed range an xDSL traceback or a negative number (i1 holds 0 and 1)."""
    if isinstance(value, int) and isinstance(typ, IntegerType):
        half = 1 << (typ.width.data - 1)
        low, high = (0, 1) if half == 1 else (-half, half - 1)
        if not low <= value <= high:
            raise user_error(f"the Python integer {shown(value)} does not fit in {typ}")
        return value
    if isinstance(value, int) and isinstance(typ, IndexType):
        return value
    finite = not isinstance(value, float) or math.isfinite(value)
    if finite and abs(value) > F32_MAX:  # (an int compares exactly, however large)
        raise user_error(f"the Python number {shown(value)} is beyond float32's range")
    return value


def python_number(value: Any) -> Any:
    """A NumPy scalar (or 0-d array) of numbers as the Python number it holds,
    so that `x * np.float32(2)` and `np.int32(3) < n` trace as `np.float32(2) * x`
    does; anything else as it is."""
    if isinstance(value, np.generic | np.ndarray) and value.ndim == 0 \
            and value.dtype.kind in "biuf":
        return value.item()
    return value


def constant_like(value: Any, like: SSAValue) -> SSAValue:
    """A Python number as a constant of `like`'s type (tensors: a splat)."""
    typ = like.type
    if not isinstance(value, int | float):
        raise user_error(f"cannot use a Python {type(value).__name__} with a {typ} value")
    if isinstance(typ, TensorType) and (typ.element_type != f32
                                        or DYNAMIC_INDEX in typ.get_shape()):
        raise user_error(f"cannot combine the Python number {value!r} with a {typ} "
                         "value: tensor arithmetic is on f32 tensors of a static shape")
    checked_number(value, typ if not isinstance(typ, TensorType) else f32)
    if isinstance(typ, TensorType):
        dense = DenseIntOrFPElementsAttr.from_list(typ, [float(value)])
        return emit_value(tmath.ConstantOp(dense))
    if isinstance(typ, Float32Type):
        return emit_value(arith.ConstantOp(FloatAttr(float(value), f32)))
    if isinstance(typ, IntegerType | IndexType) and isinstance(value, int):
        return emit_value(arith.ConstantOp(IntegerAttr(value, typ)))
    raise user_error(f"cannot use the Python value {value!r} as a {typ}")


def as_value(value: Any, like: SSAValue | None = None) -> SSAValue:
    if isinstance(value, Tracer):
        return value.value
    value = python_number(value)
    if like is not None:
        return constant_like(value, like)
    if isinstance(value, bool):
        return emit_value(arith.ConstantOp(IntegerAttr(int(value), IntegerType(1))))
    if isinstance(value, int):
        return emit_value(arith.ConstantOp(IntegerAttr(checked_number(value, i32), i32)))
    if isinstance(value, float):
        return emit_value(arith.ConstantOp(FloatAttr(checked_number(value, f32), f32)))
    raise user_error(f"unsupported Python value {value!r} of type {type(value).__name__}")


TENSOR_BINARY = {"+": tmath.AddOp, "-": tmath.SubOp, "*": tmath.MulOp, "/": tmath.DivOp}
INT_BINARY = {"+": arith.AddiOp, "-": arith.SubiOp, "*": arith.MuliOp, "/": arith.DivSIOp}
FLOAT_BINARY = {"+": arith.AddfOp, "-": arith.SubfOp, "*": arith.MulfOp, "/": arith.DivfOp}
INT_COMPARE = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
# `!=` unordered, as Python's (and C's): NaN != NaN is true, `one` made it false
FLOAT_COMPARE = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}


def is_i1(value: SSAValue) -> bool:
    return isinstance(value.type, IntegerType) and value.type.width.data == 1


def check_alike(symbol: str, a: SSAValue, b: SSAValue) -> None:
    """Both sides of `symbol` of one type: xDSL's own refusals named its type
    variables (an f32 compared with an i32 raised a TypeError, no line)."""
    if a.type == b.type or is_tensor(a) and is_tensor(b):  # (shapes: the op's verifier)
        return
    if is_tensor(a) != is_tensor(b):
        raise user_error(f"'{symbol}' takes two tensors or two scalars, got {a.type} and "
                         f"{b.type}: make the scalar a tensor with rf.fill(s, shape)")
    raise user_error(f"'{symbol}' takes two values of one type, got {a.type} and {b.type} "
                     "(recir converts no type into another)")


def binary(symbol: str, a: SSAValue, b: SSAValue) -> Tracer:
    check_alike(symbol, a, b)
    if isinstance(a.type, TensorType):
        return traced(TENSOR_BINARY[symbol](a, b))
    if is_i1(a):  # (i1 arithmetic wraps: `(n > 0) + 1` would be 0)
        raise user_error("a comparison's result (i1) is not a number: use "
                         "recir.cond(pred, lambda: 1, lambda: 0) for one")
    table = FLOAT_BINARY if isinstance(a.type, Float32Type) else INT_BINARY
    return traced(table[symbol](a, b))


def compare(symbol: str, a: SSAValue, b: SSAValue) -> Tracer:
    check_alike(symbol, a, b)
    if isinstance(a.type, Float32Type):
        return traced(arith.CmpfOp(a, b, FLOAT_COMPARE[symbol]))
    if is_i1(a) and symbol not in ("==", "!="):  # (signed, true < false)
        raise user_error("a comparison's result (i1) has no order: compare with "
                         "== or !=, or combine with & and |")
    if isinstance(a.type, IntegerType | IndexType):
        return traced(arith.CmpiOp(a, b, INT_COMPARE[symbol]))
    raise user_error(f"cannot compare values of type {a.type}")


def logical(symbol: str, a: SSAValue, b: SSAValue) -> Tracer:
    """`&`, `|` of comparisons (i1) or integers; on f32 arith's verifier
    refused them naming its operand, with no word of what to write."""
    check_alike(symbol, a, b)
    if not isinstance(a.type, IntegerType | IndexType):
        raise user_error(f"'{symbol}' combines comparisons (i1) or i32 values, got "
                         f"{a.type}: {logical_hint(symbol)}")
    return traced((arith.AndIOp if symbol == "&" else arith.OrIOp)(a, b))


Combine = Callable[[str, SSAValue, SSAValue], "Tracer"]


def infix(combine: Combine, symbol: str) -> Callable[[Tracer, Any], Tracer]:
    """`tracer <symbol> other` as a method."""
    return lambda self, other: combine(symbol, self.value, as_value(other, self.value))


def reflected(combine: Combine, symbol: str) -> Callable[[Tracer, Any], Tracer]:
    """`other <symbol> tracer`, Python's reflected operand order."""
    return lambda self, other: combine(symbol, as_value(other, self.value), self.value)


class Tracer:
    """A traced SSA value; arithmetic on it records IR instead of computing."""

    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, value: SSAValue):
        self.value = value

    @property
    def type(self) -> Attribute:
        return self.value.type

    @property
    def shape(self) -> tuple[int, ...]:
        return tmath.shape_of(self.value) if is_tensor(self.value) else ()

    def __repr__(self) -> str:
        return f"Tracer({self.value.type})"

    __add__, __radd__ = infix(binary, "+"), reflected(binary, "+")
    __sub__, __rsub__ = infix(binary, "-"), reflected(binary, "-")
    __mul__, __rmul__ = infix(binary, "*"), reflected(binary, "*")
    __truediv__, __rtruediv__ = infix(binary, "/"), reflected(binary, "/")
    __lt__, __le__ = infix(compare, "<"), infix(compare, "<=")
    __gt__, __ge__ = infix(compare, ">"), infix(compare, ">=")
    __eq__ = infix(compare, "==")  # type: ignore[assignment]
    __ne__ = infix(compare, "!=")  # type: ignore[assignment]

    def __neg__(self) -> Tracer:
        if is_tensor(self.value):
            return traced(tmath.NegOp(self.value))
        if isinstance(self.type, Float32Type):  # (0.0 - x is +0.0 of 0.0; Python: -0.0)
            return traced(arith.NegfOp(self.value))
        zero = as_value(0 if isinstance(self.type, IntegerType) else 0.0, self.value)
        return binary("-", zero, self.value)

    def __matmul__(self, other: Tracer) -> Tracer:
        rhs = as_value(other)  # (a scalar: matvec's verifier names it)
        is_vector = not is_tensor(rhs) or len(tmath.shape_of(rhs)) == 1
        op = tmath.MatvecOp if is_vector else tmath.MatmulOp
        return traced(op(self.value, rhs))

    __and__, __rand__ = infix(logical, "&"), reflected(logical, "&")
    __or__, __ror__ = infix(logical, "|"), reflected(logical, "|")

    def __getattr__(self, name: str) -> Any:
        """NumPy's methods and attributes (`h.T`, `h.sum()`): refused at the
        user's line with what recir offers instead."""
        if name.startswith("_") or name == "value":  # (probes; `value` unset: a copy)
            raise AttributeError(name)
        raise user_attribute_error(f"a traced value ({self.type}) has no attribute "
                                   f"'{name}': {attribute_hint(name, len(self.shape))}")

    def __getitem__(self, index: Any) -> Tracer:
        return traced(tmath.ExtractOp(self.value, as_value(index)))

    def __bool__(self) -> bool:
        raise user_error(
            "a traced value has no Python truth value: use recir.cond(pred, then, else)"
        )

    def no_python_value(self, *args: Any, **kwargs: Any) -> Any:
        raise user_error(f"a traced value ({self.type}) has no Python value while "
                         "tracing (no int(), float(), len(), iteration or NumPy "
                         "array): use recir ops")

    __int__ = __float__ = __index__ = __len__ = no_python_value
    # without it, iteration called `__getitem__` with 0, 1, 2, ... and never stopped
    __iter__ = no_python_value
    __array__ = no_python_value  # (`np.array(x)`: an object array, refused far away)

    def __array_ufunc__(self, ufunc: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        python = PYTHON_OPERATORS.get(ufunc)
        numbers = [a if isinstance(a, Tracer) else python_number(a) for a in args]
        if python is not None and method == "__call__" and not kwargs and all(
                isinstance(a, Tracer | int | float) for a in numbers):
            # a NumPy scalar's operator (`np.float64(0.5) * x`; a comparison
            # passes it as a 0-d array): Python's, as for its number
            # (`__array_priority__` no longer defers it)
            return python(*numbers)
        raise user_error(f"NumPy's {ufunc.__name__} on a traced value: use the recir op "
                         "(recir.frontend), and m.param(...) for an array of weights")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """NumPy's functions (np.sum, np.concatenate, np.dot) refused here: they
        failed inside NumPy, or were located in its files (np.sum's reduce)."""
        raise user_error(f"NumPy's {func.__name__} on a traced value: use the recir op "
                         "(recir.frontend), and m.param(...) for an array of weights")

    def unsupported(self, *args: Any) -> Any:
        """Refused: i32's native `//` and `%` would truncate toward zero where
        Python's floor (-7 // 2 is -4), a silent difference."""
        hint = ("; `/` on i32 divides as C does, toward zero (-7 / 2 is -3)"
                if isinstance(self.type, IntegerType | IndexType) else "")
        raise user_error(f"a traced value ({self.type}) has no **, // or %: write the "
                         f"product, or use recir ops{hint}")

    __pow__ = __rpow__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = unsupported

    def no_bit_operator(self, *args: Any) -> Any:
        raise user_error(f"a traced value ({self.type}) has no abs(), ~, ^, << or >>: "
                         "use recir ops (recir.cond for a choice)")

    __abs__ = __invert__ = __xor__ = __rxor__ = no_bit_operator
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = no_bit_operator

    def __rmatmul__(self, other: Any) -> Tracer:  # `array @ tracer`
        if isinstance(other, Tracer):
            return other @ self
        raise user_error(f"cannot multiply a {type(other).__name__} by a traced value: "
                         "declare the matrix with m.param(...) (or rf.constant)")

    __hash__ = object.__hash__

