"""The `tmath` dialect: tensor math for the cells of recursive models.

Tensors are builtin `tensor<...xf32>` values with static shapes and value
semantics; structure arrays (children, word ids) are `tensor<?xi32>` and are
read with `tmath.extract`. Scalars are `f32`, `i32` or `index`. Every shape
rule is checked by a verifier whose message names the op, the shapes it got
and what it expected.

Elementwise ops derive from `ElementwiseUnaryOp`/`ElementwiseBinaryOp` and
carry the `Elementwise` trait, which the fusion pass keys on.
"""

from __future__ import annotations

from collections.abc import Sequence
from xdsl.dialects.builtin import (
    I64,
    DenseIntOrFPElementsAttr,
    Float32Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    TensorType,
    f32,
    i32,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    region_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

from recir.dialects.row_types import (
    expect_index_rows,
    expect_result,
    f32_rows_or_static,
    is_rows,
    rows_type,
)


class Elementwise(OpTrait):
    """Marks ops that apply one scalar function to every element position."""


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    typ = value.type if isinstance(value, SSAValue) else value
    assert isinstance(typ, TensorType)
    return tuple(typ.get_shape())


def fmt_shape(shape: Sequence[int]) -> str:
    return "x".join("?" if d < 0 else str(d) for d in shape) or "scalar"


def expect_f32_tensor(value: SSAValue | Attribute, what: str) -> tuple[int, ...]:
    """The static shape of an f32 tensor, or a verifier error about `what`."""
    typ = value.type if isinstance(value, SSAValue) else value
    if not isinstance(typ, TensorType) or not isinstance(typ.element_type, Float32Type):
        raise VerifyException(f"{what} must be an f32 tensor, got {typ}")
    shape = tuple(typ.get_shape())
    if any(d < 0 for d in shape):
        raise VerifyException(f"{what} must have a static shape, got {typ}")
    return shape


def expect_rank(shape: tuple[int, ...], rank: int, what: str) -> None:
    if len(shape) != rank:
        raise VerifyException(
            f"{what} must have rank {rank}, got shape {fmt_shape(shape)}"
        )


def expect_integer_scalar(value: SSAValue, what: str) -> None:
    if not isinstance(value.type, IntegerType | IndexType):
        raise VerifyException(f"{what} must be an integer or index, got {value.type}")


def expect_shape(got: tuple[int, ...], expected: tuple[int, ...], what: str) -> None:
    if got != expected:
        raise VerifyException(
            f"{what} has shape {fmt_shape(got)}, expected {fmt_shape(expected)}"
        )


class SameTypeUnaryOp(IRDLOperation):
    """`%r = tmath.<op> %x : tensor<...xf32>`: result and operand share a type."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, input: SSAValue | Operation):
        value = SSAValue.get(input)
        super().__init__(operands=[value], result_types=[value.type])

    def verify_(self) -> None:
        f32_rows_or_static(self.input, "operand")
        if self.result.type != self.input.type:
            raise VerifyException(f"result type {self.result.type} differs from the "
                                  f"operand's {self.input.type}")

    @classmethod
    def parse(cls, parser: Parser) -> SameTypeUnaryOp:
        unresolved = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        operand = parser.resolve_operand(unresolved, typ)
        op = cls.create(operands=[operand], result_types=[typ])
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.input)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)


class ElementwiseUnaryOp(SameTypeUnaryOp):
    """A unary op applied to every element: fusion keys on `Elementwise`."""

    traits = traits_def(Pure(), Elementwise())


class ElementwiseBinaryOp(IRDLOperation):
    """`%r = tmath.<op> %a, %b : tensor<...xf32>`: both operands share the type."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        result = rhs.type if is_rows(rhs) else lhs.type
        super().__init__(operands=[lhs, rhs], result_types=[result])

    def verify_(self) -> None:
        """Equal shapes, or rows and one row's shape (the uniform side is
        shared by every row)."""
        lhs_rows, lhs = f32_rows_or_static(self.lhs, "lhs")
        rhs_rows, rhs = f32_rows_or_static(self.rhs, "rhs")
        if lhs != rhs:
            raise VerifyException(
                f"operand shapes differ: lhs {fmt_shape(lhs)}, rhs {fmt_shape(rhs)}; "
                "expected equal shapes (or rows of the other's shape)"
            )
        expect_result(self.result, lhs_rows or rhs_rows, lhs, f32)

    @classmethod
    def parse(cls, parser: Parser) -> ElementwiseBinaryOp:
        lhs = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        rhs = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        lhs_t = rhs_t = parser.parse_type()
        if parser.parse_optional_punctuation(",") is not None:
            rhs_t = parser.parse_type()
        operands = [parser.resolve_operand(lhs, lhs_t), parser.resolve_operand(rhs, rhs_t)]
        op = cls.create(operands=operands, result_types=[rhs_t if is_rows(rhs_t) else lhs_t])
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.lhs)
        printer.print_string(", ")
        printer.print_operand(self.rhs)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.lhs.type)
        if self.rhs.type != self.lhs.type:
            printer.print_string(", ")
            printer.print_attribute(self.rhs.type)


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    """```mlir
    %c = tmath.add %a, %b : tensor<4xf32>
    ```"""

    name = "tmath.add"


