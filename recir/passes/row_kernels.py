"""Loop kernels for the row forms of `tmath`, `adjoint` and `arith` ops (see `row_lowering.py`).

Most ops mean on every row what they mean on one invocation: their kernel is
`per_row`, a loop over the rows around the op's own kernel (`tmath_kernels`,
`adjoint_kernels`) called with each row's values; the inner loop over a
row's elements is that kernel's, and vectorizes as it does. A uniform
operand (a parameter: a static buffer) is the same for every row. An
elementwise loop (a fused chain, an op of `SCALAR`) is a call of a function
whose pointers LLVM may take as apart (`apart`). The ops whose row form
differs have kernels of their own: products over rows (one GEMM,
`row_products`), views and copies of whole rows, reads of a shared array,
and the accumulations into parameters (`adjoint_row_kernels`). A kernel
gets a `RowEmitter` before the op and the operands lowered (`Rows`,
buffers, scalars) and returns the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from xdsl.dialects import arith, llvm, math
from xdsl.dialects.builtin import TensorType, i1, i8, i32
from xdsl.ir import Operation, SSAValue

from recir.dialects import adjoint, tmath
from recir.dialects.row_types import ROW_ARITH, is_rows
from recir.passes.adjoint_kernels import ADJOINT_INTO, ADJOINT_KERNELS
from recir.passes.convert_recir_to_llvm import expand_math
from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import Emitter
from recir.passes.row_matvec import matvec_plus
from recir.passes.row_products import bilinear_rows, each_row_on_team
from recir.passes.rows import (
    Lowered,
    RowEmitter,
    Rows,
    plain_rows,
    row_at,
    row_width,
    rows_of,
    storage,
)
from recir.passes.tmath_kernels import (
    INTO,
    KERNELS,
    SCALAR,
    Kernel,
    checked,
    each_element_vectors,
    enclosing_module,
    row_size,
    size,
)

RowKernel = Callable[[RowEmitter, Operation, Sequence[Lowered]], Lowered | tuple[Lowered, ...]]

# the elementwise loops, whose rows a team splits where their work pays
ON_TEAM = (*SCALAR, *ROW_ARITH, tmath.FusedOp)


def elem_of(value: SSAValue) -> object:
    typ = value.type
    return storage(typ.element_type if isinstance(typ, TensorType) else typ)


def is_scalar_rows(value: SSAValue) -> bool:
    """Rows of scalars: a row is a value, not a buffer."""
    return is_rows(value) and len(tmath.shape_of(value)) == 1


def one_row(b: Emitter, value: Lowered, r: SSAValue, scalar: bool) -> SSAValue:
    """Row `r` of `value` as the op's kernel takes it: a scalar's value, a
    tensor's data; a uniform operand as it is."""
    at = row_at(b, value, r)
    return b.load(at, 0, value.elem) if scalar and isinstance(value, Rows) else at


