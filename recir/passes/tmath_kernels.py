"""Loop kernels for each tmath op, in a table the loop lowering dispatches on.

A kernel gets an `Emitter` placed before the op and the op's operands already
lowered (buffers are `!llvm.ptr`, scalars stay scalars) and returns the value
that replaces the op's result. An op whose result is a new buffer has a
destination-passing kernel in `INTO` (its operands, then one buffer per
result, written in place): `KERNELS` allocates the buffers for it, and the
functions over rows (`row_kernels.per_row`) call it on each row's buffers.
Values are immutable, so `slice` and `gather` return views into their
operand instead of copying. Indices read at run time are bounds-checked with
`cf.assert`, which the LLVM lowering turns into an error return: native code
never reads outside a buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from xdsl.dialects import arith, llvm, math
from xdsl.dialects.builtin import IntegerType, ModuleOp, f32, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue

from recir.diagnostics import format_error
from recir.dialects import adjoint, tmath
from recir.dialects.row_types import is_rows
from recir.passes import gemm_kernels, gemm_target, math_expansions
from recir.passes.loop_builder import CONTRACT, PTR, REASSOC, Emitter, Index
from recir.passes.native_context import INDEX_OUT_OF_RANGE
from recir.passes.vector_kernels import rows_dotted

Kernel = Callable[[Emitter, Operation, Sequence[SSAValue]], Any]
Scalar = Callable[[Emitter, Sequence[SSAValue]], SSAValue]


def shape(value: SSAValue | Attribute) -> list[int]:
    """The shape of one invocation's value: a rows value's row."""
    found = list(tmath.shape_of(value))
    return found[1:] if is_rows(value) else found


def size(value: SSAValue | Attribute) -> int:
    return prod(shape(value))


# scalar bodies of the elementwise ops
def _where_positive(b: Emitter, y: SSAValue, value: SSAValue) -> SSAValue:
    """`value` where y > 0, else 0: relu's gradient, (y, dy)."""
    zero = b.const(0.0, f32)
    return b.value(arith.SelectOp(b.value(arith.CmpfOp(y, zero, "ogt")), value, zero))


def _relu(b: Emitter, x: SSAValue) -> SSAValue:
    """0 where x < 0, else x: NaN stays NaN, as in `np.maximum(x, 0)`."""
    zero = b.const(0.0, f32)
    return b.value(arith.SelectOp(b.value(arith.CmpfOp(x, zero, "olt")), zero, x))


SCALAR: dict[type[Operation], Scalar] = {
    tmath.AddOp: lambda b, v: b.value(arith.AddfOp(v[0], v[1], CONTRACT)),
    tmath.SubOp: lambda b, v: b.value(arith.SubfOp(v[0], v[1], CONTRACT)),
    tmath.MulOp: lambda b, v: b.value(arith.MulfOp(v[0], v[1], CONTRACT)),
    tmath.DivOp: lambda b, v: b.value(arith.DivfOp(v[0], v[1], CONTRACT)),
    tmath.NegOp: lambda b, v: b.value(arith.NegfOp(v[0])),
    tmath.SigmoidOp: lambda b, v: math_expansions.sigmoid(b, v[0]),
    tmath.TanhOp: lambda b, v: b.value(math.TanhOp(v[0])),
    tmath.ReluOp: lambda b, v: _relu(b, v[0]),
    tmath.ExpOp: lambda b, v: b.value(math.ExpOp(v[0])),
    tmath.LogOp: lambda b, v: b.value(math.LogOp(v[0])),
    adjoint.ReluGradOp: lambda b, v: _where_positive(b, v[0], v[1]),
}


Body = Callable[[Emitter, SSAValue], object]


def each_element(b: Emitter, count: int, body: Body) -> None:
    b.each(count, body)


def each_element_vectors(b: Emitter, count: int, body: Body) -> None:
    """`body(i)` for i < count where no result's buffer overlaps an
    operand's (`row_kernels.apart`'s `noalias` rows): the whole vectors, then
    the last vector's worth of elements again, each written twice with the
    same value, so that LLVM vectorizes both loops and leaves no scalar
    remainder (at h=150 a TreeLSTM cell's 6 columns past 144, scalar, took
    a quarter of its loop's time)."""
    lanes = gemm_target.host_target().lanes
    whole = count - count % lanes
    if count < lanes or whole == count:
        b.each(count, body)
        return
    b.each(whole, body)
    b.each(count, body, start=count - lanes)