@irdl_op_definition
class SubOp(ElementwiseBinaryOp):
    """```mlir
    %c = tmath.sub %a, %b : tensor<4xf32>
    ```"""

    name = "tmath.sub"


@irdl_op_definition
class MulOp(ElementwiseBinaryOp):
    """```mlir
    %c = tmath.mul %a, %b : tensor<4xf32>
    ```"""

    name = "tmath.mul"


@irdl_op_definition
class DivOp(ElementwiseBinaryOp):
    """```mlir
    %c = tmath.div %a, %b : tensor<4xf32>
    ```"""

    name = "tmath.div"


@irdl_op_definition
class NegOp(ElementwiseUnaryOp):
    """```mlir
    %y = tmath.neg %x : tensor<4xf32>
    ```"""

    name = "tmath.neg"


@irdl_op_definition
class SigmoidOp(ElementwiseUnaryOp):
    """```mlir
    %y = tmath.sigmoid %x : tensor<4xf32>
    ```"""

    name = "tmath.sigmoid"


@irdl_op_definition
class TanhOp(ElementwiseUnaryOp):
    """```mlir
    %y = tmath.tanh %x : tensor<4xf32>
    ```"""

    name = "tmath.tanh"


@irdl_op_definition
class ReluOp(ElementwiseUnaryOp):
    """```mlir
    %y = tmath.relu %x : tensor<4xf32>
    ```"""

    name = "tmath.relu"


@irdl_op_definition
class ExpOp(ElementwiseUnaryOp):
    """```mlir
    %y = tmath.exp %x : tensor<4xf32>
    ```"""

    name = "tmath.exp"


@irdl_op_definition
class LogOp(ElementwiseUnaryOp):
    """```mlir
    %y = tmath.log %x : tensor<4xf32>
    ```"""

    name = "tmath.log"


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A constant f32 tensor (splat or full).

    ```mlir
    %z = tmath.constant dense<0.0> : tensor<4xf32>
    ```
    """

    name = "tmath.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(properties={"value": value}, result_types=[value.type])

    def verify_(self) -> None:
        expect_f32_tensor(self.result, "result")
        if self.value.type != self.result.type:
            raise VerifyException(
                f"value type {self.value.type} differs from result {self.result.type}"
            )

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        pos = parser.pos
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error("expected a dense tensor literal", pos, parser.pos)
        op = cls(value)
        op.attributes |= parser.parse_optional_attr_dict()
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        printer.print_op_attributes(self.attributes)


@irdl_op_definition
class FillOp(IRDLOperation):
    """Broadcast an f32 scalar to a tensor.

    ```mlir
    %t = tmath.fill %s : f32 -> tensor<4xf32>
    ```
    """

    name = "tmath.fill"
    scalar = operand_def(Float32Type | TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$scalar attr-dict `:` type($scalar) `->` type($result)"

    def __init__(self, scalar: SSAValue | Operation, result_type: TensorType):
        """`result_type`: a row's type where `scalar` is rows (`tensor<?xf32>`)."""
        if is_rows(SSAValue.get(scalar)) and not is_rows(result_type):
            result_type = rows_type(result_type)
        super().__init__(operands=[scalar], result_types=[result_type])

    def verify_(self) -> None:
        """Rows of scalars fill one tensor per row."""
        batched, shape = f32_rows_or_static(self.result, "result")
        expect_result(self.scalar, batched, (), f32, "scalar")


