"""The `tmath` dialect: tensor math for the cells of recursive models.

Tensors are builtin `tensor<...xf32>` values with static shapes and value
semantics; structure arrays (children, word ids) are `tensor<?xi32>` and are
read with `tmath.extract`. Scalars are `f32`, `i32` or `index`. Where an
operand is per invocation an op also takes rows of it (`row_types.py`).
Every shape rule is checked by a verifier whose message names the op, the
shapes it got and what it expected.

Elementwise ops derive from `ElementwiseUnaryOp`/`ElementwiseBinaryOp` and
carry the `Elementwise` trait, which the fusion pass keys on.

```mlir
%c = tmath.add %a, %b : tensor<4xf32>       // also sub, mul, div
%y = tmath.tanh %x : tensor<4xf32>          // also neg, sigmoid, relu, exp, log
%s = tmath.sum %x : tensor<4xf32> -> f32    // also max
```
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
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

from recir.dialects import type_rules
from recir.dialects.op_base import InferredOp, PureOp, SameShapeOp, named_ops
from recir.dialects.row_types import (
    expect_f32_tensor,
    expect_type,
    expect_vector,
    f32_rows_or_static,
    fmt_shape,
    is_rows,
    rows_type,
    shape_of,
    typed,
)


class Elementwise(OpTrait):
    """Marks ops that apply one scalar function to every element position."""


class SameTypeUnaryOp(SameShapeOp):
    """`%r = tmath.<op> %x : tensor<...xf32>`: result and operand share a type."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.elementwise_unary)


class ElementwiseUnaryOp(SameTypeUnaryOp):
    """A unary op applied to every element: fusion keys on `Elementwise`."""

    traits = traits_def(Pure(), Elementwise())


class ElementwiseBinaryOp(SameShapeOp):
    """`%r = tmath.<op> %a, %b : tensor<...xf32>`: both operands share the type."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    infer = staticmethod(type_rules.elementwise_binary)


class ReductionOp(InferredOp):
    """`%s = tmath.<op> %x : tensor<...xf32> -> f32` over all elements."""

    input = operand_def(TensorType)
    result = result_def(Float32Type | TensorType)
    infer = staticmethod(type_rules.reduction)


ELEMENTWISE_BINARY = AddOp, SubOp, MulOp, DivOp = named_ops(
    ElementwiseBinaryOp, "tmath", "add", "sub", "mul", "div")
ELEMENTWISE_UNARY = NegOp, SigmoidOp, TanhOp, ReluOp, ExpOp, LogOp = named_ops(
    ElementwiseUnaryOp, "tmath", "neg", "sigmoid", "tanh", "relu", "exp", "log")
SumOp, MaxOp = named_ops(ReductionOp, "tmath", "sum", "max")


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A constant f32 tensor (splat or full): ```mlir
    %z = tmath.constant dense<0.0> : tensor<4xf32>
    ```"""

    name = "tmath.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(properties={"value": value}, result_types=[value.type])

    def verify_(self) -> None:
        expect_f32_tensor(self.result, "result")
        if self.value.type != self.result.type:
            raise VerifyException(f"value type {self.value.type} differs from result "
                                  f"{self.result.type}")

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
class FillOp(PureOp):
    """Broadcast an f32 scalar to a tensor: ```mlir
    %t = tmath.fill %s : f32 -> tensor<4xf32>
    ```"""

    name = "tmath.fill"
    scalar = operand_def(Float32Type | TensorType)
    result = result_def(TensorType)

    def __init__(self, scalar: SSAValue | Operation, result_type: TensorType):
        """`result_type`: a row's type where `scalar` is rows (`tensor<?xf32>`)."""
        if is_rows(SSAValue.get(scalar)) and not is_rows(result_type):
            result_type = rows_type(result_type)
        super().__init__(operands=[scalar], result_types=[result_type])

    def verify_(self) -> None:
        """Rows of scalars fill one tensor per row."""
        batched, _ = f32_rows_or_static(self.result, "result")
        expect_type(self.scalar, typed(batched, (), f32), "scalar")


@irdl_op_definition
class MatvecOp(InferredOp):
    """Matrix-vector product `W x`: ```mlir
    %y = tmath.matvec %w, %x : tensor<4x3xf32>, tensor<3xf32> -> tensor<4xf32>
    ```"""

    name = "tmath.matvec"
    matrix = operand_def(TensorType)
    vector = operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.matvec)


@irdl_op_definition
class MatmulOp(InferredOp):
    """Matrix-matrix product `A B`: ```mlir
    %c = tmath.matmul %a, %b : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
    ```"""

    name = "tmath.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.matmul)


@irdl_op_definition
class BilinearOp(InferredOp):
    """The RNTN tensor product `r[k] = x^T V[k] y`: ```mlir
    %r = tmath.bilinear %v, %x, %y : tensor<2x3x3xf32>, tensor<3xf32>,
                                     tensor<3xf32> -> tensor<2xf32>
    ```"""

    name = "tmath.bilinear"
    tensor = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.bilinear)


@irdl_op_definition
class ConcatOp(InferredOp):
    """Concatenation along the first axis: ```mlir
    %c = tmath.concat %a, %b : tensor<3xf32>, tensor<4xf32> -> tensor<7xf32>
    ```"""

    name = "tmath.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.concat)

    def __init__(self, inputs: Sequence[SSAValue | Operation]):
        values = [SSAValue.get(v) for v in inputs]
        IRDLOperation.__init__(self, operands=[values], result_types=[self.result_type(values)])


