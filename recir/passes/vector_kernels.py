"""The recursive code's matrix-vector products, in explicit vectors.

LLVM's own vectorization of a dot product's scalar loop leaves each row's
n % lanes elements to scalar steps, as costly as several whole vectors,
and, for short rows, vectorizes across rows with gathers. So each row is
whole vectors and a masked last one, built with the loop builder's vector
ops (`loop_builder.VectorEmitter`), as the GEMM kernels are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.ir import SSAValue

from recir.passes.gemm_target import host_target
from recir.passes.loop_builder import Emitter, Index, VectorEmitter

ROW_BLOCK = 4


def vector_dots(b: VectorEmitter, rows: Sequence[SSAValue], y: SSAValue, n: int
                ) -> list[SSAValue]:
    """sum_i row[i] * y[i] for each of `rows`: a vector accumulator each
    along n, each vector of `y` loaded once for all of them, n's last
    vector masked."""
    lanes = host_target().lanes
    whole, tail = divmod(n, lanes)

    def step(s: VectorEmitter, at: Index, acc: Sequence[SSAValue],
             mask: SSAValue | None = None) -> list[SSAValue]:
        def read(p: SSAValue) -> SSAValue:
            return s.vload(p, at, lanes) if mask is None else s.masked_load(p, at, mask)

        yv = read(y)
        return [s.fma(read(row), yv, a) for row, a in zip(rows, acc, strict=True)]

    acc = [b.zeros(lanes)] * len(rows)
    if whole:
        acc = b.loop(whole, lambda s, q, acc: step(s, s.mul(q, lanes), acc), acc)
    if tail:
        acc = step(b, whole * lanes, acc, b.lane_mask(tail, lanes))
    sums = b.alloca(lanes)  # (xDSL's llvm dialect has no extractelement)
    b.vstore(b.lane_sums(acc), sums, 0)  # (the sums in its first lanes, in order)
    return [b.load(sums, d) for d in range(len(rows))]


def rows_dotted(b: Emitter, matrix: SSAValue, vector: SSAValue, rows: int, cols: int,
                at: Callable[[Emitter, Index], Index] = lambda b, r: r) -> SSAValue:
    """A rows x cols matrix times a vector, into a fresh buffer (row r's sum
    at `at(r)`): blocks of ROW_BLOCK rows (`vector_dots`: each vector of
    the vector loaded once a block), then the rest as one."""
    v = VectorEmitter(b.point, b.allocas)
    out = v.alloca(rows)
    blocked = rows - rows % ROW_BLOCK

    def dotted(e: VectorEmitter, first: Index, count: int) -> None:
        starts = [e.offset(matrix, e.mul(e.add(first, d), cols)) for d in range(count)]
        for d, total in enumerate(vector_dots(e, starts, vector, cols)):
            e.store(total, out, at(e, e.add(first, d)))

    if blocked:
        v.each(blocked // ROW_BLOCK, lambda e, k: dotted(e, e.mul(k, ROW_BLOCK), ROW_BLOCK))
    if rows > blocked:
        dotted(v, blocked, rows - blocked)
    return out