@irdl_op_definition
class MatvecOp(IRDLOperation):
    """Matrix-vector product `W x`.

    ```mlir
    %y = tmath.matvec %w, %x : tensor<4x3xf32>, tensor<3xf32> -> tensor<4xf32>
    ```
    """

    name = "tmath.matvec"
    matrix = operand_def(TensorType)
    vector = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$matrix `,` $vector attr-dict `:` type($matrix) `,` type($vector) "
        "`->` type($result)"
    )

    def __init__(self, matrix: SSAValue | Operation, vector: SSAValue | Operation):
        rows = shape_of(SSAValue.get(matrix))[0]
        result = TensorType(f32, [rows])
        super().__init__(
            operands=[matrix, vector],
            result_types=[rows_type(result) if is_rows(SSAValue.get(vector)) else result],
        )

    def verify_(self) -> None:
        """The vector may be rows (`tensor<?xKxf32>`): each row's product."""
        w = expect_f32_tensor(self.matrix, "matrix")
        batched, x = f32_rows_or_static(self.vector, "vector")
        expect_rank(w, 2, "matrix")
        expect_rank(x, 1, "vector")
        if w[1] != x[0]:
            raise VerifyException(
                f"matrix {fmt_shape(w)} cannot multiply vector {fmt_shape(x)}: "
                f"expected a vector of {w[1]} elements"
            )
        expect_result(self.result, batched, (w[0],), f32)


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """Matrix-matrix product `A B`.

    ```mlir
    %c = tmath.matmul %a, %b : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
    ```
    """

    name = "tmath.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"
    )

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        m = shape_of(SSAValue.get(lhs))[0]
        n = shape_of(SSAValue.get(rhs))[1]
        super().__init__(operands=[lhs, rhs], result_types=[TensorType(f32, [m, n])])

    def verify_(self) -> None:
        a = expect_f32_tensor(self.lhs, "lhs")
        b = expect_f32_tensor(self.rhs, "rhs")
        expect_rank(a, 2, "lhs")
        expect_rank(b, 2, "rhs")
        if a[1] != b[0]:
            raise VerifyException(
                f"inner dimensions differ: lhs {fmt_shape(a)}, rhs {fmt_shape(b)}; "
                f"expected rhs with {a[1]} rows"
            )
        expect_shape(expect_f32_tensor(self.result, "result"), (a[0], b[1]), "result")


@irdl_op_definition
class BilinearOp(IRDLOperation):
    """The RNTN tensor product: `r[k] = x^T V[k] y`.

    ```mlir
    %r = tmath.bilinear %v, %x, %y : tensor<2x3x3xf32>, tensor<3xf32>,
                                     tensor<3xf32> -> tensor<2xf32>
    ```
    """

    name = "tmath.bilinear"
    tensor = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$tensor `,` $lhs `,` $rhs attr-dict `:` type($tensor) `,` type($lhs) `,` "
        "type($rhs) `->` type($result)"
    )

    def __init__(self, tensor: SSAValue | Operation, lhs: SSAValue, rhs: SSAValue):
        d = shape_of(SSAValue.get(tensor))[0]
        result = TensorType(f32, [d])
        if is_rows(lhs) or is_rows(rhs):
            result = rows_type(result)
        super().__init__(operands=[tensor, lhs, rhs], result_types=[result])

    def verify_(self) -> None:
        """`lhs` and `rhs` may be rows: each row's product."""
        v = expect_f32_tensor(self.tensor, "tensor")
        x_rows, x = f32_rows_or_static(self.lhs, "lhs")
        y_rows, y = f32_rows_or_static(self.rhs, "rhs")
        expect_rank(v, 3, "tensor")
        expect_shape(x, (v[1],), "lhs")
        expect_shape(y, (v[2],), "rhs")
        expect_result(self.result, x_rows or y_rows, (v[0],), f32)


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenation along the first axis.

    ```mlir
    %c = tmath.concat %a, %b : tensor<3xf32>, tensor<4xf32> -> tensor<7xf32>
    ```
    """

    name = "tmath.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$inputs attr-dict `:` type($inputs) `->` type($result)"

    def __init__(self, inputs: Sequence[SSAValue | Operation]):
        values = [SSAValue.get(v) for v in inputs]
        batched = is_rows(values[0])
        shapes = [shape_of(v)[1:] if batched else shape_of(v) for v in values]
        shape = [sum(s[0] for s in shapes), *shapes[0][1:]]
        result = TensorType(f32, shape)
        super().__init__(operands=[values],
                         result_types=[rows_type(result) if batched else result])

    def verify_(self) -> None:
        """Rows inputs (all of them) concatenate each row's first axis."""
        if not self.inputs:
            raise VerifyException("expected at least one input")
        forms = [f32_rows_or_static(v, f"input {i}") for i, v in enumerate(self.inputs)]
        batched = forms[0][0]
        if any(rows != batched for rows, _ in forms):
            raise VerifyException("inputs must be all rows or all static tensors")
        shapes = [shape for _, shape in forms]
        trailing = shapes[0][1:]
        for i, s in enumerate(shapes):
            if len(s) == 0 or s[1:] != trailing:
                raise VerifyException(
                    f"input {i} has shape {fmt_shape(s)}, expected "
                    f"{len(shapes[0])}-d with trailing shape {fmt_shape(trailing)}"
                )
        expected = (sum(s[0] for s in shapes), *shapes[0][1:])
        expect_result(self.result, batched, expected, f32)


