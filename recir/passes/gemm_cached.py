"""A weight's packed copy, made once for many products (`gemm_kernels.py`).

The frontier's products over rows multiply each height's rows by the same
weights: `x W^T` (nt) forward, `dY W` (nn) backward. The kernels pack B on
every call, which for a weight costs about as much as the multiply-adds of a
few tiles of rows; a height loop runs every height's products, so it keeps
a table of packed copies (`open_table`), one entry per product of its
module, in the thread's context (`packed`), and each product calls
`recir_gemm_<layout>.cached(..., entry)`: its entry's copy where that is of
the same B (address, leading dimension, n and k). The first product of a B
only names it in the entry; the second packs it into a fresh heap copy
(the old one freed), and only where the plain kernel would pack B anyway
(nt: not dot products; nn: more than a tile of rows and a block of B over
half of L1). So a weight multiplied once a call (a leaf's) is never copied,
and no product costs more than the plain kernel but for that copy. The
loop frees the copies when it ends (`close_table`). A copy is B as the
driver's first block of rows packs it (`gemm_packing.pack_whole_function`): nn's products give the
plain kernel's bits; nt's, packed already, take the broadcast tiles for all
but few rows of B (`gemm_dots.dots_pay`), where the plain kernel would take
dot products for few rows of A (the same sums, in another order). Each
thread of a height loop's team has its own table: no copy is written while
another thread reads it, and each stays in its own core's caches. Where the
copy cannot be had (allocation failed, n or k zero), the product calls the
plain kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i1, i8, i64
from xdsl.ir import SSAValue

from recir.passes.frame_buffers import allocated
from recir.passes.gemm_dots import SIGNATURE, dots_pay
from recir.passes.gemm_packing import (k_blocks, pack_whole_function, release, whole_floats,
                                       workspace)
from recir.passes.gemm_target import Target
from recir.passes.llvm_functions import at_least_zero, call, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import PACKED

CACHED = ("nn", "nt")  # the layouts whose B is a weight: nt's forward, nn's backward
ENTRY = 5  # an entry's i64 fields: B's address, ldb, n, k, the copy (or null)


def cached_name(layout: str) -> str:
    return f"recir_gemm_{layout}.cached"


def cached_inputs(layout: str) -> list:
    """The layouts' arguments, nt's bias row (or null), the entry."""
    return [*SIGNATURE, *([PTR] if layout == "nt" else []), PTR]


def cached_functions(target: Target, layout: str) -> list[llvm.FuncOp]:
    """`recir_gemm_<layout>.pack_whole` and `.cached` (nn and nt only)."""
    if layout not in CACHED:
        return []
    function, b, args = new_function(cached_name(layout), cached_inputs(layout),
                                     private=False)
    bm, ldb, entry = args[5], args[6], args[-1]
    n, k = at_least_zero(b, args[1], args[2])
    keys = [b.value(llvm.PtrToIntOp(bm, i64)), ldb, n, k]

    m = at_least_zero(b, args[0])[0]
    plain: Sequence[SSAValue] = args[:-1]

    def kernel(e: Emitter) -> None:
        call(e, "recir_gemm_nt.choose" if layout == "nt" else f"recir_gemm_{layout}", *plain)

    def copy_of(e: Emitter) -> None:
        call(e, f"recir_gemm_{layout}.packed", *plain, e.load(entry, 4, PTR))

    def repack(e: Emitter) -> None:
        """B packed into a fresh copy, then used."""
        fresh = workspace(e, whole_floats(e, target, n, k))

        def keep(f: Emitter) -> None:
            call(f, f"recir_gemm_{layout}.pack_whole", bm, ldb, n, k, fresh)
            f.store(fresh, entry, 4)
            copy_of(f)

        e.when(allocated(e, fresh), keep, kernel)

    seen = b.const(1, i1)  # the entry names B already
    for i, key in enumerate(keys):
        seen = b.value(arith.AndIOp(seen, b.compare("eq", b.load(entry, i, i64), key)))
    hit = b.value(arith.AndIOp(seen, allocated(b, b.load(entry, 4, PTR))))

    def miss(e: Emitter, packs: SSAValue) -> None:
        """Another B forgotten and this one named; B packed into the copy
        where this is its second product and the kernel would pack it."""
        def name(f: Emitter) -> None:
            release(f, f.load(entry, 4, PTR))
            f.store(f.value(llvm.ZeroOp(result_types=[PTR])), entry, 4)
            for i, key in enumerate(keys):
                f.store(key, entry, i)

        e.when(seen, lambda _: None, name)
        e.when(e.value(arith.AndIOp(seen, packs)), repack, kernel)

    if layout == "nt":  # dot products where they cost less than the copy's extras
        def dots(e: Emitter) -> None:
            call(e, "recir_gemm_nt.dots", *plain)

        b.when(hit, lambda e: e.when(dots_pay(e, target, m, n, k, packed=True), dots, copy_of),
               lambda e: miss(e, e.value(arith.XOrIOp(dots_pay(e, target, m, n, k),
                                                      e.const(1, i1)))))
    else:  # nn reads B in place for one tile of rows, or where its block fits L1
        in_place = b.value(arith.OrIOp(b.compare("sle", m, target.tile[0]), b.compare(
            "sle", b.mul(b.mul(k_blocks(b, target, k)[1], n), 4), target.l1_bytes // 2)))
        b.when(hit, copy_of, lambda e: miss(e, e.value(arith.XOrIOp(in_place,
                                                                     e.const(1, i1)))))
    b.op(llvm.ReturnOp())
    return [pack_whole_function(target, layout), function]


def open_table(b: Emitter, ctx: SSAValue, sites: int, field: int = PACKED
               ) -> tuple[SSAValue, SSAValue]:
    """A table of `sites` empty entries of `ENTRY` fields (field 0: their
    count) on the function's stack, made the context's `field` (`packed`,
    or `row_logs`' table); returns it and the table it replaced."""
    table = b.alloca(1 + ENTRY * sites, i64)
    b.store(b.i64(sites), table, 0)

    b.each(ENTRY * sites, lambda e, i: e.store(e.i64(0), table, e.add(i, 1)))
    slot = b.offset(ctx, field, i8)
    old = b.load(slot, 0, PTR)
    b.store(table, slot, 0)
    return table, old


def close_table(b: Emitter, ctx: SSAValue, table: SSAValue, old: SSAValue, sites: int
                ) -> None:
    """The table's copies freed, and the context's `packed` as it was."""
    b.each(sites, lambda e, i: release(e, e.load(table, e.add(e.mul(i, ENTRY), 1 + 4), PTR)))
    b.store(old, b.offset(ctx, PACKED, i8), 0)

