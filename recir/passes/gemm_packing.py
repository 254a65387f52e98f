"""The matrix kernels' copies of their operands (`gemm_kernels.py`).

A register tile reads B's block as `depth` rows of the tile's width, one
after another, and A's rows one element a step. Where B's rows are far apart
(its leading dimension) or read across (nt's B^T), or A's steps are far apart
(tn's A^T: a step is a row of dY), those reads touch a new line, often in the
same few L1 sets, every step; the copies make both contiguous:

- `pack`, `pack_transposed`: B's block of `depth` steps by `width` columns
  (transposed from nt's rows of B in squares of lanes);
- `pack_a_tiles`: A's block of rows, tile by tile, each tile's `rows`
  elements of a step side by side: a tile reads them at constant offsets
  from one pointer, with no address arithmetic per row, one line in
  several steps (tn's rows of a step are rows of dY, far apart; nn's and
  nt's rows of A fall in the same L1 sets where lda is a multiple of a
  way);
- `workspace`: a heap buffer for copies that outlive one block (nt's whole
  B^T, packed once a call however many blocks of A's rows reuse it), with
  the `aligned_alloc` and `free` it calls (which `frame_buffers.declare_heap`
  declares).
  A failed allocation returns null, and the kernels then copy block by
  block on the stack as they would without it;
- `whole_floats`: the floats all of B takes packed (the workspace's part
  for B; a weight's copy that several calls read, `gemm_cached.py`).
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i1, i64
from xdsl.ir import SSAValue

from recir.passes.frame_buffers import ALLOC, FREE
from recir.passes.gemm_target import Target
from recir.passes.llvm_functions import ceil_div, new_function
from recir.passes.loop_builder import PTR, Emitter, VectorEmitter

ALIGN = 64  # a cache line: a packed panel's rows start on one


def pack(b: VectorEmitter, target: Target, src: SSAValue, ld: SSAValue, kc: SSAValue,
         cols: SSAValue, buf: SSAValue) -> None:
    """buf[p, :] = src[p * ld, :cols] for p < kc, zeros past `cols`."""
    lanes, width = target.lanes, target.width
    masks = [b.lane_mask(b.sub(cols, v * lanes), lanes) for v in range(width // lanes)]

    def row(s: VectorEmitter, p: SSAValue) -> None:
        for v, mask in enumerate(masks):
            s.vstore(s.masked_load(src, s.add(s.mul(p, ld), v * lanes), mask), buf,
                     s.add(s.mul(p, width), v * lanes))

    b.each(kc, row)


def pack_transposed(b: VectorEmitter, target: Target, src: SSAValue, ld: SSAValue,
                    kc: SSAValue, cols: SSAValue, buf: SSAValue) -> None:
    """buf[p, j] = src[j * ld + p] for p < kc, j < cols, zeros past `cols`, in
    squares of lanes x lanes: lanes rows of B read along k (masked past kc;
    rows past `cols` read nothing), transposed in registers, stored as lanes
    rows of the buffer (whose depth is a multiple of lanes)."""
    lanes, width = target.lanes, target.width
    nothing = b.zeros(lanes, i1)

    def square(s: VectorEmitter, q: SSAValue, first: SSAValue) -> None:
        p = s.mul(q, lanes)
        along = s.lane_mask(s.sub(kc, p), lanes)
        rows = []
        for t in range(lanes):
            r = s.add(first, t)
            mask = s.value(arith.SelectOp(s.compare("slt", r, cols), along, nothing))
            rows.append(s.masked_load(src, s.add(s.mul(r, ld), p), mask))
        for t, column in enumerate(s.transpose(rows)):
            s.vstore(column, buf, s.add(s.mul(s.add(p, t), width), first))

    # lanes rows of B at a time, along all of kc: lanes streams of lines,
    # as many as a prefetcher follows
    squares = ceil_div(b, kc, lanes)

    def group(s: VectorEmitter, v: SSAValue) -> None:
        first = s.mul(v, lanes)
        s.each(squares, lambda e, q: square(e, q, first))

    b.each(width // lanes, group)


def pack_function(target: Target, layout: str) -> llvm.FuncOp:
    """`recir_gemm_<layout>.pack(src, ld, kc, cols, buf)`: B's block at `src`
    into the buffer (transposed for nt), one function for the driver's two
    callers (all of B at once, or a panel where it is used)."""
    function, b, (src, ld, kc, cols, buf) = new_function(
        f"recir_gemm_{layout}.pack", [PTR, i64, i64, i64, PTR])
    (pack_transposed if layout == "nt" else pack)(b, target, src, ld, kc, cols, buf)
    b.op(llvm.ReturnOp())
    return function


def k_blocks(b: Emitter, target: Target, k: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(blocks of k, steps of each but the last): as many blocks as `depth`
    needs (one for k = 0, which still writes C), as even as lanes allow (no
    short last block to load and store C for)."""
    steps = b.value(arith.MaxSIOp(ceil_div(b, k, target.depth), b.i64(1)))
    return steps, b.mul(ceil_div(b, ceil_div(b, k, steps), target.lanes), target.lanes)


