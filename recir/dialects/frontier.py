"""The `frontier` dialect: what frontier batching adds to `tmath`'s row forms.

`invoke-to-frontier` turns a recursive function into functions over *rows*
(one row per invocation of a frontier, `row_types.py`). Branches partition
the rows and merge the branch results back; an invoke in the bottom-up part
takes its children's result rows; per-tree structure arrays are read by each
row's tree. `frontier.schedule` is the runtime entry: it expands the call
tree depth by depth and runs the bottom-up function height by height.

```mlir
%leaf, %inner = frontier.partition %is_leaf : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
%h_leaf = frontier.take %h[%leaf] : tensor<?x8xf32>, tensor<?xi32>
%h2 = frontier.merge %h_leaf[%leaf], %h_inner[%inner] : tensor<?x8xf32>
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.arith import CMPF_COMPARISON_OPERATIONS, CMPI_COMPARISON_OPERATIONS
from xdsl.dialects.builtin import (
    I64,
    Float32Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    SymbolRefAttr,
    TensorType,
    i1,
    i32,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from recir.dialects import type_rules
from recir.dialects.op_base import InferredOp, PureOp
from recir.dialects.row_types import (
    expect_index_rows,
    expect_rows,
    is_f32_tensor,
    is_rows,
    rows_type,
)


@irdl_op_definition
class TakeOp(InferredOp):
    """Rows of a rows value by row number, `result[i] = source[rows[i]]`: ```mlir
    %c = frontier.take %h[%children] : tensor<?x8xf32>, tensor<?xi32>
    ```"""

    name = "frontier.take"
    T: ClassVar = VarConstraint("T", base(TensorType))
    source = operand_def(T)
    rows = operand_def(TensorType)
    result = result_def(T)
    assembly_format = "$source `[` $rows `]` attr-dict `:` type($source) `,` type($rows)"
    infer = staticmethod(type_rules.take)


@irdl_op_definition
class PartitionOp(PureOp):
    """The row numbers where a predicate holds and where it does not, each
    ascending: a branch runs on each part. ```mlir
    %yes, %no = frontier.partition %p : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
    ```"""

    name = "frontier.partition"
    predicate = operand_def(TensorType)
    taken = result_def(TensorType)
    others = result_def(TensorType)

    def __init__(self, predicate: SSAValue):
        super().__init__(operands=[predicate], result_types=[rows_type(i32)] * 2)

    def verify_(self) -> None:
        if self.predicate.type != rows_type(i1):
            raise VerifyException(f"predicate must be tensor<?xi1>, got {self.predicate.type}")
        expect_index_rows(self.taken, "first result")
        expect_index_rows(self.others, "second result")


@irdl_op_definition
class MergeOp(PureOp):
    """The inverse of a partition, `result[lhs_rows[i]] = lhs[i]`, likewise for
    `rhs`; the two row lists together number every result row once. ```mlir
    %h = frontier.merge %a[%yes], %b[%no] : tensor<?x8xf32>
    ```"""

    name = "frontier.merge"
    lhs = operand_def(TensorType)
    lhs_rows = operand_def(TensorType)
    rhs = operand_def(TensorType)
    rhs_rows = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = None

    def __init__(self, lhs: SSAValue, lhs_rows: SSAValue, rhs: SSAValue, rhs_rows: SSAValue):
        super().__init__(operands=[lhs, lhs_rows, rhs, rhs_rows], result_types=[lhs.type])

    @classmethod
    def parse(cls, parser: Parser) -> MergeOp:
        names: list[UnresolvedOperand] = []
        for k in range(2):  # `%lhs[%lhs_rows], %rhs[%rhs_rows]`
            if k:
                parser.parse_punctuation(",")
            names.append(parser.parse_unresolved_operand())
            parser.parse_punctuation("[")
            names.append(parser.parse_unresolved_operand())
            parser.parse_punctuation("]")
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ, index = parser.parse_type(), rows_type(i32)
        op = cls(*(parser.resolve_operand(n, t)
                   for n, t in zip(names, (typ, index) * 2, strict=True)))
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        for k in (0, 2):  # `%lhs[%lhs_rows], %rhs[%rhs_rows]`
            printer.print_string(", " if k else " ")
            printer.print_operand(self.operands[k])
            printer.print_string("[")
            printer.print_operand(self.operands[k + 1])
            printer.print_string("]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(f" : {self.result.type}")

    def verify_(self) -> None:
        expect_rows(self.lhs, "lhs")
        if self.rhs.type != self.lhs.type or self.result.type != self.lhs.type:
            raise VerifyException(f"lhs, rhs and result must share one type, got "
                                  f"{self.lhs.type}, {self.rhs.type}, {self.result.type}")
        expect_index_rows(self.lhs_rows, "lhs rows")
        expect_index_rows(self.rhs_rows, "rhs rows")


@irdl_op_definition
class BroadcastOp(InferredOp):
    """A uniform value repeated once per row of `like` (only its row count is
    read): ```mlir
    %zeros = frontier.broadcast %z, %like : tensor<8xf32>, tensor<?xi32> -> tensor<?x8xf32>
    ```"""

    name = "frontier.broadcast"
    value = operand_def()
    like = operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.broadcast)

    def verify_(self) -> None:
        if self.result.type != (expected := self.infer(*self.operands)):
            raise VerifyException(f"result has type {self.result.type}, expected {expected}")


class CompareOp(PureOp):
    """`arith.cmpi`/`cmpf` on rows: xDSL's arith types those results as i1."""

    PREDICATES: ClassVar[list[str]] = []
    ELEMENT: ClassVar[tuple[type[Attribute], ...]] = ()
    predicate = prop_def(IntegerAttr[I64])
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = None

    def __init__(self, lhs: SSAValue, rhs: SSAValue, predicate: int):
        super().__init__(operands=[lhs, rhs], result_types=[rows_type(i1)],
                         properties={"predicate": IntegerAttr(predicate, 64)})

    @classmethod
    def parse(cls, parser: Parser) -> CompareOp:
        pos = parser.pos
        mnemonic = parser.parse_identifier()
        if mnemonic not in cls.PREDICATES:
            parser.raise_error(f"unknown predicate {mnemonic!r}", pos, parser.pos)
        parser.parse_punctuation(",")
        lhs = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        rhs = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        op = cls(parser.resolve_operand(lhs, typ), parser.resolve_operand(rhs, typ),
                 cls.PREDICATES.index(mnemonic))
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.PREDICATES[self.predicate.value.data]}, ")
        printer.print_list((self.lhs, self.rhs), printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(f" : {self.lhs.type}")

    def verify_(self) -> None:
        typ = self.lhs.type
        if (not isinstance(typ, TensorType) or typ.get_num_dims() != 1 or not is_rows(typ)
                or not isinstance(typ.element_type, self.ELEMENT)):
            raise VerifyException(f"operands must be rows of scalars, got {typ}")
        if self.rhs.type != typ:
            raise VerifyException(f"operand types differ: {typ}, {self.rhs.type}")
        if not 0 <= self.predicate.value.data < len(self.PREDICATES):
            raise VerifyException(f"unknown predicate {self.predicate.value.data}")
        if self.result.type != rows_type(i1):
            raise VerifyException(f"result must be tensor<?xi1>, got {self.result.type}")


@irdl_op_definition
class CmpiOp(CompareOp):
    """```mlir
    %p = frontier.cmpi slt, %a, %b : tensor<?xi32>
    ```"""

    name = "frontier.cmpi"
    PREDICATES: ClassVar[list[str]] = CMPI_COMPARISON_OPERATIONS
    ELEMENT: ClassVar[tuple[type[Attribute], ...]] = (IntegerType, IndexType)


@irdl_op_definition
class CmpfOp(CompareOp):
    """```mlir
    %p = frontier.cmpf ogt, %a, %b : tensor<?xf32>
    ```"""

    name = "frontier.cmpf"
    PREDICATES: ClassVar[list[str]] = CMPF_COMPARISON_OPERATIONS
    ELEMENT: ClassVar[tuple[type[Attribute], ...]] = (Float32Type,)


@irdl_op_definition
class ExtractRaggedOp(InferredOp):
    """Element `index[r]` of row r's tree's array: `values` holds every
    tree's array one after the other, tree t's from `offsets[t]` to
    `offsets[t + 1]` (so `offsets` has one more entry than there are trees).

    ```mlir
    %l = frontier.extract_ragged %left, %offsets[%tree, %node]
        : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
    ```
    """

    name = "frontier.extract_ragged"
    values = operand_def(TensorType)
    offsets = operand_def(TensorType)
    tree = operand_def(TensorType)
    index = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = ("$values `,` $offsets `[` $tree `,` $index `]` attr-dict `:` "
                       "type(operands) `->` type(results)")
    infer = staticmethod(type_rules.extract_ragged)


@irdl_op_definition
class SizeRaggedOp(PureOp):
    """The length of row r's tree's array (see `extract_ragged`): ```mlir
    %n = frontier.size_ragged %offsets[%tree] : tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
    ```"""

    name = "frontier.size_ragged"
    offsets = operand_def(TensorType)
    tree = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$offsets `[` $tree `]` attr-dict `:` type(operands) `->` type(results)"

    def verify_(self) -> None:
        for v, what in ((self.offsets, "offsets"), (self.tree, "tree"), (self.result, "result")):
            expect_index_rows(v, what)


class ScheduleBase(IRDLOperation):
    """The functions a schedule runs (`@expand`, `@post`) and its invoke sites."""

    expand = prop_def(SymbolRefAttr)
    post = prop_def(SymbolRefAttr)
    sites = prop_def(IntegerAttr[I64])
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())


