"""The register tile of nn, tn and nt's packed path (`gemm_kernels.py`).

A tile of `rows` rows of C by the target's vectors keeps its accumulators
in registers over a block of k: each step loads the vectors of B's packed
row and broadcasts each row's element of A against them. Over a packed
tile of A (`gemm_packing.pack_a_tiles`) a step's broadcasts are at
constant offsets from one pointer, with no address arithmetic per row;
the loop takes two steps an iteration. Sizes: `gemm_target.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i64
from xdsl.ir import SSAValue

from recir.passes.gemm_target import Target
from recir.passes.llvm_functions import new_function
from recir.passes.loop_builder import PTR, VectorEmitter

CACHE_LINE_FLOATS = 16


def broadcast_tile(target: Target, layout: str, rows: int, direct: bool = False,
                   packed_a: bool = False) -> llvm.FuncOp:
    """`tile(A, across, along, Bp, ldbp, C, ldc, kc, cols, add, base,
    ldbase)`: C's `rows` x width tile = A's rows (A[i, p] at A + i across +
    p along: row-major, a transpose or a packed tile) times Bp (kc rows
    `ldbp` apart: the packed block, or B itself if `direct`, read masked
    past `cols`), plus, if `add`, the tile at `base` (rows `ldbase` apart:
    C itself, or a bias row repeated, ldbase 0); the first `cols` columns
    are stored. `packed_a` (`.packed_a<rows>`): A is a packed tile
    (`gemm_packing.pack_a_tiles`: across 1, along the target's rows; the
    arguments are ignored), whose reads of a step are at constant offsets
    from one pointer. The loop takes two steps an iteration (its loads at
    constant offsets from one another, one increment of each pointer for
    both), then the odd step left."""
    lanes, vectors = target.lanes, target.tile[1]
    kind = "direct" if direct else "packed_a" if packed_a else "tile"
    function, b, (a, across, along, bp, ldbp, c, ldc, kc, cols, add, base, ldbase,
                  *ahead) = \
        new_function(f"recir_gemm_{layout}.{kind}{rows}",
                     [PTR, i64, i64, PTR, i64, PTR, i64, i64, i64, i64, PTR, i64]
                     + [PTR] * (not direct))
    across, along = (1, target.tile[0]) if packed_a else (across, along)
    masks = [b.lane_mask(b.sub(cols, v * lanes), lanes) for v in range(vectors)]
    starts = [b.offset(a, b.mul(i, across)) for i in range(rows)]

    def prefetch(e: VectorEmitter) -> None:  # C's lines arrive while the tile computes
        for i in range(rows):
            for v in range(vectors):
                e.prefetch(e.offset(c, e.add(e.mul(i, ldc), v * lanes)))

    b.when(b.compare("sge", kc, lanes), prefetch)  # a shorter loop would not hide it

    def step(s: VectorEmitter, p: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
        if ahead:  # a line of the next packed block into L2 a step (`BroadcastDriver.ahead`)
            s.prefetch(s.offset(ahead[0], s.mul(p, CACHE_LINE_FLOATS)), write=False, level=2)
        row = s.mul(p, ldbp)
        bv = [s.masked_load(bp, s.add(row, v * lanes), masks[v]) if direct else
              s.vload(bp, s.add(row, v * lanes), lanes) for v in range(vectors)]
        out = []
        at = s.mul(p, along)
        for i in range(rows):
            broadcast = s.splat(s.load(starts[i], at), lanes)
            out += [s.fma(broadcast, bv[v], acc[i * vectors + v]) for v in range(vectors)]
        return out

    def pair(s: VectorEmitter, q: SSAValue, acc: Sequence[SSAValue]) -> Sequence[SSAValue]:
        p = s.mul(q, 2)
        return step(s, s.add(p, 1), step(s, p, acc))

    pairs = b.value(arith.DivSIOp(kc, b.i64(2)))
    sums = b.loop(pairs, pair, [b.zeros(lanes)] * (rows * vectors))
    sums = b.loop(kc, step, sums, start=b.mul(pairs, 2))
    on = b.compare("ne", add, 0)
    bases = [b.offset(base, b.mul(i, ldbase)) for i in range(rows)]
    outs = [b.offset(c, b.mul(i, ldc)) for i in range(rows)]
    for v, mask in enumerate(masks):
        reads = b.value(arith.SelectOp(on, mask, b.zeros(lanes, mask.type.element_type)))
        for i in range(rows):
            old = b.masked_load(bases[i], v * lanes, reads)
            b.masked_store(b.vadd(old, sums[i * vectors + v]), outs[i], v * lanes, mask)
    b.op(llvm.ReturnOp())
    return function