def block_rows(b: Emitter, target: Target, m: SSAValue, n: SSAValue, k: SSAValue
               ) -> SSAValue:
    """The driver's block of rows: its rows of A (depth deep) and of C (n
    wide) fill L2 together (C stays there from one block of k to the
    next), less B's packed panels where they fit in half of it (they stay
    too), else less what L1 holds (B's block passes through); as even as
    tiles allow: no short last block re-reading all of B for a few rows.
    More rows than a block take B's whole packed copy (the workspace)."""
    rows, width = target.tile[0], target.width
    packed_bytes = b.mul(b.mul(k, ceil_div(b, n, width)), width * 4)
    kept = b.value(arith.SelectOp(b.compare("sle", packed_bytes, target.l2_bytes // 2),
                                  packed_bytes, b.i64(target.l1_bytes)))
    block = b.value(arith.DivSIOp(b.value(arith.DivSIOp(b.sub(target.l2_bytes, kept),
                                                        b.i64(4))), b.add(n, target.depth)))
    block = b.value(arith.MaxSIOp(b.mul(b.value(arith.DivSIOp(block, b.i64(rows))), rows),
                                  b.i64(rows)))
    count = b.value(arith.MaxSIOp(ceil_div(b, m, block), b.i64(1)))
    block = b.mul(ceil_div(b, ceil_div(b, m, count), rows), rows)
    return b.value(arith.MaxSIOp(block, b.i64(rows)))


def whole_floats(b: Emitter, target: Target, n: SSAValue, k: SSAValue) -> SSAValue:
    """The floats all of B takes packed (n, k at least 0): a chunk per
    block of k and panel."""
    steps = k_blocks(b, target, k)[0]
    return b.mul(b.mul(steps, ceil_div(b, n, target.width)), target.depth * target.width)


def pack_a_tiles(b: VectorEmitter, target: Target, layout: str, src: SSAValue,
                 lda: SSAValue, mb: SSAValue, kc: SSAValue, buf: SSAValue) -> None:
    """A's block (i < mb, p < kc; A[i, p] at src + i + p lda for tn, else at
    src + i lda + p) as tiles of `rows`: tile q's step p at buf[(q depth +
    p) rows ...], its rows side by side. A tile reads it as a transposed A
    of leading dimension `rows` from buf + q rows depth. tn's rows of a step
    are contiguous (masked vectors, zeros past mb); nn's and nt's are read
    an element each (a partial tile's rows past mb repeat its last row,
    which its tile, of fewer rows, never reads)."""
    lanes, rows, depth = target.lanes, target.tile[0], target.depth
    chunks = range(0, rows, lanes)  # a tile's step in vectors of at most lanes

    def tile(s: VectorEmitter, q: SSAValue) -> None:
        left = s.sub(mb, s.mul(q, rows))
        base = s.mul(q, rows * depth)
        reads = [s.lane_mask(s.sub(left, c), lanes) for c in chunks]
        writes = [s.lane_mask(min(lanes, rows - c), lanes) for c in chunks]
        last = s.sub(left, 1)
        firsts = [s.offset(src, s.mul(s.add(s.mul(q, rows), s.min(r, last)), lda))
                  for r in range(rows)] if layout != "tn" else []

        def step(e: VectorEmitter, p: SSAValue) -> None:
            to = e.add(base, e.mul(p, rows))
            if layout != "tn":
                for r, first in enumerate(firsts):
                    e.store(e.load(first, p), buf, e.add(to, r))
                return
            at = e.add(e.mul(q, rows), e.mul(p, lda))
            for c, read, write in zip(chunks, reads, writes, strict=True):
                e.masked_store(e.masked_load(src, e.add(at, c), read), buf, e.add(to, c), write)

        s.each(kc, step)

    b.each(ceil_div(b, mb, rows), tile)


def workspace(b: Emitter, count: SSAValue) -> SSAValue:
    """`count` floats on the heap where `count` > 0, else null; null too if
    the allocation fails. `release` gives it back."""
    slot = b.alloca(1, PTR)
    b.store(b.value(llvm.ZeroOp(result_types=[PTR])), slot, 0)

    def allocate(e: Emitter) -> None:
        size = e.mul(ceil_div(e, e.mul(count, 4), ALIGN), ALIGN)
        e.store(e.op(llvm.CallOp(ALLOC, e.i64(ALIGN), size, return_type=PTR)).results[0],
                slot, 0)

    b.when(b.compare("sgt", count, 0), allocate)
    return b.load(slot, 0, PTR)


def release(b: Emitter, pointer: SSAValue) -> None:
    """`free` (which takes null too)."""
    b.op(llvm.CallOp(FREE, pointer))