@irdl_op_definition
class ScheduleOp(ScheduleBase):
    """Run a recursive function for a batch, frontier by frontier.

    `@expand` runs once per depth on that depth's invocations (rows). Its
    arguments: each row's tree (the batch element it belongs to), the moving
    arguments (those an invoke changes), then `shared`. Its results: per
    invoke site, the rows that reach it and their children's tree and moving
    arguments (one row per child); then the stored values the bottom-up part
    reads, one row per invocation. The roots are given as `moving` (one row
    per batch element; the runtime numbers their trees).

    `@post` runs once per height, leaves first, on that height's rows. Its
    arguments: the stored values, per site each row's child (its row number
    among all invocations, -1 where none), the results so far (every
    invocation's rows), then `shared`; its results: these rows' results.
    The op's results are the roots' results.

    ```mlir
    %h, %loss = frontier.schedule @node__expand, @node__post (%root) shared(%left, %off)
        {sites = 2 : i64} : (tensor<?xi32>), (tensor<?xi32>, tensor<?xi32>)
        -> (tensor<?x8xf32>, tensor<?xf32>)
    ```
    """

    name = "frontier.schedule"
    moving = var_operand_def(TensorType)
    shared = var_operand_def()
    outputs = var_result_def(TensorType)
    assembly_format = ("$expand `,` $post `(` $moving `)` `shared` `(` $shared `)` "
                       "attr-dict `:` `(` type($moving) `)` `,` `(` type($shared) `)` "
                       "`->` `(` type($outputs) `)`")

    def __init__(self, expand: str, post: str, sites: int, moving: Sequence[SSAValue],
                 shared: Sequence[SSAValue], outputs: Sequence[Attribute]):
        super().__init__(
            operands=[moving, shared], result_types=[outputs],
            properties={"expand": SymbolRefAttr(expand), "post": SymbolRefAttr(post),
                        "sites": IntegerAttr(sites, 64)})

    def verify_(self) -> None:
        for v in self.moving:
            expect_rows(v, "each root argument")
        type_rules.schedule_callees(self, self.expand, self.post, self.sites.value.data,
                                    self.moving.types, self.shared.types, self.outputs.types)