@irdl_op_definition
class SliceOp(IRDLOperation):
    """Rows `[offset, offset + size)` of the first axis; size from the result.

    ```mlir
    %g = tmath.slice %x[3] : tensor<10xf32> -> tensor<4xf32>
    ```
    """

    name = "tmath.slice"
    input = operand_def(TensorType)
    offset = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `[` $offset `]` attr-dict `:` type($input) `->` type($result)"
    )

    def __init__(self, input: SSAValue | Operation, offset: int, size: int):
        value = SSAValue.get(input)
        batched = is_rows(value)
        shape = shape_of(value)[1:] if batched else shape_of(value)
        result = TensorType(f32, [size, *shape[1:]])
        super().__init__(
            operands=[input],
            properties={"offset": IntegerAttr(offset, 64)},
            result_types=[rows_type(result) if batched else result],
        )

    def verify_(self) -> None:
        """Rows slice each row's first axis."""
        batched, x = f32_rows_or_static(self.input, "input")
        result_rows, r = f32_rows_or_static(self.result, "result")
        if result_rows != batched:
            raise VerifyException("result must be rows exactly when the input is")
        offset = self.offset.value.data
        if len(x) == 0 or len(r) != len(x) or r[1:] != x[1:]:
            raise VerifyException(
                f"result shape {fmt_shape(r)} is not a slice of {fmt_shape(x)}"
            )
        if offset < 0 or offset + r[0] > x[0]:
            raise VerifyException(
                f"slice [{offset}, {offset + r[0]}) is out of bounds for "
                f"shape {fmt_shape(x)}"
            )


@irdl_op_definition
class GatherOp(IRDLOperation):
    """Embedding lookup: row `index` of a matrix.

    ```mlir
    %e = tmath.gather %emb[%w] : tensor<100x8xf32>, i32 -> tensor<8xf32>
    ```
    """

    name = "tmath.gather"
    table = operand_def(TensorType)
    index = operand_def(IntegerType | IndexType | TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$table `[` $index `]` attr-dict `:` type($table) `,` type($index) "
        "`->` type($result)"
    )

    def __init__(self, table: SSAValue | Operation, index: SSAValue | Operation):
        shape = shape_of(SSAValue.get(table))
        result = TensorType(f32, shape[1:])
        if isinstance(SSAValue.get(index).type, TensorType):
            result = rows_type(result)
        super().__init__(operands=[table, index], result_types=[result])

    def verify_(self) -> None:
        """The index may be rows (`tensor<?xi32>`): one table row per row."""
        t = expect_f32_tensor(self.table, "table")
        expect_rank(t, 2, "table")
        batched = isinstance(self.index.type, TensorType)
        if batched:
            expect_index_rows(self.index, "index")
        expect_result(self.result, batched, t[1:], f32)