@irdl_op_definition
class SliceOp(IRDLOperation):
    """Rows `[offset, offset + size)` of the first axis, size from the result: ```mlir
    %g = tmath.slice %x[3] : tensor<10xf32> -> tensor<4xf32>
    ```"""

    name = "tmath.slice"
    input = operand_def(TensorType)
    offset = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input `[` $offset `]` attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation, offset: int, size: int):
        value = SSAValue.get(input)
        batched = is_rows(value)
        shape = shape_of(value)[1:] if batched else shape_of(value)
        super().__init__(operands=[input], properties={"offset": IntegerAttr(offset, 64)},
                         result_types=[typed(batched, (size, *shape[1:]), f32)])

    def verify_(self) -> None:
        """Rows slice each row's first axis."""
        batched, x = f32_rows_or_static(self.input, "input")
        result_rows, r = f32_rows_or_static(self.result, "result")
        if result_rows != batched:
            raise VerifyException("result must be rows exactly when the input is")
        offset = self.offset.value.data
        if len(x) == 0 or len(r) != len(x) or r[1:] != x[1:]:
            raise VerifyException(f"result shape {fmt_shape(r)} is not a slice of "
                                  f"{fmt_shape(x)}")
        if offset < 0 or offset + r[0] > x[0]:
            raise VerifyException(f"slice [{offset}, {offset + r[0]}) is out of bounds "
                                  f"for shape {fmt_shape(x)}")


@irdl_op_definition
class GatherOp(InferredOp):
    """Embedding lookup, row `index` of a matrix: ```mlir
    %e = tmath.gather %emb[%w] : tensor<100x8xf32>, i32 -> tensor<8xf32>
    ```"""

    name = "tmath.gather"
    table = operand_def(TensorType)
    index = operand_def(IntegerType | IndexType | TensorType)
    result = result_def(TensorType)
    assembly_format = "$table `[` $index `]` attr-dict `:` type(operands) `->` type(results)"
    infer = staticmethod(type_rules.gather)


@irdl_op_definition
class ExtractOp(InferredOp):
    """Element `index` of a vector, to read structure arrays: ```mlir
    %left = tmath.extract %children[%node] : tensor<?xi32>, i32 -> i32
    ```"""

    name = "tmath.extract"
    input = operand_def(TensorType)
    index = operand_def(IntegerType | IndexType | TensorType)
    result = result_def(IntegerType | Float32Type | TensorType)
    assembly_format = "$input `[` $index `]` attr-dict `:` type(operands) `->` type(results)"
    infer = staticmethod(type_rules.extract)


@irdl_op_definition
class SizeOp(PureOp):
    """The number of elements of a vector (nodes in a structure array): ```mlir
    %n = tmath.size %children : tensor<?xi32> -> i32
    ```"""

    name = "tmath.size"
    input = operand_def(TensorType)
    result = result_def(IntegerType | IndexType)

    def __init__(self, input: SSAValue | Operation, result_type: Attribute = i32):
        super().__init__(operands=[input], result_types=[result_type])

    def verify_(self) -> None:
        expect_vector(self.input, "input")
        type_rules.size(self.result)


@irdl_op_definition
class ArgmaxOp(InferredOp):
    """Index of the largest element of a vector (the predicted class): ```mlir
    %k = tmath.argmax %logits : tensor<5xf32> -> i32
    ```"""

    name = "tmath.argmax"
    input = operand_def(TensorType)
    result = result_def(IntegerType | TensorType)
    infer = staticmethod(type_rules.argmax)


@irdl_op_definition
class SoftmaxOp(SameTypeUnaryOp):
    """Softmax of a vector: ```mlir
    %p = tmath.softmax %logits : tensor<5xf32>
    ```"""

    name = "tmath.softmax"
    infer = staticmethod(type_rules.softmax)


@irdl_op_definition
class SoftmaxCrossEntropyOp(InferredOp):
    """`-log softmax(logits)[label]`, the per-node classification loss: ```mlir
    %l = tmath.softmax_xent %logits, %label : tensor<5xf32>, i32 -> f32
    ```"""

    name = "tmath.softmax_xent"
    logits = operand_def(TensorType)
    label = operand_def(IntegerType | IndexType | TensorType)
    result = result_def(Float32Type | TensorType)
    infer = staticmethod(type_rules.softmax_xent)


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
        type_rules.fused_shapes(self.inputs, self.outputs)
        type_rules.closed_body(self)
        for op in block.ops:
            if not isinstance(op, YieldOp) and not op.has_trait(Elementwise):
                raise VerifyException(f"'{op.name}' in the body is not elementwise")
        end = block.last_op  # (natively, values yielded past the results went unread)
        yielded = [v.type for v in end.values] if isinstance(end, YieldOp) else None
        if yielded != [v.type for v in self.outputs]:
            raise VerifyException("the body must end with a 'tmath.yield' of the results' "
                                  f"types ({', '.join(str(v.type) for v in self.outputs)})")


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a `tmath.fused` body with its outputs."""

    name = "tmath.yield"
    values = var_operand_def(TensorType)
    traits = traits_def(IsTerminator(), HasParent(FusedOp))
    assembly_format = "$values attr-dict `:` type($values)"


TMath = Dialect("tmath", [
    *ELEMENTWISE_BINARY, *ELEMENTWISE_UNARY, ConstantOp, FillOp, MatvecOp, MatmulOp,
    BilinearOp, ConcatOp, SliceOp, GatherOp, ExtractOp, SizeOp, SumOp, MaxOp, ArgmaxOp,
    SoftmaxOp, SoftmaxCrossEntropyOp, FusedOp, YieldOp,
])