@irdl_op_definition
class ScheduleGradOp(ScheduleBase):
    """The gradient of a `frontier.schedule`: given the cotangents of its
    float results (one row per batch element), the gradients of its float
    operands (the roots' moving arguments, then the shared ones), in order.
    The runtime runs the schedule with `@post_fwd` (and `@expand_fwd` where
    the expansion makes floats), then `@post_bwd` by height from the roots
    down and `@expand_bwd` by depth from the deepest up; `synthesize-gradients`
    makes those functions and emits this op for a schedule. A `_fwd` returns
    its results, then the rows it saves for the backward (its products'
    outputs: rows have no static size for a `!tape.frame`), then its frame;
    the runtime keeps the saved rows and frame of each height (or depth) and
    passes them, in that order, as the leading arguments of its `_bwd`.

    ```mlir
    %dh0, %dw = frontier.schedule_grad @grow__expand, @grow__post (%dt) moving(%h0, %d0)
        shared(%w) {sites = 1 : i64} : (tensor<?xf32>), (tensor<?x2xf32>, tensor<?xi32>),
        (tensor<2x2xf32>) -> (tensor<?x2xf32>, tensor<2x2xf32>)
    ```
    """

    name = "frontier.schedule_grad"
    cotangents = var_operand_def(TensorType)
    moving = var_operand_def(TensorType)
    shared = var_operand_def()
    gradients = var_result_def(TensorType)
    assembly_format = ("$expand `,` $post `(` $cotangents `)` `moving` `(` $moving `)` "
                       "`shared` `(` $shared `)` attr-dict `:` `(` type($cotangents) `)` `,` "
                       "`(` type($moving) `)` `,` `(` type($shared) `)` `->` "
                       "`(` type($gradients) `)`")

    def __init__(self, forward: ScheduleOp, cotangents: Sequence[SSAValue],
                 moving: Sequence[SSAValue], shared: Sequence[SSAValue]):
        floats = [v.type for v in (*moving, *shared) if is_f32_tensor(v.type)]
        super().__init__(
            operands=[cotangents, moving, shared], result_types=[floats],
            properties={"expand": forward.expand, "post": forward.post,
                        "sites": forward.sites})

    def verify_(self) -> None:
        for v in (*self.cotangents, *self.moving):
            expect_rows(v, "each cotangent and root argument")
        floats = [v.type for v in (*self.moving, *self.shared) if is_f32_tensor(v.type)]
        if [r.type for r in self.gradients] != floats:
            raise VerifyException("results must be the f32 tensor operands' gradients, "
                                  f"({', '.join(map(str, floats))})")


Frontier = Dialect(
    "frontier",
    [TakeOp, PartitionOp, MergeOp, BroadcastOp, CmpiOp, CmpfOp, ExtractRaggedOp,
     SizeRaggedOp, ScheduleOp, ScheduleGradOp],
)
