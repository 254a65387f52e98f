"""Row types: one value per row of a frontier, as `invoke-to-frontier` writes them.

A frontier-batched function works on many invocations at once. A value of
type `T` per invocation becomes a *rows* value with one extra leading
dynamic dimension: `tensor<8xf32>` becomes `tensor<?x8xf32>`, `f32`
becomes `tensor<?xf32>`, `i32` `tensor<?xi32>`. `tmath` ops accept rows
where an operand is per invocation and apply their per-invocation meaning to
each row; a uniform operand (a parameter) keeps its type and is shared by
every row. These helpers check those forms for the verifiers of `tmath` and
`frontier`.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    Float32Type,
    IndexType,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.utils.exceptions import VerifyException


def type_of(value: SSAValue | Attribute) -> Attribute:
    return value.type if isinstance(value, SSAValue) else value


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


def is_rows(value: SSAValue | Attribute) -> bool:
    """A tensor whose first dimension is dynamic and the others static."""
    typ = type_of(value)
    if not isinstance(typ, TensorType):
        return False
    shape = tuple(typ.get_shape())
    return len(shape) >= 1 and shape[0] < 0 and all(d >= 0 for d in shape[1:])


def f32_rows_or_static(value: SSAValue | Attribute, what: str) -> tuple[bool, tuple[int, ...]]:
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


def expect_index_rows(value: SSAValue | Attribute, what: str) -> None:
    """`tensor<?xi32>` (or another integer/index element): one index per row."""
    typ = type_of(value)
    if (not isinstance(typ, TensorType) or typ.get_shape() != (DYNAMIC_INDEX,)
            or not isinstance(typ.element_type, IntegerType | IndexType)):
        raise VerifyException(f"{what} must be rows of integers (tensor<?xi32>), got {typ}")


def expect_result(value: SSAValue, batched: bool, shape: tuple[int, ...],
                  element: Attribute, what: str = "result") -> None:
    """The result is `element`-typed with `shape` per row (rows if `batched`)."""
    expected: Attribute = TensorType(element, list(shape)) if shape else element
    if batched:
        expected = rows_type(expected)
    got = value.type
    if got == expected:
        return
    if (isinstance(got, TensorType) and isinstance(expected, TensorType)
            and got.element_type == expected.element_type):
        raise VerifyException(f"{what} has shape {shape_text(got)}, expected "
                              f"{shape_text(expected)}")
    raise VerifyException(f"{what} has type {got}, expected {expected}")


def shape_text(typ: TensorType[Attribute]) -> str:
    return "x".join("?" if d < 0 else str(d) for d in typ.get_shape()) or "scalar"
