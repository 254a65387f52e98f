"""Row types, and the shape checks the verifiers of `tmath`, `adjoint` and
`frontier` share.

A frontier-batched function works on many invocations at once. A value of
type `T` per invocation becomes a *rows* value with one extra leading
dynamic dimension: `tensor<8xf32>` becomes `tensor<?x8xf32>`, `f32`
becomes `tensor<?xf32>`, `i32` `tensor<?xi32>`. `tmath` ops accept rows
where an operand is per invocation and apply their per-invocation meaning to
each row; a uniform operand (a parameter) keeps its type and is shared by
every row. Each check raises a `VerifyException` that names what it checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    Float32Type,
    FunctionType,
    IndexType,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

# the arith ops on scalars that have a row form: the same op on tensors of rows
ROW_ARITH = (arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp,
             arith.XOrIOp, arith.MaxSIOp, arith.MinSIOp, arith.AddfOp, arith.SubfOp,
             arith.MulfOp, arith.DivfOp, arith.NegfOp, arith.MaximumfOp, arith.MinimumfOp,
             arith.MaxnumfOp, arith.MinnumfOp)


def type_of(value: SSAValue | Attribute) -> Attribute:
    return value.type if isinstance(value, SSAValue) else value


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    typ = type_of(value)
    assert isinstance(typ, TensorType)
    return tuple(typ.get_shape())


def fmt_shape(shape: Sequence[int]) -> str:
    return "x".join("?" if d < 0 else str(d) for d in shape) or "scalar"


def rows_type(typ: Attribute) -> TensorType[Attribute]:
    """The rows form of a per-invocation type: a leading `?` dimension."""
    if isinstance(typ, TensorType):
        return TensorType(typ.element_type, [DYNAMIC_INDEX, *typ.get_shape()])
    return TensorType(typ, [DYNAMIC_INDEX])


def row_type(typ: Attribute) -> Attribute:
    """The per-row type of a rows type (`tensor<?xf32>` -> `f32`)."""
    assert isinstance(typ, TensorType)
    shape = list(typ.get_shape())[1:]
    return TensorType(typ.element_type, shape) if shape else typ.element_type


def typed(batched: bool, shape: Sequence[int], element: Attribute) -> Attribute:
    """`element` with `shape` (a scalar when empty), as rows when `batched`."""
    typ = TensorType(element, list(shape)) if shape else element
    return rows_type(typ) if batched else typ


# ops a function over rows has none of: it is straight-line code
NOT_IN_ROWS = frozenset(("invoke.invoke", "scf.if", "tape.new", "tape.save", "tape.load",
                         "frontier.schedule"))


# ops that read a dynamic array one element at a time, as static code does
ELEMENT_READS = frozenset(("tmath.extract", "tmath.size", "func.return"))


def is_row_function(function: Operation) -> bool:
    """Straight-line code that computes rows (`invoke-to-frontier`'s batched
    functions; not a recursive function's reads of its structure arrays,
    which take one index at a time), or uses f32 rows other than by element
    (a batched prefix's `_bwd` may only add them into a parameter's
    gradient: lowered as static, it read their descriptor as the rows), or
    returns rows (a batched prefix of uniform ops only, a bias made from
    parameters, passes the schedule's row operands through: lowered as
    static, it returned their count without their data)."""
    typ = function.properties.get("function_type")
    computes_rows = isinstance(typ, FunctionType) and any(is_rows(t) for t in typ.outputs)
    for op in function.walk():
        if op.name in NOT_IN_ROWS:
            return False
        if op.dialect_name() == "frontier" or any(is_rows(r.type) for r in op.results) or (
                op.name not in ELEMENT_READS and any(
                    is_rows(v.type) and is_f32_tensor(v.type) for v in op.operands)):
            computes_rows = True
    return computes_rows


def is_rows(value: SSAValue | Attribute) -> bool:
    """A tensor whose first dimension is dynamic and the others static."""
    typ = type_of(value)
    if not isinstance(typ, TensorType):
        return False
    shape = tuple(typ.get_shape())
    return len(shape) >= 1 and shape[0] < 0 and all(d >= 0 for d in shape[1:])


def is_f32_tensor(typ: Attribute) -> bool:
    return isinstance(typ, TensorType) and isinstance(typ.element_type, Float32Type)


def f32_rows_or_static(
    value: SSAValue | Attribute, what: str
) -> tuple[bool, tuple[int, ...]]:
    """(whether rows, the per-row or static shape) of an f32 tensor operand."""
    typ = type_of(value)
    if not isinstance(typ, TensorType) or not isinstance(typ.element_type, Float32Type):
        raise VerifyException(f"{what} must be an f32 tensor, got {typ}")
    shape = tuple(typ.get_shape())
    if all(d >= 0 for d in shape):
        return False, shape
    if is_rows(typ):
        return True, shape[1:]
    raise VerifyException(f"{what} must have a static shape or rows of one "
                          f"(tensor<?x...xf32>), got {typ}")


def expect_f32_tensor(value: SSAValue | Attribute, what: str) -> tuple[int, ...]:
    """The static shape of an f32 tensor, or a verifier error about `what`."""
    typ = type_of(value)
    if not isinstance(typ, TensorType) or not isinstance(typ.element_type, Float32Type):
        raise VerifyException(f"{what} must be an f32 tensor, got {typ}")
    shape = tuple(typ.get_shape())
    if any(d < 0 for d in shape):
        raise VerifyException(f"{what} must have a static shape, got {typ}")
    return shape


def expect_rank(shape: tuple[int, ...], rank: int, what: str) -> None:
    if len(shape) != rank:
        raise VerifyException(
            f"{what} must have rank {rank}, got shape {fmt_shape(shape)}")


def expect_vector(value: SSAValue, what: str) -> TensorType[Attribute]:
    typ = value.type
    if not isinstance(typ, TensorType) or typ.get_num_dims() != 1:
        raise VerifyException(f"{what} must be a vector, got {typ}")
    return typ


def expect_shape(got: tuple[int, ...], expected: tuple[int, ...], what: str) -> None:
    if got != expected:
        raise VerifyException(
            f"{what} has shape {fmt_shape(got)}, expected {fmt_shape(expected)}")


def expect_index_rows(value: SSAValue | Attribute, what: str) -> None:
    """`tensor<?xi32>` (or another integer/index element): one index per row."""
    typ = type_of(value)
    if (not isinstance(typ, TensorType) or typ.get_shape() != (DYNAMIC_INDEX,)
            or not isinstance(typ.element_type, IntegerType | IndexType)):
        raise VerifyException(
            f"{what} must be rows of integers (tensor<?xi32>), got {typ}")


def expect_rows(value: SSAValue | Attribute, what: str) -> None:
    if not is_rows(value):
        raise VerifyException(f"{what} must be rows (a tensor with a leading ? and "
                              f"static other dimensions), got {type_of(value)}")


def expect_type(value: SSAValue, expected: Attribute, what: str = "result") -> None:
    """`value` has type `expected`; tensors of one element type differ in shape."""
    got = value.type
    if got == expected:
        return
    if (isinstance(got, TensorType) and isinstance(expected, TensorType)
            and got.element_type == expected.element_type):
        raise VerifyException(f"{what} has shape {fmt_shape(got.get_shape())}, "
                              f"expected {fmt_shape(expected.get_shape())}")
    raise VerifyException(f"{what} has type {got}, expected {expected}")