@irdl_op_definition
class ExtractOp(IRDLOperation):
    """Element `index` of a vector: reads structure arrays (children, word ids).

    ```mlir
    %left = tmath.extract %children[%node] : tensor<?xi32>, i32 -> i32
    ```
    """

    name = "tmath.extract"
    input = operand_def(TensorType)
    index = operand_def(IntegerType | IndexType | TensorType)
    result = result_def(IntegerType | Float32Type | TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `[` $index `]` attr-dict `:` type($input) `,` type($index) "
        "`->` type($result)"
    )

    def __init__(self, input: SSAValue | Operation, index: SSAValue | Operation):
        typ = SSAValue.get(input).type
        assert isinstance(typ, TensorType)
        batched = isinstance(SSAValue.get(index).type, TensorType)
        result = rows_type(typ.element_type) if batched else typ.element_type
        super().__init__(operands=[input, index], result_types=[result])

    def verify_(self) -> None:
        """The index may be rows (`tensor<?xi32>`): one element per row."""
        typ = self.input.type
        assert isinstance(typ, TensorType)
        if typ.get_num_dims() != 1:
            raise VerifyException(f"input must be a vector, got {typ}")
        batched = isinstance(self.index.type, TensorType)
        if batched:
            expect_index_rows(self.index, "index")
        expected = rows_type(typ.element_type) if batched else typ.element_type
        if expected != self.result.type:
            raise VerifyException(
                f"result type {self.result.type} differs from {expected}, the element "
                f"type of {typ}" + (" per row" if batched else "")
            )


@irdl_op_definition
class SizeOp(IRDLOperation):
    """The number of elements of a vector (e.g. nodes in a structure array).

    ```mlir
    %n = tmath.size %children : tensor<?xi32> -> i32
    ```
    """

    name = "tmath.size"
    input = operand_def(TensorType)
    result = result_def(IntegerType | IndexType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation, result_type: Attribute = i32):
        super().__init__(operands=[input], result_types=[result_type])

    def verify_(self) -> None:
        typ = self.input.type
        assert isinstance(typ, TensorType)
        if typ.get_num_dims() != 1:
            raise VerifyException(f"input must be a vector, got {typ}")


class ReductionOp(IRDLOperation):
    """`%s = tmath.<op> %x : tensor<...xf32> -> f32` over all elements."""

    input = operand_def(TensorType)
    result = result_def(Float32Type | TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation):
        batched = is_rows(SSAValue.get(input))
        super().__init__(operands=[input], result_types=[rows_type(f32) if batched else f32])

    def verify_(self) -> None:
        """Rows reduce each row (`tensor<?x4xf32> -> tensor<?xf32>`)."""
        batched, shape = f32_rows_or_static(self.input, "input")
        if 0 in shape:
            raise VerifyException(f"cannot reduce an empty tensor {fmt_shape(shape)}")
        expect_result(self.result, batched, (), f32)


@irdl_op_definition
class SumOp(ReductionOp):
    """```mlir
    %s = tmath.sum %x : tensor<4xf32> -> f32
    ```"""

    name = "tmath.sum"


@irdl_op_definition
class MaxOp(ReductionOp):
    """```mlir
    %m = tmath.max %x : tensor<4xf32> -> f32
    ```"""

    name = "tmath.max"


@irdl_op_definition
class ArgmaxOp(IRDLOperation):
    """Index of the largest element of a vector (the predicted class).

    ```mlir
    %k = tmath.argmax %logits : tensor<5xf32> -> i32
    ```
    """

    name = "tmath.argmax"
    input = operand_def(TensorType)
    result = result_def(IntegerType | TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation):
        batched = is_rows(SSAValue.get(input))
        super().__init__(operands=[input], result_types=[rows_type(i32) if batched else i32])

    def verify_(self) -> None:
        """Rows give one index per row."""
        batched, shape = f32_rows_or_static(self.input, "input")
        expect_rank(shape, 1, "input")
        expect_result(self.result, batched, (), i32)


