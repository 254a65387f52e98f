"""Native row kernels: a segment's row-wise ops as one loop over a frontier.

Per frontier, the NumPy path makes one call (and one pass over memory) per
op; a TreeLSTM height was about 35. Here the row-wise ops of each compiled
block program (elementwise ops on f32, `tmath.slice`, `tmath.concat`) are
grouped the way `tmath-fuse-elementwise` groups them (union-find in program
order; every use outside a group comes after its last op), and each group
becomes one native function `f(ctx, rows, inputs..., outputs...)` looping
over rows x elements, built with `loop_builder.Emitter` and the scalar
bodies of `tmath_kernels.SCALAR`, lowered by `convert-recir-to-llvm` and
compiled once per model (`backend.engine`, on-disk object cache).

Slices and concats cost nothing inside a group: a value is evaluated at a
column offset, so `slice(x, k)` reads `x` at `j + k` and a concat output is
written part by part. An input is read with a row stride (its row size for
a batched value, 0 for a uniform one: a bias). Groups whose outputs differ
in length get one element loop per length inside the row loop.

The backward kernel of a group recomputes its forward from the inputs (no
intermediate is stored) and runs reverse mode over each element's scalar
graph, adding into one cotangent buffer per input (a uniform input's is
summed over the rows: a bias gradient). Matrix products stay NumPy's BLAS
(one SGEMM per frontier), gathers and reductions stay NumPy.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, math
from xdsl.dialects.builtin import (
    Float32Type,
    FunctionType,
    ModuleOp,
    TensorType,
    f32,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint

from recir.backend.array_address import data_address
from recir.backend.contexts import Context  # (native_post.py imports it from here)
from recir.backend.kernels import split
from recir.batching.kernels import split_threads
from recir.diagnostics import RecirError, format_error
from recir.dialects import tmath
from recir.passes.loop_builder import CONTRACT, PTR, Emitter
from recir.passes.tmath_kernels import SCALAR

# arith float ops on scalars map to the tmath op with the same scalar body
FLOAT_OPS: dict[type, type] = {
    arith.AddfOp: tmath.AddOp, arith.SubfOp: tmath.SubOp, arith.MulfOp: tmath.MulOp,
    arith.DivfOp: tmath.DivOp, arith.NegfOp: tmath.NegOp,
}
COMPUTE = {tmath.AddOp, tmath.SubOp, tmath.MulOp, tmath.DivOp, tmath.NegOp, tmath.SigmoidOp,
           tmath.TanhOp, tmath.ReluOp, tmath.ExpOp, tmath.LogOp}


XENT = tmath.SoftmaxCrossEntropyOp  # a row reduction: loops over the classes


def computes(op: Operation) -> bool:
    return kind_of(op) in COMPUTE or isinstance(op, XENT)


class Unfusable(Exception):
    """A candidate group the row loops cannot express (a straddled concat)."""


def is_f32(v: SSAValue) -> bool:
    typ = v.type
    return isinstance(typ.element_type if isinstance(typ, TensorType) else typ, Float32Type)


def length(v: SSAValue) -> int:
    count = 1
    for d in (tmath.shape_of(v) if isinstance(v.type, TensorType) else ()):
        count *= d
    return count


def kind_of(op: Operation) -> type:
    return FLOAT_OPS.get(type(op), type(op))


def static(v: SSAValue) -> bool:
    return not isinstance(v.type, TensorType) or all(d >= 0 for d in v.type.get_shape())


def fusible(op: Operation) -> bool:
    if len(op.results) != 1 or not is_f32(op.results[0]):
        return False
    if not all(static(v) for v in (*op.operands, *op.results)):
        return False
    if isinstance(op, (tmath.SliceOp, tmath.ConcatOp)):
        return all(is_f32(v) for v in op.operands)
    if isinstance(op, XENT):
        return is_f32(op.operands[0]) and not isinstance(op.operands[1].type, TensorType)
    return kind_of(op) in COMPUTE


# --- grouping -------------------------------------------------------------

def ancestor_in(op: Operation, block: Block) -> Operation | None:
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()  # type: ignore[assignment]
    return op


def valid(members: list[Operation], index: dict[Operation, int], block: Block) -> bool:
    """Every use outside `members` comes after the last member."""
    inside, last = set(members), index[members[-1]]
    for member in members:
        for use in member.results[0].uses:
            if use.operation in inside:
                continue
            owner = ancestor_in(use.operation, block)
            if owner is not None and index[owner] <= last:
                return False
    return True


def find_groups(ops: Sequence[Operation], block: Block) -> list[list[Operation]]:
    """Maximal valid groups of fusible ops among `ops` (one program, in order)."""
    index = {op: i for i, op in enumerate(block.ops)}
    group: dict[Operation, list[Operation]] = {}
    for op in ops:
        if not fusible(op):
            continue
        joined = [op]
        for value in op.operands:
            owner = value.owner
            if isinstance(owner, Operation) and owner in group and group[owner] is not joined:
                candidate = sorted({*joined, *group[owner]}, key=index.__getitem__)
                if valid(candidate, index, block):
                    joined = candidate
        for member in joined:
            group[member] = joined
    unique = {id(g): g for g in group.values()}
    return [g for g in unique.values()
            if len(g) > 1 and any(computes(op) for op in g)]


class RowGroup:
    """A group's inputs, outputs and element loops; `resolve` maps a value at a
    column offset to an input read or a computing member."""

    def __init__(self, members: list[Operation], kinds: dict[SSAValue, str]):
        self.members = members
        self.results = {op.results[0]: op for op in members}
        inside = set(members)
        inputs: dict[SSAValue, None] = {}
        for op in members:
            for v in op.operands:
                if v not in self.results:
                    inputs[v] = None
        self.inputs = list(inputs)
        if any(kinds.get(v) == "R" for v in self.inputs):
            raise Unfusable("a per-tree input")
        self.batched = [kinds.get(v, "U") != "U" for v in self.inputs]
        self.ints = [not is_f32(v) for v in self.inputs]
        self.position = {v: k for k, v in enumerate(self.inputs)}
        self.outputs = [op.results[0] for op in members
                        if any(u.operation not in inside for u in op.results[0].uses)]
        if not self.outputs or any(kinds.get(v) != "B" for v in self.outputs):
            raise Unfusable("uniform results")
        loops: dict[int, list[tuple[int, int, SSAValue, int]]] = {}
        for k, out in enumerate(self.outputs):
            for out_off, n, v, v_off in self.pieces(out, 0, 0, length(out)):
                loops.setdefault(n, []).append((k, out_off, v, v_off))
        self.loops = loops
        for n, pieces in loops.items():
            for _, _, v, v_off in pieces:
                self.check(v, v_off, n)

    def pieces(self, v: SSAValue, out_off: int, v_off: int, n: int
               ) -> list[tuple[int, int, SSAValue, int]]:
        """(output offset, length, value, value offset): a concat part by part."""
        owner = self.results.get(v)
        if not isinstance(owner, tmath.ConcatOp):
            return [(out_off, n, v, v_off)]
        found, start = [], 0
        for part in owner.operands:
            size = length(part)
            lo, hi = max(start, v_off), min(start + size, v_off + n)
            if lo < hi:
                found += self.pieces(part, out_off + lo - v_off, lo - start, hi - lo)
            start += size
        return found

    def resolve(self, v: SSAValue, off: int, n: int) -> tuple[str, Any, int]:
        owner = self.results.get(v)
        if owner is None:
            return ("in", self.position[v], off)
        if isinstance(owner, tmath.SliceOp):
            return self.resolve(owner.operands[0], off + owner.offset.value.data, n)
        if isinstance(owner, tmath.ConcatOp):
            start = 0
            for part in owner.operands:
                size = length(part)
                if start <= off and off + n <= start + size:
                    return self.resolve(part, off - start, n)
                start += size
            raise Unfusable("a concat read across its parts")
        return ("op", owner, off)

    def check(self, v: SSAValue, off: int, n: int) -> None:
        kind, x, o = self.resolve(v, off, n)
        if kind == "op" and isinstance(x, XENT):
            self.check(x.operands[0], 0, length(x.operands[0]))
            if self.resolve(x.operands[1], 0, 1)[0] != "in":
                raise Unfusable("a computed label")
        elif kind == "op":
            for a in x.operands:
                self.check(a, o, n)


def make_groups(ops: Sequence[Operation], block: Block, kinds: dict[SSAValue, str]
                ) -> list[RowGroup]:
    groups = []
    for members in find_groups(ops, block):
        try:
            groups.append(RowGroup(members, kinds))
        except Unfusable:
            continue
    return groups


# --- code generation -------------------------------------------------------

def scalar(b: Emitter, op: Operation, args: list[SSAValue]) -> SSAValue:
    return SCALAR[kind_of(op)](b, args)


def scalar_vjp(b: Emitter, op: Operation, xs: list[SSAValue], y: SSAValue, d: SSAValue
               ) -> list[SSAValue]:
    """Cotangents of a scalar op's operands (`autodiff/rules.py`, per element)."""
    def mul(p: SSAValue, q: SSAValue) -> SSAValue:
        return b.value(arith.MulfOp(p, q, CONTRACT))

    def neg(p: SSAValue) -> SSAValue:
        return b.value(arith.NegfOp(p))

    one = b.const(1.0, f32)
    kind = kind_of(op)
    if kind is tmath.AddOp:
        return [d, d]
    if kind is tmath.SubOp:
        return [d, neg(d)]
    if kind is tmath.MulOp:
        return [mul(d, xs[1]), mul(d, xs[0])]
    if kind is tmath.DivOp:
        da = b.value(arith.DivfOp(d, xs[1], CONTRACT))
        return [da, neg(mul(da, y))]
    if kind is tmath.NegOp:
        return [neg(d)]
    if kind is tmath.SigmoidOp:
        return [mul(mul(d, y), b.value(arith.SubfOp(one, y, CONTRACT)))]
    if kind is tmath.TanhOp:
        return [mul(d, b.value(arith.SubfOp(one, mul(y, y), CONTRACT)))]
    if kind is tmath.ExpOp:
        return [mul(d, y)]
    if kind is tmath.LogOp:
        return [b.value(arith.DivfOp(d, xs[0], CONTRACT))]
    zero = b.const(0.0, f32)  # relu
    return [b.value(arith.SelectOp(b.value(arith.CmpfOp(xs[0], zero, "ogt")), d, zero))]