def elementwise(b: Emitter, op: Operation, args: Sequence[SSAValue],
                each: Callable[[Emitter, int, Body], None] = each_element) -> None:
    *sources, out = args
    scalar = SCALAR[type(op)]

    each(b, size(op.results[0]), lambda inner, i: inner.store(
        scalar(inner, [inner.load(a, i) for a in sources]), out, i))


def dot(b: Emitter, x: SSAValue, y: SSAValue, n: int) -> SSAValue:
    """sum_i x[i] * y[i], reassociable so that LLVM vectorizes it (a
    frontier row's bilinear slab sums dotted with its x, `row_products`; a
    matrix's rows take `vector_kernels`)."""
    def body(inner: Emitter, i: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
        product = arith.MulfOp(inner.load(x, i), inner.load(y, i), REASSOC)
        return (inner.value(arith.AddfOp(acc[0], inner.value(product), REASSOC)),)

    return b.loop(n, body, [b.const(0.0, f32)])[0]


def matvec(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    rows, cols = tmath.shape_of(op.operands[0])
    return rows_dotted(b, *args, rows, cols)


def matmul(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """A call of the module's `recir_gemm_nn` (`gemm_kernels.py`, added to
    the module at its first use): the frontier's matrix kernel."""
    m, k = tmath.shape_of(op.operands[0])
    n = tmath.shape_of(op.operands[1])[1]
    a, rhs = args
    out = b.alloca(m * n)
    name = gemm_kernels.declare_in(enclosing_module(op), "nn")
    b.op(llvm.CallOp(name, b.i64(m), b.i64(n), b.i64(k), a, b.i64(k), rhs, b.i64(n), out,
                     b.i64(n), b.i64(0)))
    return out


def enclosing_module(op: Operation) -> ModuleOp:
    module = op.get_toplevel_object()
    assert isinstance(module, ModuleOp), "a tmath op outside a module"
    return module


def bilinear(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    """out[k] = sum_i x[i] * (V[k, i, :] . y): V's depth x rows vectors
    dotted with y as one matrix (`rows_dotted`), each sum stored at [i, k],
    then out += x[i] times row i. Row by row, where a dot is short, LLVM
    vectorizes across rows instead, gathering elements a row apart."""
    tensor, x, y, out = args
    depth, rows, cols = tmath.shape_of(op.operands[0])

    def by_i(e: Emitter, r: Index) -> Index:  # row r = k * rows + i, stored at i * depth + k
        return e.add(e.mul(e.binary(arith.RemUIOp, r, rows), depth),
                     e.binary(arith.DivUIOp, r, rows))

    sums = rows_dotted(b, tensor, y, depth * rows, cols, by_i)
    zero_fill(b, out, depth)
    b.each(rows, lambda bi, i: axpy(bi, out, bi.load(x, i),
                                    bi.offset(sums, bi.mul(i, depth)), depth))


def axpy(b: Emitter, out: SSAValue, scale: SSAValue, x: SSAValue, n: int) -> None:
    """out[:n] += scale * x[:n]. LLVM's loop, its tail scalar, not a masked
    last vector as `vector_kernels`' products: the axpys of a vecmat's rows
    into one `out` would each read what the last one's masked store had
    just written, which stalls (RNTN's recursive gradient ran slower)."""
    def body(inner: Emitter, i: SSAValue) -> None:
        product = inner.value(arith.MulfOp(scale, inner.load(x, i), CONTRACT))
        inner.store(inner.value(arith.AddfOp(inner.load(out, i), product, CONTRACT)), out, i)

    b.each(n, body)


def each_vector(b: Emitter, tensor: SSAValue, shape: Sequence[int],
                body: Callable[[Emitter, SSAValue, SSAValue, SSAValue], None]) -> None:
    """`body(b, k, i, V[k, i, :])` for each vector of a depth x rows x cols tensor."""
    depth, rows, cols = shape
    b.each(depth, lambda bk, k: bk.each(rows, lambda bi, i: body(
        bi, k, i, bi.offset(tensor, bi.mul(bi.add(bi.mul(k, rows), i), cols)))))


def fused(b: Emitter, op: Operation, args: Sequence[SSAValue],
          each: Callable[[Emitter, int, Body], None] = each_element) -> None:
    """One loop; each body op becomes its scalar function on element i (the
    inputs read from the first buffers, the yields stored to the others)."""
    assert isinstance(op, tmath.FusedOp)
    if not op.outputs:  # a chain nothing reads (fused from dead code): no loop
        return
    body, sources, targets = op.body.block, args[:len(op.inputs)], args[len(op.inputs):]

    def element(b: Emitter, i: SSAValue) -> None:
        scalars = {arg: b.load(src, i) for arg, src in zip(body.args, sources)}
        for inner_op in body.ops:
            if isinstance(inner_op, tmath.YieldOp):
                for value, target in zip(inner_op.values, targets):
                    b.store(scalars[value], target, i)
            else:
                scalars[inner_op.results[0]] = SCALAR[type(inner_op)](
                    b, [scalars[v] for v in inner_op.operands])

    each(b, size(op.outputs[0]), element)


def concat(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    *parts, out = args
    start = 0
    for operand, buffer in zip(op.operands, parts):
        b.copy(b.offset(out, start), buffer, size(operand))
        start += size(operand)


def row_size(value: SSAValue) -> int:
    return prod(shape(value)[1:])  # (a table of no rows still has rows of a size)


def slice_view(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    assert isinstance(op, tmath.SliceOp)
    return b.offset(args[0], op.offset.value.data * row_size(op.input))


def checked(b: Emitter, op: Operation, index: SSAValue, length: SSAValue | int) -> SSAValue:
    """`index` as i64 after asserting 0 <= index < length (one unsigned compare)."""
    wide = b.to_i64(index)
    ok = b.compare("ult", wide, length)
    b.check(ok, format_error(op, INDEX_OUT_OF_RANGE))  # (the failure records both)
    return wide


def gather(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    table, index = args
    rows = tmath.shape_of(op.operands[0])[0]
    row = checked(b, op, index, rows)
    return b.offset(table, b.mul(row, row_size(op.operands[0])))


def structure(b: Emitter, descriptor: SSAValue) -> tuple[SSAValue, SSAValue]:
    """A dynamic i32 array is passed as a pointer to {i64 length, ptr data}."""
    length = b.load(descriptor, 0, i64)
    data = b.load(b.offset(descriptor, 8, IntegerType(8)), 0, PTR)
    return length, data


def extract(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    array, index = args
    shape = tmath.shape_of(op.operands[0])
    if shape[0] >= 0:
        return b.load(array, checked(b, op, index, shape[0]), op.results[0].type)
    length, data = structure(b, array)  # (an f32 vector's elements too: not i32's bits)
    return b.load(data, checked(b, op, index, length), op.results[0].type)


def size_of(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    result_type = op.results[0].type
    shape = tmath.shape_of(op.operands[0])
    if shape[0] >= 0:
        return b.const(shape[0], result_type)
    length, _ = structure(b, args[0])
    if result_type == i64:
        return length
    return b.value(arith.TruncIOp(length, result_type))


def reduce(b: Emitter, x: SSAValue, n: int, init: SSAValue,
           step: Callable[[Emitter, SSAValue, SSAValue], SSAValue]) -> SSAValue:
    def body(inner: Emitter, i: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
        return (step(inner, acc[0], inner.load(x, i)),)

    return b.loop(n, body, [init])[0]


def _beats(b: Emitter, x: SSAValue, acc: SSAValue) -> SSAValue:
    """Whether x replaces the largest so far: it is larger, or the first NaN
    (NumPy's max and argmax propagate NaN and point at the first one)."""
    first_nan = b.value(arith.AndIOp(b.value(arith.CmpfOp(x, x, "uno")),
                                     b.value(arith.CmpfOp(acc, acc, "ord"))))
    return b.value(arith.OrIOp(b.value(arith.CmpfOp(x, acc, "ogt")), first_nan))


def _max(b: Emitter, acc: SSAValue, x: SSAValue) -> SSAValue:
    return b.value(arith.SelectOp(_beats(b, x, acc), x, acc))


def _sum(b: Emitter, acc: SSAValue, x: SSAValue) -> SSAValue:
    return b.value(arith.AddfOp(acc, x, REASSOC))


def maximum(b: Emitter, x: SSAValue, n: int) -> SSAValue:
    return reduce(b, x, n, b.load(x, 0), _max)


def sum_exp_shifted(b: Emitter, x: SSAValue, n: int, shift: SSAValue) -> SSAValue:
    def step(inner: Emitter, acc: SSAValue, v: SSAValue) -> SSAValue:
        e = inner.value(math.ExpOp(inner.value(arith.SubfOp(v, shift))))
        return _sum(inner, acc, e)

    return reduce(b, x, n, b.const(0.0, f32), step)


def sum_all(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    return reduce(b, args[0], size(op.operands[0]), b.const(0.0, f32), _sum)


def max_all(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    return maximum(b, args[0], size(op.operands[0]))


def argmax(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """The first index of the largest element, as NumPy's argmax."""
    x = args[0]

    def body(inner: Emitter, i: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
        v = inner.load(x, i)
        better = _beats(inner, v, acc[0])
        return (inner.value(arith.SelectOp(better, v, acc[0])),
                inner.value(arith.SelectOp(better, i, acc[1])))

    best = b.loop(size(op.operands[0]), body, [b.load(x, 0), b.i64(0)])[1]
    return b.value(arith.TruncIOp(best, i32))


def softmax(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    (x, out), n = args, size(op.operands[0])
    shift = maximum(b, x, n)
    scale = b.value(arith.DivfOp(b.const(1.0, f32), sum_exp_shifted(b, x, n, shift)))

    def body(inner: Emitter, i: SSAValue) -> None:
        e = inner.value(math.ExpOp(inner.value(arith.SubfOp(inner.load(x, i), shift))))
        inner.store(inner.value(arith.MulfOp(e, scale)), out, i)

    b.each(n, body)


def softmax_xent(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """log(sum exp(x - m)) - (x[label] - m), stable for large logits."""
    x, label = args
    n = size(op.operands[0])
    picked = b.load(x, checked(b, op, label, n))
    shift = maximum(b, x, n)
    log_total = b.value(math.LogOp(sum_exp_shifted(b, x, n, shift)))
    return b.value(arith.SubfOp(log_total, b.value(arith.SubfOp(picked, shift))))


def fill(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    value, out = args
    zero_fill(b, out, size(op.results[0]), value)


def zero_fill(b: Emitter, out: SSAValue, n: int, value: SSAValue | None = None) -> None:
    """out[:n] = value (0.0 by default)."""
    value = b.const(0.0, f32) if value is None else value
    b.each(n, lambda inner, i: inner.store(value, out, i))


def constant(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> None:
    assert isinstance(op, tmath.ConstantOp)
    values, out = op.value.get_values(), args[0]
    if len(set(values)) == 1:  # a splat (a gradient's zeros): one loop, not a store each
        zero_fill(b, out, len(values), b.const(values[0], f32))
        return
    for i, v in enumerate(values):
        b.store(b.const(v, f32), out, i)


def allocating(into: Kernel) -> Kernel:
    """A destination-passing kernel with its results' buffers allocated."""
    def kernel(b: Emitter, op: Operation, args: Sequence[SSAValue]) -> Any:
        outs = [b.alloca(size(r)) for r in op.results]
        into(b, op, [*args, *outs])
        return outs[0] if len(outs) == 1 else tuple(outs)

    return kernel


INTO: dict[type[Operation], Kernel] = {
    **{op: elementwise for op in SCALAR},
    tmath.FusedOp: fused,
    tmath.BilinearOp: bilinear,
    tmath.ConcatOp: concat,
    tmath.SoftmaxOp: softmax,
    tmath.FillOp: fill,
    tmath.ConstantOp: constant,
}
KERNELS: dict[type[Operation], Kernel] = {
    **{op: allocating(into) for op, into in INTO.items()},
    tmath.MatvecOp: matvec,
    tmath.MatmulOp: matmul,
    tmath.SliceOp: slice_view,
    tmath.GatherOp: gather,
    tmath.ExtractOp: extract,
    tmath.SizeOp: size_of,
    tmath.SumOp: sum_all,
    tmath.MaxOp: max_all,
    tmath.ArgmaxOp: argmax,
    tmath.SoftmaxCrossEntropyOp: softmax_xent,
}
