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

from xdsl.dialects import func
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
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure, SymbolTable
from xdsl.utils.exceptions import VerifyException

from recir.dialects.row_types import expect_index_rows, is_rows, rows_type, type_of


def expect_rows(value: SSAValue | Attribute, what: str) -> None:
    if not is_rows(value):
        raise VerifyException(f"{what} must be rows (a tensor with a leading ? and "
                              f"static other dimensions), got {type_of(value)}")


@irdl_op_definition
class TakeOp(IRDLOperation):
    """Rows of a rows value by row number: `result[i] = source[rows[i]]`.

    ```mlir
    %c = frontier.take %h[%children] : tensor<?x8xf32>, tensor<?xi32>
    ```
    """

    name = "frontier.take"
    source = operand_def(TensorType)
    rows = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, source: SSAValue, rows: SSAValue):
        super().__init__(operands=[source, rows], result_types=[source.type])

    @classmethod
    def parse(cls, parser: Parser) -> TakeOp:
        source = parser.parse_unresolved_operand()
        parser.parse_punctuation("[")
        rows = parser.parse_unresolved_operand()
        parser.parse_punctuation("]")
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        source_t = parser.parse_type()
        parser.parse_punctuation(",")
        rows_t = parser.parse_type()
        op = cls(parser.resolve_operand(source, source_t), parser.resolve_operand(rows, rows_t))
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.source)
        printer.print_string("[")
        printer.print_operand(self.rows)
        printer.print_string("]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(f" : {self.source.type}, {self.rows.type}")

    def verify_(self) -> None:
        expect_rows(self.source, "source")
        expect_index_rows(self.rows, "rows")
        if self.result.type != self.source.type:
            raise VerifyException(f"result type {self.result.type} differs from the "
                                  f"source's {self.source.type}")


@irdl_op_definition
class PartitionOp(IRDLOperation):
    """The row numbers where a predicate holds and where it does not, each
    ascending: a branch runs on each part.

    ```mlir
    %yes, %no = frontier.partition %p : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
    ```
    """

    name = "frontier.partition"
    predicate = operand_def(TensorType)
    taken = result_def(TensorType)
    others = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = ("$predicate attr-dict `:` type($predicate) `->` type($taken) `,` "
                       "type($others)")

    def __init__(self, predicate: SSAValue):
        index = rows_type(IntegerType(32))
        super().__init__(operands=[predicate], result_types=[index, index])

    def verify_(self) -> None:
        if self.predicate.type != rows_type(i1):
            raise VerifyException(f"predicate must be tensor<?xi1>, got {self.predicate.type}")
        expect_index_rows(self.taken, "first result")
        expect_index_rows(self.others, "second result")


@irdl_op_definition
class MergeOp(IRDLOperation):
    """The inverse of a partition: `result[lhs_rows[i]] = lhs[i]`, likewise
    for `rhs`; the two row lists together number every result row once.

    ```mlir
    %h = frontier.merge %a[%yes], %b[%no] : tensor<?x8xf32>
    ```
    """

    name = "frontier.merge"
    lhs = operand_def(TensorType)
    lhs_rows = operand_def(TensorType)
    rhs = operand_def(TensorType)
    rhs_rows = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, lhs_rows: SSAValue, rhs: SSAValue, rhs_rows: SSAValue):
        super().__init__(operands=[lhs, lhs_rows, rhs, rhs_rows], result_types=[lhs.type])

    @classmethod
    def parse(cls, parser: Parser) -> MergeOp:
        names = []
        for k in range(2):
            if k:
                parser.parse_punctuation(",")
            names.append(parser.parse_unresolved_operand())
            parser.parse_punctuation("[")
            names.append(parser.parse_unresolved_operand())
            parser.parse_punctuation("]")
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        index = rows_type(IntegerType(32))
        values = [parser.resolve_operand(n, t)
                  for n, t in zip(names, [typ, index, typ, index], strict=True)]
        op = cls(*values)
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.lhs)
        printer.print_string("[")
        printer.print_operand(self.lhs_rows)
        printer.print_string("], ")
        printer.print_operand(self.rhs)
        printer.print_string("[")
        printer.print_operand(self.rhs_rows)
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
class BroadcastOp(IRDLOperation):
    """A uniform value repeated once per row of `like` (only its row count
    is read).

    ```mlir
    %zeros = frontier.broadcast %z, %like : tensor<8xf32>, tensor<?xi32> -> tensor<?x8xf32>
    ```
    """

    name = "frontier.broadcast"
    value = operand_def()
    like = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = ("$value `,` $like attr-dict `:` type($value) `,` type($like) `->` "
                       "type($result)")

    def __init__(self, value: SSAValue, like: SSAValue):
        super().__init__(operands=[value, like], result_types=[rows_type(value.type)])

    def verify_(self) -> None:
        expect_rows(self.like, "like")
        if self.result.type != rows_type(self.value.type):
            raise VerifyException(f"result has type {self.result.type}, expected "
                                  f"{rows_type(self.value.type)}")