class Element:
    """One element of one loop: forward values by (kind, member/input, offset)."""

    def __init__(self, group: RowGroup, b: Emitter, j: SSAValue, n: int,
                 bases: list[SSAValue]):
        self.group, self.b, self.j, self.n, self.bases = group, b, j, n, bases
        self.memo: dict[tuple[str, Any, int], SSAValue] = {}
        self.order: list[tuple[str, Any, int]] = []
        self.operands: dict[tuple[str, Any, int], list[tuple[str, Any, int]]] = {}
        self.extra: dict[tuple[str, Any, int], tuple[SSAValue, ...]] = {}

    def key(self, v: SSAValue, off: int) -> tuple[str, Any, int]:
        return self.group.resolve(v, off, self.n)

    def value(self, key: tuple[str, Any, int]) -> SSAValue:
        found = self.memo.get(key)
        if found is not None:
            return found
        kind, x, off = key
        b = self.b
        if kind == "in":
            found = b.load(self.bases[x], b.add(self.j, off),
                           i32 if self.group.ints[x] else f32)
        elif isinstance(x, XENT):
            found = self.xent(key, x)
        else:
            keys = [self.key(a, off) for a in x.operands]
            found = scalar(b, x, [self.value(k) for k in keys])
            self.operands[key] = keys
        self.memo[key] = found
        self.order.append(key)
        return found


    def at(self, b: Emitter, j: SSAValue, n: int, v: SSAValue) -> tuple[Element, SSAValue]:
        """`v` (all of it, n long) at element `j`, in a fresh element."""
        inner = Element(self.group, b, j, n, self.bases)
        return inner, inner.value(inner.key(v, 0))

    def xent(self, key: tuple[str, Any, int], op: Operation) -> SSAValue:
        """log(sum exp(x - m)) - (x[label] - m) over the logits' expression."""
        b, logits = self.b, op.operands[0]
        classes = length(logits)
        label = self.value(self.key(op.operands[1], key[2]))
        self.operands[key] = []
        wide = b.to_i64(label)
        ok = b.value(arith.CmpiOp(wide, b.i64(classes), "ult"))
        b.check(ok, format_error(op, "index out of range"))

        def bigger(lb: Emitter, c: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
            x = self.at(lb, c, classes, logits)[1]
            more = lb.value(arith.CmpfOp(x, acc[0], "ogt"))
            return (lb.value(arith.SelectOp(more, x, acc[0])),)

        m = b.loop(classes, bigger, [b.const(-3.0e38, f32)])[0]

        def total(lb: Emitter, c: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
            x = self.at(lb, c, classes, logits)[1]
            e = lb.value(math.ExpOp(lb.value(arith.SubfOp(x, m))))
            return (lb.value(arith.AddfOp(acc[0], e)),)

        s = b.loop(classes, total, [b.const(0.0, f32)])[0]
        picked = self.at(b, wide, 1, logits)[1]
        self.extra[key] = (m, s, wide)
        log_total = b.value(math.LogOp(s))
        return b.value(arith.SubfOp(log_total, b.value(arith.SubfOp(picked, m))))


def reverse(el: Element, seeds: Sequence[tuple[tuple[str, Any, int], SSAValue]],
            din_bases: Sequence[SSAValue]) -> None:
    """Reverse mode over `el`'s scalar graph: input cotangents added into
    their buffers (`din_bases`, at this element)."""
    b = el.b
    adj: dict[tuple[str, Any, int], SSAValue] = {}

    def add(key: tuple[str, Any, int], d: SSAValue) -> None:
        cur = adj.get(key)
        adj[key] = d if cur is None else b.value(arith.AddfOp(cur, d, CONTRACT))

    for key, d in seeds:
        add(key, d)
    for key in reversed(el.order):
        d = adj.get(key)
        if d is None:
            continue
        kind, x, off = key
        if kind == "in":
            if not el.group.ints[x]:
                where = b.add(el.j, off)
                total = b.value(arith.AddfOp(b.load(din_bases[x], where), d, CONTRACT))
                b.store(total, din_bases[x], where)
        elif isinstance(x, XENT):
            xent_vjp(el, key, x, d, din_bases)
        else:
            keys = el.operands[key]
            grads = scalar_vjp(b, x, [el.memo[k] for k in keys], el.memo[key], d)
            for k, g in zip(keys, grads):
                add(k, g)


def xent_vjp(el: Element, key: tuple[str, Any, int], op: Operation, d: SSAValue,
             din_bases: Sequence[SSAValue]) -> None:
    """d logits[c] = d * (softmax[c] - [c == label]), through the logits' graph."""
    m, s, label = el.extra[key]
    logits = op.operands[0]
    classes = length(logits)

    def body(lb: Emitter, c: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
        inner, x = el.at(lb, c, classes, logits)
        p = lb.value(arith.DivfOp(lb.value(math.ExpOp(lb.value(arith.SubfOp(x, m)))), s))
        hit = lb.value(arith.CmpiOp(c, label, "eq"))
        p = lb.value(arith.SubfOp(p, lb.value(arith.SelectOp(
            hit, lb.const(1.0, f32), lb.const(0.0, f32)))))
        reverse(inner, [(inner.key(logits, 0), lb.value(arith.MulfOp(d, p)))], din_bases)
        return ()

    el.b.loop(classes, body)


CHUNK = 16  # AVX-512 lanes of f32


def chunked(b: Emitter, n: int, element: Callable[[Emitter, SSAValue, SSAValue | None],
                                                   None]) -> None:
    """`element(j)` for j < n. From CHUNK elements up: chunks of exactly CHUNK
    (LLVM vectorizes each into whole registers, no scalar remainder: at h=150
    the remainder cost as much as the vectors), the last one moved back to end
    at n, overlapping its predecessor; `element` gets `fresh` (j not done by an
    earlier chunk) to make a redone element's contribution zero."""
    if n < CHUNK:
        b.loop(n, lambda eb, j, _: (element(eb, j, None), ())[1])
        return
    count = -(-n // CHUNK)

    def chunk(cb: Emitter, k: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
        first = cb.mul(k, CHUNK)
        start = cb.value(arith.MinSIOp(first, cb.i64(n - CHUNK)))

        def inner(eb: Emitter, t: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
            j = eb.add(start, t)
            fresh = (eb.value(arith.CmpiOp(j, first, "sge")) if n % CHUNK else None)
            element(eb, j, fresh)
            return ()

        cb.loop(CHUNK, inner)
        return ()

    b.loop(count, chunk)


def row_bases(b: Emitter, r: SSAValue, pointers: Sequence[SSAValue],
              sizes: Sequence[int]) -> list[SSAValue]:
    start = [b.mul(r, s) for s in sizes]
    return [b.offset(p, s) if size else p for p, s, size in zip(pointers, start, sizes)]


def row_function(group: RowGroup, name: str, pointers: int, body: Any) -> func.FuncOp:
    """`name(rows, pointers...)`: `body(rb, r, pointers, in_sizes, out_sizes)`
    emits row r's code (a size is a row's length, 0 for a uniform input)."""
    block = Block(arg_types=[i64, *[PTR] * pointers])
    in_sizes = [length(v) if bat else 0 for v, bat in zip(group.inputs, group.batched)]
    out_sizes = [length(v) for v in group.outputs]

    def row(rb: Emitter, r: SSAValue, _: Sequence[SSAValue]) -> Sequence[SSAValue]:
        body(rb, r, block.args[1:], in_sizes, out_sizes)
        return ()

    Emitter(InsertPoint.at_end(block), InsertPoint.at_start(block)).loop(block.args[0], row)
    block.add_op(func.ReturnOp())
    signature = FunctionType.from_lists(list(block.arg_types), [])
    return func.FuncOp(name, signature, Region(block))


def forward_function(group: RowGroup, name: str) -> func.FuncOp:
    """`name(rows, inputs..., outputs...)`: every output's rows."""
    nin, nout = len(group.inputs), len(group.outputs)

    def body(rb: Emitter, r: SSAValue, ptrs: Sequence[SSAValue], in_sizes: list[int],
             out_sizes: list[int]) -> None:
        bases = row_bases(rb, r, ptrs[:nin], in_sizes)
        out_bases = row_bases(rb, r, ptrs[nin:nin + nout], out_sizes)
        for n, pieces in group.loops.items():
            def element(eb: Emitter, j: SSAValue, _: SSAValue | None, n: int = n,
                        pieces: Any = pieces) -> None:
                el = Element(group, eb, j, n, bases)
                for k, out_off, v, v_off in pieces:
                    eb.store(el.value(el.key(v, v_off)), out_bases[k], eb.add(j, out_off))

            chunked(rb, n, element)

    return row_function(group, name, nin + nout, body)


def backward_function(group: RowGroup, name: str) -> func.FuncOp:
    """`name(rows, inputs..., output cotangents..., input cotangents...)`:
    adds each input's cotangent into its buffer (a uniform one summed)."""
    nin, nout = len(group.inputs), len(group.outputs)

    def body(rb: Emitter, r: SSAValue, ptrs: Sequence[SSAValue], in_sizes: list[int],
             out_sizes: list[int]) -> None:
        bases = row_bases(rb, r, ptrs[:nin], in_sizes)
        dout_bases = row_bases(rb, r, ptrs[nin:nin + nout], out_sizes)
        din_bases = row_bases(rb, r, ptrs[nin + nout:], in_sizes)
        for n, pieces in group.loops.items():
            def element(eb: Emitter, j: SSAValue, fresh: SSAValue | None, n: int = n,
                        pieces: Any = pieces) -> None:
                el = Element(group, eb, j, n, bases)
                seeds = []
                for k, out_off, v, v_off in pieces:
                    key = el.key(v, v_off)
                    el.value(key)
                    d = eb.load(dout_bases[k], eb.add(j, out_off))
                    if fresh is not None:  # an element the overlapping last chunk redoes
                        d = eb.value(arith.SelectOp(fresh, d, eb.const(0.0, f32)))
                    seeds.append((key, d))
                reverse(el, seeds, din_bases)

            chunked(rb, n, element)

    return row_function(group, name, 2 * nin + nout, body)


# --- compilation and calls --------------------------------------------------

def digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def compile_groups(groups: list[RowGroup], gradients: bool) -> dict[int, tuple[Any, Any]]:
    """One object for all groups of a model: id(group) -> (forward, backward)."""
    from recir.backend.cache import ObjectCache, cache_key, located_text
    from recir.backend.engine import Engine, compile_object
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.pipeline import ROW_LOOPS, run_passes

    if not groups:
        return {}
    functions: list[func.FuncOp] = []
    for k, group in enumerate(groups):
        functions.append(forward_function(group, f"rows_fwd_{k}"))
        if gradients:
            functions.append(backward_function(group, f"rows_bwd_{k}"))
    module = ModuleOp(functions)
    cache = ObjectCache()
    key = cache_key(located_text(module), f"batching-rows {digest()}")
    hit = cache.load(key, {"sites": list[str]})
    if hit is None:
        run_passes(module, ROW_LOOPS)
        found_sites: Any = module.attributes.pop("recir.error_sites")
        sites = [a.data for a in found_sites.data]
        obj = compile_object(to_llvm_ir(module))
        cache.store(key, obj, {"sites": sites})
    else:
        obj, sites = hit[0], hit[1]["sites"]
    engine = Engine(obj)
    found: dict[int, tuple[Any, Any]] = {}
    for k, group in enumerate(groups):
        nin, nout = len(group.inputs), len(group.outputs)
        fwd = NativeRows(engine, f"rows_fwd_{k}", nin + nout, sites)
        bwd = (NativeRows(engine, f"rows_bwd_{k}", 2 * nin + nout, sites)
               if gradients else None)
        found[id(group)] = (fwd, bwd)
    return found


class NativeRows:
    """A compiled row kernel called with NumPy arrays (C-contiguous)."""

    def __init__(self, engine: Any, name: str, npointers: int, sites: list[str]):
        self.engine, self.sites = engine, sites  # the engine keeps the code alive
        self.address = engine.address(name)
        prototype = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64,
                                     *[ctypes.c_void_p] * npointers)
        self.fn: Callable[..., None] = prototype(self.address)
        self.contexts = (Context * 1)()  # one per part of a split call
        self.first = self.contexts[0]
        self.first_address = ctypes.addressof(self.first)

    def __call__(self, rows: int, arrays: Sequence[np.ndarray | None],
                 row_bytes: Sequence[int] = (), threads: int = 1, sums: Sequence[int] = ()
                 ) -> None:
        """Run over `rows`; with `row_bytes` (each array's, 0 for one shared
        row) and `threads` > 1, as one part per thread (`split.py`). Arrays at
        `sums` are shared rows the kernel adds into (a bias gradient): parts
        after the first add into zeroed copies, summed in afterwards."""
        pointers = [0 if a is None else data_address(a) for a in arrays]
        if threads > 1 and row_bytes and len(pointers) <= split.MAX_POINTERS:
            if len(self.contexts) < threads:
                self.contexts = (Context * threads)()
                self.first = self.contexts[0]
                self.first_address = ctypes.addressof(self.first)
            cuts = split.ranges(rows, threads)
            copies = [[np.zeros_like(arrays[k]) for k in sums] for _ in cuts[1:]]
            parts = []
            for t, (lo, hi) in enumerate(cuts):
                mine = [p + lo * b if p else 0 for p, b in zip(pointers, row_bytes)]
                for k, copy in zip(sums, copies[t - 1] if t else ()):
                    mine[k] = data_address(copy)
                parts.append([split.ROWS + len(mine), self.address,
                              ctypes.addressof(self.contexts[t]), hi - lo, *mine])
            split.run(parts, threads)
            for part in copies:
                for k, copy in zip(sums, part):
                    arrays[k] += copy  # type: ignore[operator]
            for ctx in self.contexts:
                if ctx.error:
                    self.fail(ctx)
        else:
            self.fn(self.first_address, rows, *pointers)
            if self.first.error:
                self.fail(self.first)

    def fail(self, ctx: Context) -> None:
        site = ctx.site
        for c in self.contexts:
            c.error, c.stack_limit = 0, 0
        raise RecirError(f"{self.sites[site]} (at run time, in a frontier row kernel)")


def as_rows(x: Any, n: int, batched: bool, size: int, dtype: Any) -> np.ndarray:
    """An input as the kernel reads it: n contiguous rows, or one row."""
    a = np.asarray(x)
    if a.dtype != dtype:
        a = a.astype(dtype)
    if batched and a.size != n * size:
        a = np.broadcast_to(a.reshape(-1)[:size] if a.size == size else a, (n, size))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(tmath.shape_of(v)) if isinstance(v.type, TensorType) else ()


class Kernels:
    """The compiled row kernels of one runner, with NumPy-facing calls. A
    frontier of at least SPLIT_ELEMENTS output elements is split across the
    run's threads (`kernels.split_threads`)."""

    SPLIT_ELEMENTS = 8192

    def __init__(self, groups: list[RowGroup], gradients: bool):
        self.groups = groups
        self.compiled = compile_groups(groups, gradients)
        self.layout = {id(g): (
            [(bat, length(v), np.int32 if i else np.float32)
             for v, bat, i in zip(g.inputs, g.batched, g.ints)],
            [shape(v) for v in g.outputs],
            [None if i else (n, shape(v)) for v, i, n in zip(g.inputs, g.ints, g.batched)])
            for g in groups}
        # bytes a row of each input (0: shared) and of each output
        self.row_bytes = {id(g): (
            [4 * length(v) if bat else 0 for v, bat in zip(g.inputs, g.batched)],
            [4 * length(v) for v in g.outputs]) for g in groups}

    def threads(self, group: RowGroup, n: int) -> int:
        threads = split_threads()
        if threads > 1 and n >= threads and n * sum(self.row_bytes[id(group)][1]) >= \
                4 * self.SPLIT_ELEMENTS:
            return threads
        return 1

    def forward(self, group: RowGroup, vals: list[Any], n: int) -> list[np.ndarray]:
        ins_layout, out_shapes, _ = self.layout[id(group)]
        ins = [as_rows(x, n, *lay) for x, lay in zip(vals, ins_layout)]
        outs = [np.empty((n, *sh), np.float32) for sh in out_shapes]
        in_bytes, out_bytes = self.row_bytes[id(group)]
        self.compiled[id(group)][0](n, [*ins, *outs], [*in_bytes, *out_bytes],
                                    self.threads(group, n))
        return outs

    def backward(self, group: RowGroup, vals: list[Any], dys: list[Any], n: int
                 ) -> list[np.ndarray | None]:
        ins_layout, out_shapes, din_layout = self.layout[id(group)]
        ins = [as_rows(x, n, *lay) for x, lay in zip(vals, ins_layout)]
        douts = [np.zeros((n, *sh), np.float32) if d is None else
                 as_rows(d, n, True, int(np.prod(sh, dtype=np.int64)), np.float32)
                 for d, sh in zip(dys, out_shapes)]
        dins = [None if lay is None else np.zeros((n, *lay[1]) if lay[0] else lay[1],
                                                  np.float32) for lay in din_layout]
        in_bytes, out_bytes = self.row_bytes[id(group)]
        first = len(ins) + len(douts)
        sums = [first + k for k, lay in enumerate(din_layout) if lay is not None and not lay[0]]
        self.compiled[id(group)][1](n, [*ins, *douts, *dins], [*in_bytes, *out_bytes, *in_bytes],
                                    self.threads(group, n), sums)
        return dins
