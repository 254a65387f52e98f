"""Result-type rules of the `tmath`, `adjoint` and `frontier` ops whose result
type follows from their operands (`op_base.InferredOp`).

Each rule takes an op's operands and returns its result type, or raises the
`VerifyException` its verifier reports: the builder and the verifier use the
same rule (as MLIR's `inferReturnTypes`), so a built op is typed as it is
checked. Where an operand is per invocation an op also takes rows of it
(`row_types.py`) and applies its meaning to each row.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    IndexType,
    IntegerType,
    SymbolRefAttr,
    TensorType,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import VerifyException

from recir.dialects.row_types import (
    expect_f32_tensor,
    expect_index_rows,
    expect_rank,
    expect_rows,
    expect_shape,
    expect_vector,
    f32_rows_or_static,
    fmt_shape,
    is_rows,
    rows_type,
    shape_of,
    typed,
)


def elementwise_unary(x: SSAValue) -> Attribute:
    f32_rows_or_static(x, "operand")
    return x.type


def elementwise_binary(lhs: SSAValue, rhs: SSAValue) -> Attribute:
    """Equal shapes, or rows and one row's shape (the uniform side is shared by
    every row)."""
    lhs_rows, lhs_shape = f32_rows_or_static(lhs, "lhs")
    rhs_rows, rhs_shape = f32_rows_or_static(rhs, "rhs")
    if lhs_shape != rhs_shape:
        raise VerifyException(
            f"operand shapes differ: lhs {fmt_shape(lhs_shape)}, "
            f"rhs {fmt_shape(rhs_shape)}; "
            "expected equal shapes (or rows of the other's shape)")
    return typed(lhs_rows or rhs_rows, lhs_shape, f32)


def softmax(x: SSAValue) -> Attribute:
    expect_rank(f32_rows_or_static(x, "operand")[1], 1, "input")
    return x.type


def reduction(x: SSAValue) -> Attribute:
    """Rows reduce each row (`tensor<?x4xf32> -> tensor<?xf32>`)."""
    batched, shape = f32_rows_or_static(x, "input")
    if 0 in shape:
        raise VerifyException(f"cannot reduce an empty tensor {fmt_shape(shape)}")
    return typed(batched, (), f32)


def argmax(x: SSAValue) -> Attribute:
    """Not of an empty vector: it has no largest element (natively it gave 0)."""
    batched, shape = f32_rows_or_static(x, "input")
    expect_rank(shape, 1, "input")
    if shape[0] == 0:
        raise VerifyException("cannot take the argmax of an empty vector")
    return typed(batched, (), i32)


def size(result: SSAValue) -> None:
    """`tmath.size`'s result holds any size: a narrower integer wrapped natively
    (300 read 44 as an i8) while the interpreter kept the size."""
    if result.type not in (i32, i64, IndexType()):
        raise VerifyException(f"result must be i32, i64 or index, got {result.type}")


def softmax_xent(logits: SSAValue, label: SSAValue) -> Attribute:
    """Rows of logits take rows of labels: one loss per row."""
    batched, shape = f32_rows_or_static(logits, "logits")
    expect_rank(shape, 1, "logits")
    if batched:
        expect_index_rows(label, "label")
    elif isinstance(label.type, TensorType):
        raise VerifyException(
            f"label must be an integer for static logits, got {label.type}")
    expect_not_i1(label, "label")
    return typed(batched, (), f32)


def matvec(matrix: SSAValue, vector: SSAValue) -> Attribute:
    """The vector may be rows (`tensor<?xKxf32>`): each row's product."""
    w = expect_f32_tensor(matrix, "matrix")
    batched, x = f32_rows_or_static(vector, "vector")
    expect_rank(w, 2, "matrix")
    expect_rank(x, 1, "vector")
    if w[1] != x[0]:
        raise VerifyException(f"matrix {fmt_shape(w)} cannot multiply vector "
                              f"{fmt_shape(x)}: expected a vector of {w[1]} elements")
    return typed(batched, (w[0],), f32)


