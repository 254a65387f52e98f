"""An emitter for loop-level IR over flat buffers, shared by the tmath lowering.

Buffers are `!llvm.ptr` to row-major f32 (or i32) data; indices are i64. The
emitter inserts before one op, puts every buffer's `llvm.alloca` at the top of
the function's entry block (so LLVM sees static frames, and nothing is
allocated per loop iteration), and builds `scf.for` loops and `scf.if`
branches from Python callbacks. Vectors (`vector<Nxf32>`) are values of the
llvm dialect: plain and masked loads and stores, a broadcast and FMA, which
the matrix kernels (`gemm_kernels.py`) are made of; a mask of the first lanes
is where an array ends inside a vector, so no access leaves the array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, cf, llvm, scf
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    VectorType,
    f32,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.dialects.utils.fast_math import FastMathFlag
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.passes.op_templates import build

PTR = llvm.LLVMPointerType()
# Reassociation lets LLVM vectorize reductions; contraction gives it FMAs.
REASSOC = arith.FastMathFlagsAttr([FastMathFlag.REASSOC, FastMathFlag.ALLOW_CONTRACT])
CONTRACT = arith.FastMathFlagsAttr([FastMathFlag.ALLOW_CONTRACT])

Index = SSAValue | int
LoopBody = Callable[["Emitter", SSAValue, Sequence[SSAValue]], Sequence[SSAValue]]


class Emitter:
    """Inserts ops at `point`; buffers go to `allocas` (the entry block's top)."""

    def __init__(self, point: InsertPoint, allocas: InsertPoint):
        self.point = point
        self.allocas = allocas

    def at(self, point: InsertPoint) -> Emitter:
        return Emitter(point, self.allocas)

    def op(self, op: Operation) -> Operation:
        Rewriter.insert_op(op, self.point)
        return op

    def value(self, op: Operation) -> SSAValue:
        return self.op(op).results[0]

    # constants and integers
    def i64(self, value: Index) -> SSAValue:
        if isinstance(value, SSAValue):
            return value
        return self.value(build((arith.ConstantOp, value, i64),
                                lambda: arith.ConstantOp(IntegerAttr(value, i64)), ()))

    def const(self, value: float | int, typ: Attribute) -> SSAValue:
        if isinstance(typ, Float32Type):
            return self.value(build((arith.ConstantOp, float(value).hex(), f32),  # -0.0 is not 0.0
                                    lambda: arith.ConstantOp(FloatAttr(float(value), f32)), ()))
        return self.value(build((arith.ConstantOp, int(value), typ),
                                lambda: arith.ConstantOp(IntegerAttr(int(value), typ)), ()))

    def add(self, a: Index, b: Index) -> SSAValue:
        if isinstance(a, int) and isinstance(b, int):
            return self.i64(a + b)
        if b == 0:
            return self.i64(a)
        return self.binary(arith.AddiOp, a, b)

    def mul(self, a: Index, b: Index) -> SSAValue:
        if isinstance(a, int) and isinstance(b, int):
            return self.i64(a * b)
        if b == 1:
            return self.i64(a)
        return self.binary(arith.MuliOp, a, b)

    def sub(self, a: Index, b: Index) -> SSAValue:
        if isinstance(a, int) and isinstance(b, int):
            return self.i64(a - b)
        return self.binary(arith.SubiOp, a, b)

    def min(self, a: Index, b: Index) -> SSAValue:
        if isinstance(a, int) and isinstance(b, int):
            return self.i64(min(a, b))
        return self.binary(arith.MinSIOp, a, b)

    def binary(self, kind: type[Operation], a: Index, b: Index) -> SSAValue:
        """`kind(a, b)`, an integer op whose result has its operands' type,
        from a template (`op_templates`: the lowerings make thousands)."""
        x, y = self.i64(a), self.i64(b)
        return self.value(build((kind, x.type), lambda: kind(x, y), (x, y)))

    def compare(self, predicate: str, a: Index, b: Index) -> SSAValue:
        x, y = self.i64(a), self.i64(b)
        return self.value(build((arith.CmpiOp, predicate, x.type),
                                lambda: arith.CmpiOp(x, y, predicate), (x, y)))

    def to_i64(self, value: SSAValue) -> SSAValue:
        """Sign-extends an i32 index so that negative indices fail bounds checks."""
        assert isinstance(value.type, IntegerType)
        if value.type.width.data == 64:
            return value
        return self.value(build((arith.ExtSIOp, value.type), lambda: arith.ExtSIOp(value, i64),
                                (value,)))

    # buffers
    def alloca(self, count: int, elem: Attribute = f32) -> SSAValue:
        size = arith.ConstantOp(IntegerAttr(count, i64))
        buffer = llvm.AllocaOp(size, elem, alignment=64)
        Rewriter.insert_op([size, buffer], self.allocas)
        return buffer.res

    def offset(self, ptr: SSAValue, index: Index, elem: Attribute = f32) -> SSAValue:
        if index == 0:
            return ptr
        operands = (ptr, self.i64(index))
        return self.value(build((llvm.GEPOp, elem), lambda: llvm.GEPOp.from_mixed_indices(
            ptr, [operands[1]], elem), operands))

    def load(self, ptr: SSAValue, index: Index, elem: Attribute = f32) -> SSAValue:
        at = self.offset(ptr, index, elem)
        return self.value(build((llvm.LoadOp, elem), lambda: llvm.LoadOp(at, elem), (at,)))

    def store(self, value: SSAValue, ptr: SSAValue, index: Index) -> None:
        at = self.offset(ptr, index, value.type)
        self.op(build(llvm.StoreOp, lambda: llvm.StoreOp(value, at), (value, at)))

    # control
    def loop(self, count: Index, body: LoopBody, inits: Sequence[SSAValue] = (),
             start: Index = 0) -> Sequence[SSAValue]:
        """`scf.for %i = start to count` with loop-carried `inits`; returns their finals."""
        block = Block(arg_types=[i64, *(v.type for v in inits)])
        inner = self.at(InsertPoint.at_end(block))
        yielded = tuple(body(inner, block.args[0], block.args[1:]))
        block.add_op(build(scf.YieldOp, lambda: scf.YieldOp(*yielded), yielded))
        loop = scf.ForOp(self.i64(start), self.i64(count), self.i64(1), inits, block)
        return self.op(loop).results

    def each(self, count: Index, body: Callable[[Emitter, SSAValue], object],
             start: Index = 0) -> None:
        """`scf.for %i = start to count` carrying nothing: `body(inner, i)`."""
        self.loop(count, lambda inner, i, _: (body(inner, i), ())[1], start=start)

    def when(self, condition: SSAValue, then: Callable[[Emitter], None],
             otherwise: Callable[[Emitter], None] | None = None) -> None:
        """`scf.if` without results: `then`'s ops if `condition`, else `otherwise`'s."""
        blocks = [Block(), Block()]
        for block, body in zip(blocks, (then, otherwise)):
            if body is not None:
                body(self.at(InsertPoint.at_end(block)))
            block.add_op(build(scf.YieldOp, scf.YieldOp, ()))
        self.op(scf.IfOp(condition, [], [blocks[0]], [blocks[1]]))

    def check(self, ok: SSAValue, message: str) -> None:
        """A runtime check; the LLVM lowering turns a failure into an error return."""
        assert ok.type == i1
        self.op(cf.AssertOp(ok, message))

    def copy(self, dst: SSAValue, src: SSAValue, count: int) -> None:
        self.each(count, lambda b, i: b.store(b.load(src, i), dst, i))

    def clear(self, dst: SSAValue, count: Index) -> None:
        """`count` bytes at `dst` zeroed, one `llvm.memset`."""
        self.op(llvm.CallIntrinsicOp("llvm.memset.p0.i64", [dst, self.const(0, i8), count,
                                                             self.const(0, i1)], []))

    def move(self, dst: SSAValue, src: SSAValue, count: Index, elem: Attribute = f32) -> None:
        """`count` elements from `src` to `dst` as one `llvm.memmove`: for the
        frontier's row copies (dozens per batched function), where `copy`'s
        loops are each vectorized by LLVM, a sixth of the function's compile."""
        width = max(1, elem.width.data // 8) if isinstance(elem, IntegerType) else 4
        self.op(llvm.CallIntrinsicOp("llvm.memmove.p0.p0.i64",
                                     [dst, src, self.mul(count, width), self.const(0, i1)], []))



# vectors of f32
def vector(lanes: int) -> VectorType:
    return VectorType(f32, [lanes])


class VectorEmitter(Emitter):
    """An Emitter with vector ops (llvm dialect; `lanes` from the value types)."""

    def at(self, point: InsertPoint) -> VectorEmitter:
        return VectorEmitter(point, self.allocas)

    def zeros(self, lanes: int, elem: Attribute = f32) -> SSAValue:
        typ = VectorType(elem, [lanes])
        zero = 0.0 if isinstance(elem, Float32Type) else 0
        return self.value(build((llvm.ConstantOp, typ), lambda: llvm.ConstantOp(
            DenseIntOrFPElementsAttr.from_list(typ, [zero] * lanes), typ), ()))

    def vload(self, ptr: SSAValue, index: Index, lanes: int) -> SSAValue:
        """`lanes` floats from ptr[index]: the index counts floats, not vectors."""
        at = self.offset(ptr, index, f32)
        return self.value(llvm.LoadOp(at, vector(lanes), alignment=4))

    def vstore(self, value: SSAValue, ptr: SSAValue, index: Index) -> None:
        at = self.offset(ptr, index, f32)
        self.op(llvm.StoreOp(value, at, alignment=4))

    def lane_mask(self, count: Index, lanes: int) -> SSAValue:
        """The lanes below `count` (clamped to 0..lanes) on: the bits of
        2^count - 1 as a `vector<lanes x i1>`."""
        count = self.value(arith.MaxSIOp(self.min(count, lanes), self.i64(0)))
        ones = self.sub(self.value(arith.ShLIOp(self.i64(1), count)), 1)
        bits = self.value(arith.TruncIOp(ones, IntegerType(lanes)))
        return self.value(llvm.BitcastOp(bits, VectorType(i1, [lanes])))

    def masked_load(self, ptr: SSAValue, index: Index, mask: SSAValue) -> SSAValue:
        """The lanes of `mask` read from ptr[index...], the others 0."""
        lanes = mask.type.get_shape()[0]
        at = self.offset(ptr, index, f32)
        args = [at, self.const(4, i32), mask, self.zeros(lanes)]
        name = f"llvm.masked.load.v{lanes}f32.p0"
        return self.value(llvm.CallIntrinsicOp(name, args, [vector(lanes)]))

    def masked_store(self, value: SSAValue, ptr: SSAValue, index: Index,
                     mask: SSAValue) -> None:
        lanes = mask.type.get_shape()[0]
        at = self.offset(ptr, index, f32)
        name = f"llvm.masked.store.v{lanes}f32.p0"
        self.op(llvm.CallIntrinsicOp(name, [value, at, self.const(4, i32), mask], []))

    def splat(self, scalar: SSAValue, lanes: int) -> SSAValue:
        """`scalar` in every lane."""
        typ = vector(lanes)
        undef = self.value(build((llvm.UndefOp, typ), lambda: llvm.UndefOp(typ), ()))
        first = self.value(llvm.InsertElementOp(undef, scalar, self.const(0, i32)))
        return self.shuffle(first, first, [0] * lanes)

    def shuffle(self, a: SSAValue, b: SSAValue, lanes: Sequence[int]) -> SSAValue:
        """The lanes of `a` then `b` (numbered on from a's) picked by `lanes`."""
        mask = DenseArrayBase.from_list(i32, list(lanes))
        return self.value(llvm.ShuffleVectorOp(a, b, mask, vector(len(lanes))))

    def prefetch(self, ptr: SSAValue, write: bool = True, level: int = 1) -> None:
        """A hint to bring `ptr`'s line into cache `level` (1: L1, 2: L2), for
        writing or reading (never faults)."""
        args = [ptr, self.const(int(write), i32), self.const(4 - level, i32),
                self.const(1, i32)]
        self.op(llvm.CallIntrinsicOp("llvm.prefetch.p0", args, []))

    def fma(self, a: SSAValue, b: SSAValue, c: SSAValue) -> SSAValue:
        """a * b + c, one rounding."""
        return self.value(llvm.FMAOp(a, b, c))

    def vadd(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.value(llvm.FAddOp(a, b))

    def lane_sums(self, vectors: Sequence[SSAValue]) -> SSAValue:
        """The lane sums of `vectors` in their first lanes, in order: pairs of
        vectors combined (each half of a group of lanes added to the other half,
        two vectors' groups side by side: two shuffles and an add), then each
        group halved in place (a shuffle and an add), then the sums gathered."""
        lanes = vectors[0].type.get_shape()[0]
        vectors = list(vectors) + [self.zeros(lanes)] * ((1 << (len(vectors) - 1).bit_length())
                                                     - len(vectors))
        parts = lanes
        while len(vectors) > 1:  # groups of `parts` lanes, one a vector's partial sums
            half, groups = parts // 2, lanes // parts
            low = [g * parts + t for g in range(groups) for t in range(half)]
            high = [i + half for i in low]
            vectors = [self.vadd(self.shuffle(x, y, low + [lanes + i for i in low]),
                              self.shuffle(x, y, high + [lanes + i for i in high]))
                       for x, y in zip(vectors[::2], vectors[1::2], strict=True)]
            parts = half
        total, stride = vectors[0], parts
        while parts > 1:  # each group's first `parts` lanes hold its partial sums
            half = parts // 2
            moved = [i + half if i % stride < half else i for i in range(lanes)]
            total = self.vadd(total, self.shuffle(total, total, moved))
            parts = half
        if stride == 1:
            return total
        return self.shuffle(total, total, [(i * stride) % lanes for i in range(lanes)])

    def transpose(self, rows: Sequence[SSAValue]) -> list[SSAValue]:
        """The columns of a square of `lanes` vectors: at each halving h, each
        pair of rows h apart swaps its off-diagonal blocks of h lanes (two
        shuffles of two sources; lanes log2(lanes) shuffles in all)."""
        n = len(rows)
        rows, h = list(rows), n // 2
        while h >= 1:
            swapped = list(rows)
            for i in (i for i in range(n) if not i & h):
                a, b = rows[i], rows[i + h]
                swapped[i] = self.shuffle(a, b, [j + n - h if j & h else j for j in range(n)])
                swapped[i + h] = self.shuffle(a, b, [j + n if j & h else j + h for j in range(n)])
            rows, h = swapped, h // 2
        return rows