class CompareOp(IRDLOperation):
    """`arith.cmpi`/`cmpf` on rows: xDSL's arith types those results as i1."""

    PREDICATES: ClassVar[list[str]] = []
    ELEMENT: ClassVar[tuple[type[Attribute], ...]] = ()
    predicate = prop_def(IntegerAttr[I64])
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

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
        printer.print_operand(self.lhs)
        printer.print_string(", ")
        printer.print_operand(self.rhs)
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
class ExtractRaggedOp(IRDLOperation):
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
    traits = traits_def(Pure())
    assembly_format = ("$values `,` $offsets `[` $tree `,` $index `]` attr-dict `:` "
                       "type($values) `,` type($offsets) `,` type($tree) `,` type($index) "
                       "`->` type($result)")

    def __init__(self, values: SSAValue, offsets: SSAValue, tree: SSAValue, index: SSAValue):
        typ = values.type
        assert isinstance(typ, TensorType)
        super().__init__(operands=[values, offsets, tree, index],
                         result_types=[rows_type(typ.element_type)])

    def verify_(self) -> None:
        typ = self.values.type
        assert isinstance(typ, TensorType)
        if typ.get_num_dims() != 1:
            raise VerifyException(f"values must be a vector, got {typ}")
        expect_index_rows(self.offsets, "offsets")
        expect_index_rows(self.tree, "tree")
        expect_index_rows(self.index, "index")
        if self.result.type != rows_type(typ.element_type):
            raise VerifyException(f"result has type {self.result.type}, expected "
                                  f"{rows_type(typ.element_type)}")


@irdl_op_definition
class SizeRaggedOp(IRDLOperation):
    """The length of row r's tree's array (see `extract_ragged`).

    ```mlir
    %n = frontier.size_ragged %offsets[%tree] : tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
    ```
    """

    name = "frontier.size_ragged"
    offsets = operand_def(TensorType)
    tree = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = ("$offsets `[` $tree `]` attr-dict `:` type($offsets) `,` type($tree) "
                       "`->` type($result)")

    def verify_(self) -> None:
        expect_index_rows(self.offsets, "offsets")
        expect_index_rows(self.tree, "tree")
        expect_index_rows(self.result, "result")


@irdl_op_definition
class ScheduleOp(IRDLOperation):
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
    expand = prop_def(SymbolRefAttr)
    post = prop_def(SymbolRefAttr)
    sites = prop_def(IntegerAttr[I64])
    moving = var_operand_def(TensorType)
    shared = var_operand_def()
    outputs = var_result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
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
        index = rows_type(IntegerType(32))
        moving = [index, *(v.type for v in self.moving)]
        shared = [v.type for v in self.shared]
        outputs = [r.type for r in self.outputs]
        sites = self.sites.value.data
        expand = self.callee(self.expand)
        per_site = [index, *moving]
        expect_types(expand, "inputs", expand.function_type.inputs.data, [*moving, *shared])
        results = list(expand.function_type.outputs.data)
        stored = results[sites * len(per_site):]
        expect_types(expand, "results", results[:sites * len(per_site)], per_site * sites)
        post = self.callee(self.post)
        expect_types(post, "inputs", post.function_type.inputs.data,
                     [*stored, *[index] * sites, *outputs, *shared])
        expect_types(post, "results", post.function_type.outputs.data, outputs)

    def callee(self, name: SymbolRefAttr) -> func.FuncOp:
        found = SymbolTable.lookup_symbol(self, name)
        if not isinstance(found, func.FuncOp):
            raise VerifyException(f"no function {name} in the module")
        return found


@irdl_op_definition
class ScheduleGradOp(IRDLOperation):
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
    expand = prop_def(SymbolRefAttr)
    post = prop_def(SymbolRefAttr)
    sites = prop_def(IntegerAttr[I64])
    cotangents = var_operand_def(TensorType)
    moving = var_operand_def(TensorType)
    shared = var_operand_def()
    gradients = var_result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
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


def is_f32_tensor(typ: Attribute) -> bool:
    return isinstance(typ, TensorType) and isinstance(typ.element_type, Float32Type)


def expect_types(fn: func.FuncOp, what: str, got: Sequence[Attribute],
                 expected: Sequence[Attribute]) -> None:
    if list(got) != list(expected):
        raise VerifyException(
            f"@{fn.sym_name.data} {what} are ({', '.join(map(str, got))}), expected "
            f"({', '.join(map(str, expected))})")


Frontier = Dialect(
    "frontier",
    [TakeOp, PartitionOp, MergeOp, BroadcastOp, CmpiOp, CmpfOp, ExtractRaggedOp,
     SizeRaggedOp, ScheduleOp, ScheduleGradOp],
)