def vecmat(vector: SSAValue, matrix: SSAValue) -> Attribute:
    """`wᵀ dy`, each row's where the vector is rows."""
    w = expect_f32_tensor(matrix, "matrix")
    expect_rank(w, 2, "matrix")
    batched, x = f32_rows_or_static(vector, "vector")
    expect_shape(x, (w[0],), "vector")
    return typed(batched, (w[1],), f32)


def matmul(lhs: SSAValue, rhs: SSAValue) -> Attribute:
    a = expect_f32_tensor(lhs, "lhs")
    b = expect_f32_tensor(rhs, "rhs")
    expect_rank(a, 2, "lhs")
    expect_rank(b, 2, "rhs")
    if a[1] != b[0]:
        raise VerifyException(f"inner dimensions differ: lhs {fmt_shape(a)}, rhs "
                              f"{fmt_shape(b)}; expected rhs with {a[1]} rows")
    return typed(False, (a[0], b[1]), f32)


def transpose(x: SSAValue) -> Attribute:
    a = expect_f32_tensor(x, "input")
    expect_rank(a, 2, "input")
    return typed(False, (a[1], a[0]), f32)


def bilinear(tensor: SSAValue, lhs: SSAValue, rhs: SSAValue) -> Attribute:
    """`lhs` and `rhs` may be rows: each row's product."""
    v = expect_f32_tensor(tensor, "tensor")
    x_rows, x = f32_rows_or_static(lhs, "lhs")
    y_rows, y = f32_rows_or_static(rhs, "rhs")
    expect_rank(v, 3, "tensor")
    expect_shape(x, (v[1],), "lhs")
    expect_shape(y, (v[2],), "rhs")
    return typed(x_rows or y_rows, (v[0],), f32)


def bilinear_grad(tensor: SSAValue, scale: SSAValue, other: SSAValue,
                  other_axis: int) -> Attribute:
    """The gradient of `bilinear` with respect to the side that `other` (of
    `tensor`'s axis `other_axis`) does not stand for; `scale` and `other`
    may be rows (each row's gradient)."""
    v = expect_f32_tensor(tensor, "tensor")
    expect_rank(v, 3, "tensor")
    scale_rows, scale_shape = f32_rows_or_static(scale, "scale")
    expect_shape(scale_shape, (v[0],), "scale")
    other_rows, other_shape = f32_rows_or_static(other, "other")
    expect_shape(other_shape, (v[other_axis],), "other")
    return typed(scale_rows or other_rows, (v[3 - other_axis],), f32)


def concat(*inputs: SSAValue) -> Attribute:
    """Rows inputs (all of them) concatenate each row's first axis."""
    if not inputs:
        raise VerifyException("expected at least one input")
    forms = [f32_rows_or_static(v, f"input {i}") for i, v in enumerate(inputs)]
    batched = forms[0][0]
    if any(rows != batched for rows, _ in forms):
        raise VerifyException("inputs must be all rows or all static tensors")
    shapes = [shape for _, shape in forms]
    trailing = shapes[0][1:]
    for i, s in enumerate(shapes):
        if len(s) == 0 or s[1:] != trailing:
            raise VerifyException(
                f"input {i} has shape {fmt_shape(s)}, expected "
                f"{len(shapes[0])}-d with trailing shape {fmt_shape(trailing)}")
    return typed(batched, (sum(s[0] for s in shapes), *trailing), f32)


def closed_body(op: Operation) -> None:
    """Every value the body of `op` uses is defined in it: native code
    evaluates the body from its block arguments alone."""
    for inner in (o for region in op.regions for o in region.walk()):
        for value in inner.operands:
            if not op.is_ancestor(value.owner):
                name = f"%{value.name_hint}" if value.name_hint else f"a {value.type}"
                raise VerifyException(f"'{inner.name}' in the body uses {name} defined "
                                      "outside the op: pass it as an input")