def per_row(kernel: Kernel, into: bool = False, tensors: bool = False) -> RowKernel:
    """`kernel`, the op's for one invocation, on each row: written into the
    row of each result (`into`: a destination-passing kernel), else its
    value stored there (a scalar) or copied (a view, as a gather's). A row
    of scalars is passed as its value, but as its buffer where the op takes
    only `tensors` (a 0-d tensor's). An elementwise loop's rows are split on
    the emitter's team where rows x width x ops pays for one
    (`each_row_on_team`)."""
    def rows_kernel(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Any:
        if isinstance(op, tmath.FusedOp) and not op.results:
            return None  # a chain nothing reads (fused from dead code): no loop
        count = b.same_count(op, rows_of(args))
        outs = [b.rows(count, r.type) for r in op.results]
        scalars = [is_scalar_rows(v) and not tensors for v in op.operands]

        def row(inner: Emitter, r: SSAValue, values: Sequence[Lowered]) -> None:
            sources = [one_row(inner, v, r, s) for v, s in zip(values[:len(args)], scalars)]
            targets = [row_at(inner, o, r) for o in values[len(args):]]
            if into:
                kernel(inner, op, [*sources, *targets])
                return
            found = kernel(inner, op, sources)
            results = found if isinstance(found, tuple) else () if found is None else (found,)
            for target, value, old in zip(targets, results, op.results, strict=True):
                if is_scalar_rows(old):
                    inner.store(value, target, 0)
                else:
                    inner.move(target, value, size(old), elem_of(old))

        if isinstance(op, ON_TEAM):
            ops = len(list(op.body.block.ops)) - 1 if isinstance(op, tmath.FusedOp) else 1
            each_row_on_team(b, op, count, outs[0].width * max(ops, 1), [*args, *outs], row)
        else:
            b.each(count, lambda inner, r: row(inner, r, [*args, *outs]))
        return tuple(outs) if len(outs) > 1 else outs[0] if outs else None

    return rows_kernel


def apart(kernel: Kernel) -> Kernel:
    """An elementwise kernel on one row's buffers as a call of a function of
    its own whose pointer arguments are `noalias`: LLVM then vectorizes its
    loop with no run-time overlap checks, nor a scalar copy of the loop
    beside the vector one (whose constants crowd the registers). True of a
    row: its results' rows are fresh (a scratch slot, or a result's room:
    rows of the caller's table that no row the function reads lies in,
    `rows.clear_of_reads`). A function already made for the same loop is
    called again."""
    def call_apart(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
        module = enclosing_module(op)
        made = [f for f in module.ops if isinstance(f, llvm.FuncOp)
                and f.sym_name.data.startswith(APART)]
        function, e, params = new_function(f"{APART}{len(made)}",
                                           [a.type for a in args], noalias=True)
        kernel(e, op, params)
        e.op(llvm.ReturnOp())
        for inner in list(function.walk()):
            if isinstance(inner, math.ExpOp | math.TanhOp | math.LogOp):
                expand_math(inner)
        lower_to_llvm(function, arith_cf=False)
        same = next((f for f in made if f.function_type == function.function_type
                     and f.body.is_structurally_equivalent(function.body)), None)
        if same is None:
            module.body.blocks[0].add_op(function)
        b.op(llvm.CallOp((same or function).sym_name.data, *args))

    return call_apart


APART = "recir_rows.apart"  # the functions `apart` makes: recir_rows.apart<n>


def apply(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """An arith op on one row's values; on an i1's byte (`rows.storage`) as
    on the i1, whose true is -1 to `maxsi` and 1 + 1 is 0, stored as 0 or 1."""
    typ = op.results[0].type
    if (typ.element_type if isinstance(typ, TensorType) else typ) == i1:
        bits = [b.value(arith.TruncIOp(a, i1)) for a in args]
        return b.value(arith.ExtUIOp(b.value(type(op)(*bits)), i8))
    return b.value(type(op)(*args))


def concat(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """Each part's row copied to its place (`llvm.memmove`: dozens of row
    copies per function, each a loop LLVM would vectorize at compile time)."""
    parts = rows_of(args)
    assert len(parts) == len(args), "concat over rows takes rows only"
    count = b.same_count(op, parts)
    out = b.rows(count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue, values: Sequence[Lowered]) -> None:
        target, start = row_at(inner, values[-1], r), 0
        for part in values[:-1]:
            assert isinstance(part, Rows)
            inner.move(inner.offset(target, start), row_at(inner, part, r), part.width)
            start += part.width

    each_row_on_team(b, op, count, out.width, [*parts, out], each)
    return out


def slice_view(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Rows:
    """Each row's slice along its first axis, as a view with the input's stride."""
    assert isinstance(op, tmath.SliceOp)
    source = args[0]
    assert isinstance(source, Rows)
    start = b.offset(source.data, op.offset.value.data * row_size(op.input), source.elem)
    return Rows(source.count, start, row_width(op.result.type), source.stride, source.elem)


def extract(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> Lowered:
    """A shared vector (static, or a dynamic array) read at each row's index,
    or a dynamic array read at one index."""
    array, index = args
    elem = elem_of(op.results[0])
    shape = tmath.shape_of(op.operands[0])
    length: SSAValue | int = array.count if isinstance(array, Rows) else shape[0]
    data = array.data if isinstance(array, Rows) else array
    if not isinstance(index, Rows):
        return b.load(data, checked(b, op, index, length), elem)
    out = b.rows(index.count, op.results[0].type)

    def each(inner: Emitter, r: SSAValue) -> None:
        at = checked(inner, op, inner.load(index.data, r, i32), length)
        inner.store(inner.load(data, at, elem), out.data, r)

    b.each(index.count, each)
    return out


def size_of(b: RowEmitter, op: Operation, args: Sequence[Lowered]) -> SSAValue:
    array = args[0]
    assert isinstance(array, Rows)
    return b.value(arith.TruncIOp(array.count, op.results[0].type))


PER_ROW = (*SCALAR, tmath.FusedOp, tmath.BilinearOp, tmath.GatherOp, tmath.SumOp, tmath.MaxOp,
           tmath.ArgmaxOp, tmath.SoftmaxOp, tmath.SoftmaxCrossEntropyOp, tmath.FillOp,
           adjoint.OnehotOp, adjoint.PadOp, adjoint.BilinearLhsOp, adjoint.BilinearRhsOp,
           adjoint.AccumulateOp, adjoint.AccumulateBilinearOp)
INTO_ALL, STATIC = INTO | ADJOINT_INTO, KERNELS | ADJOINT_KERNELS
ROW_BY_ROW = per_row(INTO_ALL[tmath.BilinearOp], into=True)


def bilinear(b: RowEmitter, op: Operation, args: Sequence[Lowered]
             ) -> Lowered | tuple[Lowered, ...]:
    """A bilinear form over rows: one product (`bilinear_rows`) where both
    vectors are plain rows, else row by row: a uniform vector (a parameter),
    or a gathered one (none today: the op is not an `IN_PLACE_READERS`)."""
    tensor, x, y = args
    if plain_rows(x, y):
        return bilinear_rows(b, op, tensor, x, y)  # type: ignore[arg-type]
    return ROW_BY_ROW(b, op, args)


ROW_KERNELS: dict[type[Operation], RowKernel] = {
    **{op: per_row(INTO_ALL[op], into=True) if op in INTO_ALL else per_row(STATIC[op])
       for op in PER_ROW},
    # (its kernel adds into a buffer: a row of scalars, a carried f32's
    # gradient, passed by value was a load from a float)
    adjoint.AccumulateOp: per_row(STATIC[adjoint.AccumulateOp], tensors=True),
    **{op: per_row(apart(partial(INTO[op], each=each_element_vectors)), into=True,
                   tensors=True) for op in (*SCALAR, tmath.FusedOp)},
    **{op: per_row(apply) for op in ROW_ARITH},
    tmath.MatvecOp: matvec_plus,
    tmath.BilinearOp: bilinear,
    tmath.ConcatOp: concat,
    tmath.SliceOp: slice_view,
    tmath.ExtractOp: extract,
    tmath.SizeOp: size_of,
}
