"""nt by dot products along k, for few rows of A or of B (`gemm_kernels.py`).

`recir_gemm_nt.choose` takes these where packing B transposed would not
repay itself (few rows of A) or would compute mostly dropped columns (few
rows of B: a classifier's). A tile of rows of A by rows of B keeps one
vector accumulator per pair, reading both operands along k, and a row's
sums are reduced together at the end; k's last vector is masked, so no
load leaves the arrays. The layout's entries (`nt_entries`) call
`recir_gemm_nt.choose` (`nt_driver`), which takes these or the packed
driver (`gemm_kernels.broadcast_driver`), the cheaper.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i1, i64
from xdsl.ir import SSAValue

from recir.passes.frame_buffers import allocated
from recir.passes.gemm_target import Target
from recir.passes.llvm_functions import (
    accumulating,
    at_least_zero,
    call,
    ceil_div,
    dispatch,
    new_function,
)
from recir.passes.loop_builder import PTR, Emitter, Index, VectorEmitter

# the layouts' arguments: m, n, k, A, lda, B, ldb, C, ldc, accumulate
SIGNATURE = [i64, i64, i64, PTR, i64, PTR, i64, PTR, i64, i64]


def dot_tile(target: Target, rows: int, cols: int) -> llvm.FuncOp:
    """`tile(A, lda, B, ldb, C, ldc, k, add, base, ldbase)`: C[i, j] =
    A[i, :k] . B[j, :k] (plus, if `add`, base[i ldbase + j]: C itself, or a
    bias row with ldbase 0) for `rows` rows of A by `cols` rows of B; k's
    last vector (1 to lanes of it) masked."""
    lanes = target.lanes
    function, b, (a, lda, bm, ldb, c, ldc, k, add, base, ldbase) = new_function(
        f"recir_gemm_nt.tile{rows}x{cols}", [PTR, i64, PTR, i64, PTR, i64, i64, i64, PTR, i64])
    a_rows = [b.offset(a, b.mul(i, lda)) for i in range(rows)]
    b_rows = [b.offset(bm, b.mul(j, ldb)) for j in range(cols)]
    whole = b.value(arith.MaxSIOp(b.value(arith.DivSIOp(b.sub(k, 1), b.i64(lanes))),
                                  b.i64(0)))

    def step(s: VectorEmitter, mask: SSAValue | None, at: SSAValue,
             acc: Sequence[SSAValue]) -> list[SSAValue]:
        """A's vectors at `at` held, then each of B's loaded and used at once."""
        def read(r: SSAValue) -> SSAValue:
            return s.vload(r, at, lanes) if mask is None else s.masked_load(r, at, mask)

        av = [read(r) for r in a_rows]
        out = list(acc)
        for j, r in enumerate(b_rows):
            bv = read(r)
            for i in range(rows):
                out[i * cols + j] = s.fma(av[i], bv, acc[i * cols + j])
        return out

    sums = b.loop(whole, lambda s, q, acc: step(s, None, s.mul(q, lanes), acc),
                  [b.zeros(lanes)] * (rows * cols))
    done = b.mul(whole, lanes)
    sums = step(b, b.lane_mask(b.sub(k, done), lanes), done, sums)
    on = b.compare("ne", add, 0)
    mask = b.lane_mask(cols, lanes)
    for i in range(rows):
        total = b.lane_sums(sums[i * cols:(i + 1) * cols])
        old = b.masked_load(base, b.mul(i, ldbase), b.value(arith.SelectOp(
            on, mask, b.zeros(lanes, i1))))
        b.masked_store(b.vadd(old, total), c, b.mul(i, ldc), mask)
    b.op(llvm.ReturnOp())
    return function


def dot_driver(target: Target) -> llvm.FuncOp:
    """`recir_gemm_nt.dots(..., bias)`: blocks of A's rows (all of k of
    them in half of L2); in each, tiles of B's rows outside (one stays in
    L1) and tiles of A's rows inside. C's rows start from `bias` where it
    is not null."""
    rows, cols = target.nt_tile
    function, b, (m, n, k, a, lda, bm, ldb, c, ldc, accumulate, bias) = new_function(
        "recir_gemm_nt.dots", [*SIGNATURE, PTR])
    m, n, k = at_least_zero(b, m, n, k)
    from_bias = allocated(b, bias)
    add = b.value(arith.SelectOp(from_bias, b.i64(1), accumulating(
        b, accumulate, b.const(0, arith.IntegerType(1)))))
    fitting = b.value(arith.DivSIOp(b.i64(target.l2_bytes // 2 // 4), b.value(
        arith.MaxSIOp(k, b.i64(1)))))  # rows of A, all of k, in half of L2
    block = b.value(arith.MaxSIOp(b.mul(b.value(arith.DivSIOp(fitting, b.i64(rows))), rows),
                                  b.i64(rows)))

    def tile(s: Emitter, i: Index, j: Index, r: int, q: int) -> None:
        tile_of_c = s.offset(c, s.add(s.mul(i, ldc), j))
        base = s.value(arith.SelectOp(from_bias, s.offset(bias, j), tile_of_c))
        ldbase = s.value(arith.SelectOp(from_bias, s.i64(0), ldc))
        call(s, f"recir_gemm_nt.tile{r}x{q}", s.offset(a, s.mul(i, lda)), lda,
             s.offset(bm, s.mul(j, ldb)), ldb, tile_of_c, ldc, k, add, base, ldbase)

    def row_block(s: VectorEmitter, ib: SSAValue) -> None:
        i0 = s.mul(ib, block)
        mb = s.min(block, s.sub(m, i0))
        s.each(ceil_div(s, n, cols), lambda e, jt: b_tile(e, i0, mb, e.mul(jt, cols)))

    def b_tile(s: VectorEmitter, i0: SSAValue, mb: SSAValue, j: SSAValue) -> None:
        q = s.min(cols, s.sub(n, j))
        s.each(ceil_div(s, mb, rows), lambda e, it: a_tile(e, e.add(i0, e.mul(it, rows)),
                                                         e.sub(mb, e.mul(it, rows)), j, q))

    def a_tile(s: VectorEmitter, i: SSAValue, left: SSAValue, j: SSAValue, q: SSAValue
               ) -> None:
        r = s.min(rows, left)
        whole = s.value(arith.AndIOp(s.compare("eq", r, rows), s.compare("eq", q, cols)))
        s.when(whole, lambda e: tile(e, i, j, rows, cols), lambda e: dispatch(
            e, r, rows, lambda f, rr: dispatch(f, q, cols, lambda g, qq: tile(g, i, j, rr, qq))))

    b.each(ceil_div(b, m, block), row_block)
    b.op(llvm.ReturnOp())
    return function


def dots_pay(b: Emitter, target: Target, m: SSAValue, n: SSAValue, k: SSAValue,
             packed: bool = False) -> SSAValue:
    """Whether nt's dot products cost no more than packing B transposed, by
    the shuffle port's cycles (the port both extras run on). Dot products
    pay per pair of tiles the row sums (for each row of A, cols - 1
    combinations of two vectors at two shuffles, log2(lanes / cols) halvings
    and a gather) and the masked last step; packing B transposed pays
    log2(lanes) shuffles per lanes elements of B (the square's transpose)
    and then runs nn's tiles, whose last panel computes columns past n that
    it drops (FMAs, two a cycle: a classifier's 5 rows of B take a panel of
    width). `packed`: B is packed already (a weight's copy, `gemm_cached`),
    which leaves the dropped columns only."""
    lanes, (rows, cols), width = target.lanes, target.nt_tile, target.width
    sums = rows * (2 * (cols - 1) + (lanes // cols).bit_length() - 1 + 1)
    per_pair = sums + rows * cols // 2  # and the masked step's FMAs, two a cycle
    # both in units of 2 n / ((rows * cols) / lanes) elements of C
    dots = b.mul(b.mul(m, n), per_pair * lanes * 2)
    dropped = b.sub(b.mul(ceil_div(b, n, width), width), n)
    packing = b.mul(b.mul(b.mul(m, k), dropped), rows * cols)
    if not packed:
        packing = b.add(packing, b.mul(b.mul(k, n), (lanes.bit_length() - 1) * rows * cols * 2))
    return b.compare("sle", dots, packing)


def null(b: Emitter) -> SSAValue:
    return b.value(llvm.ZeroOp(result_types=[PTR]))


def nt_driver(target: Target) -> llvm.FuncOp:
    """`recir_gemm_nt.choose(..., bias)`: dot products or B packed
    transposed, the cheaper (`gemm_dots.dots_pay`)."""
    function, b, args = new_function("recir_gemm_nt.choose", [*SIGNATURE, PTR])
    b.when(dots_pay(b, target, *at_least_zero(b, *args[:3])),
           lambda e: call(e, "recir_gemm_nt.dots", *args),
           lambda e: call(e, "recir_gemm_nt.packed", *args))
    b.op(llvm.ReturnOp())
    return function


def nt_entries() -> list[llvm.FuncOp]:
    """`recir_gemm_nt` (the layouts' signature) and `recir_gemm_nt_bias(m,
    n, k, A, lda, B, ldb, C, ldc, bias)`: C = A B^T + the row `bias` in
    every row (a matvec over rows and its bias in one pass over C)."""
    plain, b, args = new_function("recir_gemm_nt", SIGNATURE, private=False)
    call(b, "recir_gemm_nt.choose", *args, null(b))
    b.op(llvm.ReturnOp())
    biased, b, args = new_function("recir_gemm_nt_bias", [*SIGNATURE[:-1], PTR], private=False)
    call(b, "recir_gemm_nt.choose", *args[:-1], 0, args[-1])
    b.op(llvm.ReturnOp())
    return [plain, biased]