def fused_shapes(inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> None:
    """`tmath.fused`'s values share one shape; over rows, a uniform input
    (one row's shape) is shared by every row."""
    shapes = {shape_of(v) for v in outputs}
    row = next(iter(shapes))[1:] if len(shapes) == 1 and is_rows(outputs[0]) else None
    shapes |= {shape_of(v) for v in inputs if shape_of(v) != row}
    if len(shapes) != 1:
        raise VerifyException("inputs and outputs must share one shape, got "
                              + ", ".join(sorted(fmt_shape(s) for s in shapes))
                              + " (over rows, an input may also have one row's shape)")


def expect_not_i1(value: SSAValue, what: str) -> None:
    """An index or label is no i1: native code read true as -1, the
    interpreter as 1."""
    if isinstance(value.type, IntegerType) and value.type.width.data == 1:
        raise VerifyException(f"{what} is an i1: extend it to an integer type first")


def expect_index(index: SSAValue, rows: bool) -> None:
    """Rows of integers where the op's values are rows, else an integer
    that is no i1 (or a tensor, which the op refuses)."""
    if rows:
        expect_index_rows(index, "index")
    else:
        expect_not_i1(index, "index")


def is_index_rows(index: SSAValue) -> bool:
    """Whether an index is rows (then of integers) rather than one integer."""
    if isinstance(index.type, TensorType):
        expect_index_rows(index, "index")
        return True
    expect_not_i1(index, "index")
    return False


def gather(table: SSAValue, index: SSAValue) -> Attribute:
    """The index may be rows (`tensor<?xi32>`): one table row per row."""
    t = expect_f32_tensor(table, "table")
    expect_rank(t, 2, "table")
    return typed(is_index_rows(index), t[1:], f32)


def extract(vector: SSAValue, index: SSAValue) -> Attribute:
    """The index may be rows (`tensor<?xi32>`): one element per row."""
    element = expect_vector(vector, "input").element_type
    return typed(is_index_rows(index), (), element)


def take(source: SSAValue, rows: SSAValue) -> Attribute:
    expect_rows(source, "source")
    expect_index_rows(rows, "rows")
    return source.type


def broadcast(value: SSAValue, like: SSAValue) -> Attribute:
    expect_rows(like, "like")
    return rows_type(value.type)


def extract_ragged(values: SSAValue, offsets: SSAValue, tree: SSAValue,
                   index: SSAValue) -> Attribute:
    element = expect_vector(values, "values").element_type
    for v, what in ((offsets, "offsets"), (tree, "tree"), (index, "index")):
        expect_index_rows(v, what)
    return rows_type(element)


def schedule_callees(
    op: Operation, expand_name: SymbolRefAttr, post_name: SymbolRefAttr, sites: int,
    moving: Sequence[Attribute], shared: Sequence[Attribute],
    outputs: Sequence[Attribute],
) -> None:
    """The functions of a `frontier.schedule` take and return what it passes
    them and expects back (its docstring says what)."""
    index = rows_type(i32)
    moving = [index, *moving]
    per_site = [index, *moving]
    expand = callee(op, expand_name)
    expect_types(expand, "inputs", expand.function_type.inputs.data, [*moving, *shared])
    results = list(expand.function_type.outputs.data)
    if not 0 <= sites <= len(results) // len(per_site):  # (a huge count: a huge list)
        raise VerifyException(
            f"has sites = {sites}, but @{expand.sym_name.data} returns {len(results)} "
            f"results: room for at most {len(results) // len(per_site)} sites of "
            f"{len(per_site)} results each")
    stored = results[sites * len(per_site):]
    expect_types(expand, "results", results[:sites * len(per_site)], per_site * sites)
    post = callee(op, post_name)
    expect_types(post, "inputs", post.function_type.inputs.data,
                 [*stored, *[index] * sites, *outputs, *shared])
    expect_types(post, "results", post.function_type.outputs.data, outputs)


def callee(op: Operation, name: SymbolRefAttr) -> func.FuncOp:
    found = SymbolTable.lookup_symbol(op, name)
    if not isinstance(found, func.FuncOp):
        raise VerifyException(f"no function {name} in the module")
    return found


def expect_types(fn: func.FuncOp, what: str, got: Sequence[Attribute],
                 expected: Sequence[Attribute]) -> None:
    if list(got) != list(expected):
        raise VerifyException(
            f"@{fn.sym_name.data} {what} are ({', '.join(map(str, got))}), expected "
            f"({', '.join(map(str, expected))})")