@irdl_op_definition
class SoftmaxOp(SameTypeUnaryOp):
    """Softmax of a vector.

    ```mlir
    %p = tmath.softmax %logits : tensor<5xf32>
    ```
    """

    name = "tmath.softmax"

    def verify_(self) -> None:
        super().verify_()
        expect_rank(f32_rows_or_static(self.input, "input")[1], 1, "input")


@irdl_op_definition
class SoftmaxCrossEntropyOp(IRDLOperation):
    """`-log softmax(logits)[label]`: the per-node classification loss.

    ```mlir
    %l = tmath.softmax_xent %logits, %label : tensor<5xf32>, i32 -> f32
    ```
    """

    name = "tmath.softmax_xent"
    logits = operand_def(TensorType)
    label = operand_def(IntegerType | IndexType | TensorType)
    result = result_def(Float32Type | TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$logits `,` $label attr-dict `:` type($logits) `,` type($label) "
        "`->` type($result)"
    )

    def __init__(self, logits: SSAValue | Operation, label: SSAValue | Operation):
        batched = is_rows(SSAValue.get(logits))
        super().__init__(operands=[logits, label],
                         result_types=[rows_type(f32) if batched else f32])

    def verify_(self) -> None:
        """Rows of logits take rows of labels: one loss per row."""
        batched, shape = f32_rows_or_static(self.logits, "logits")
        expect_rank(shape, 1, "logits")
        if batched:
            expect_index_rows(self.label, "label")
        elif isinstance(self.label.type, TensorType):
            raise VerifyException(f"label must be an integer for static logits, got "
                                  f"{self.label.type}")
        expect_result(self.result, batched, (), f32)


@irdl_op_definition
class FusedOp(IRDLOperation):
    """A chain of elementwise ops applied in one pass over the elements.

    The body is the original ops on whole tensors (block arguments stand for
    the inputs), so it means exactly what the unfused ops meant; the native
    lowering evaluates it one element at a time in a single loop. Over rows
    (outputs `tensor<?x...>`), an input may have one row's shape: a uniform
    value every row shares, as in the unfused row forms.

    ```mlir
    %h = tmath.fused(%o, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
      %t = tmath.tanh %b : tensor<4xf32>
      %m = tmath.mul %a, %t : tensor<4xf32>
      tmath.yield %m : tensor<4xf32>
    }
    ```
    """

    name = "tmath.fused"
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(Pure())
    assembly_format = ("`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) "
                       "$body")

    def verify_(self) -> None:
        block = self.body.blocks[0]
        if [a.type for a in block.args] != [v.type for v in self.inputs]:
            raise VerifyException("body arguments must match the inputs' types")
        shapes = {shape_of(v) for v in self.outputs}
        row = next(iter(shapes))[1:] if len(shapes) == 1 and is_rows(self.outputs[0]) else None
        # over rows, a uniform input (one row's shape) is shared by every row
        shapes |= {shape_of(v) for v in self.inputs if shape_of(v) != row}
        if len(shapes) != 1:
            raise VerifyException("inputs and outputs must share one shape, got "
                                  + ", ".join(sorted(fmt_shape(s) for s in shapes))
                                  + " (over rows, an input may also have one row's shape)")
        for op in block.ops:
            if not isinstance(op, YieldOp) and not op.has_trait(Elementwise):
                raise VerifyException(f"'{op.name}' in the body is not elementwise")


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a `tmath.fused` body with its outputs."""

    name = "tmath.yield"
    values = var_operand_def(TensorType)
    traits = traits_def(IsTerminator(), HasParent(FusedOp))
    assembly_format = "$values attr-dict `:` type($values)"


ELEMENTWISE_UNARY = (NegOp, SigmoidOp, TanhOp, ReluOp, ExpOp, LogOp)
ELEMENTWISE_BINARY = (AddOp, SubOp, MulOp, DivOp)

TMath = Dialect(
    "tmath",
    [
        *ELEMENTWISE_BINARY,
        *ELEMENTWISE_UNARY,
        ConstantOp,
        FillOp,
        MatvecOp,
        MatmulOp,
        BilinearOp,
        ConcatOp,
        SliceOp,
        GatherOp,
        ExtractOp,
        SizeOp,
        SumOp,
        MaxOp,
        ArgmaxOp,
        SoftmaxOp,
        SoftmaxCrossEntropyOp,
        FusedOp,
        YieldOp,
    ],
)
