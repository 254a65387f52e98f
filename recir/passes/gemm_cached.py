"""A weight's packed copy, made once for all the heights of a call: the kernels' side.

A frontier's height loop multiplies every height's rows by the same
weights, `x W^T` (nt) in the forward, and the kernel packs B transposed on
every call (`gemm_kernels.py`): once a height, or once a block of rows of
a height that runs as several (`native_schedule.in_blocks`, each
within L2). So a height loop
(`schedule_loops`) opens a table (`open_table`) on its stack, pointed to by
its thread's context field `packed`, with an entry for each product by a
weight in its module (`packed_weights.with_packed`), and such a product
calls `recir_gemm_nt.cached(..., bias, entry)`:

- the entry names B (address, leading dimension, n, k) and holds its copy
  or null; another B (or none) is forgotten and this one named;
- the copy is made at B's first product where the plain kernel would pack
  B (not dot products): the driver packs B into it (`recir_gemm_nt.given`:
  `gemm_kernels.broadcast_driver` with `given`) as it would into its
  workspace or a panel's buffer, each panel as its first block of rows
  uses it, so that product costs what the plain kernel's does (its
  packing the same, into memory freed and reused), and a weight multiplied
  at several heights is packed once, not once more at its second product;
- the product reads the copy where the entry has one, unless dot products
  cost less than a panel's dropped columns (few rows of B), else runs the
  plain kernel.

Only a function's parameters that no op of it writes are named (its
products by them are marked, `packed_weights.mark_static_weights`), and the
loop frees the copies when it ends (`close_table`): no call reads a copy
made from older weights; the next call (after an optimizer's step, or a
user's assignment) opens a new table. Each thread of a loop's team opens
its own: no copy is written while another thread reads it, and each
thread holds a copy of each weight for the loop's call (the plain kernel
a panel, or all of B for more rows than a block, for each product). A copy that cannot be allocated (or of no
elements) leaves the plain kernel. With a copy, the broadcast tiles take
the rows where the plain kernel would take dot products (few rows of A:
the same sums in another order).

A backward's `dY W` (nn) by such a weight calls `recir_gemm_nn.cached`
alike: its first product packs B's rows (as they are, no transposes) into
the copy, and every product reads it there, even one of a tile of rows or
fewer, which the plain kernel would read in place. Packing B every
product cost a few-row product up to about a third of its time
(`bench/gemm_cached_ab.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i1, i8, i64
from xdsl.ir import SSAValue

from recir.passes.frame_buffers import allocated
from recir.passes.gemm_dots import SIGNATURE, dots_pay
from recir.passes.gemm_packing import release, whole_floats, workspace
from recir.passes.gemm_target import Target
from recir.passes.llvm_functions import at_least_zero, call, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import PACKED

CACHED = ("nt", "nn")  # the layouts whose B, a weight, a copy serves
ENTRY = 5  # an entry's i64 fields: B's address, ldb, n, k, the copy (or null)
CACHED_INPUTS = [*SIGNATURE, PTR, PTR]  # the layouts' arguments, the bias row (null: nn's), the entry


def cached_name(layout: str) -> str:
    return f"recir_gemm_{layout}.cached"


def cached_functions(target: Target, layout: str) -> list[llvm.FuncOp]:
    """`recir_gemm_<layout>.cached` (nt, nn)."""
    if layout not in CACHED:
        return []
    function, b, args = new_function(cached_name(layout), CACHED_INPUTS, private=False)
    plain, bm, ldb, entry = args[:-1], args[5], args[6], args[-1]
    if layout == "nn":
        plain = args[:len(SIGNATURE)]  # (no bias)
    m, n, k = at_least_zero(b, *args[:3])
    keys = [b.value(llvm.PtrToIntOp(bm, i64)), ldb, n, k]
    named = b.const(1, i1)
    for i, key in enumerate(keys):
        named = b.value(arith.AndIOp(named, b.compare("eq", b.load(entry, i, i64), key)))

    def rename(e: Emitter) -> None:
        release(e, e.load(entry, 4, PTR))
        e.store(e.value(llvm.ZeroOp(result_types=[PTR])), entry, 4)
        for i, key in enumerate(keys):
            e.store(key, entry, i)

    b.when(named, lambda _: None, rename)
    if layout == "nn":  # the copy made by a product of rows (one of none packs nothing)
        b.when(allocated(b, b.load(entry, 4, PTR)), lambda e: call(
            e, "recir_gemm_nn.given", *plain, e.load(entry, 4, PTR), 1),
            lambda e: e.when(e.compare("sgt", m, 0),
                             lambda f: made(f, target, layout, plain, n, k, entry)))
        b.op(llvm.ReturnOp())
        return [function]
    packs = b.value(arith.XOrIOp(dots_pay(b, target, m, n, k), b.const(1, i1)))
    missing = b.value(arith.XOrIOp(allocated(b, b.load(entry, 4, PTR)), b.const(1, i1)))
    make = b.value(arith.AndIOp(packs, missing))

    def given(e: Emitter) -> None:
        copy = e.load(entry, 4, PTR)
        read = e.value(arith.AndIOp(allocated(e, copy), e.value(arith.XOrIOp(
            dots_pay(e, target, m, n, k, packed=True), e.const(1, i1)))))
        e.when(read, lambda f: call(f, "recir_gemm_nt.given", *plain, copy, 1),
               lambda f: call(f, "recir_gemm_nt.choose", *plain))

    b.when(make, lambda e: made(e, target, layout, plain, n, k, entry), given)
    b.op(llvm.ReturnOp())
    return [function]


def made(b: Emitter, target: Target, layout: str, plain: Sequence[SSAValue], n: SSAValue,
         k: SSAValue, entry: SSAValue) -> None:
    """The entry's copy made, and the product run by the driver that packs B
    into it as it goes (`.given`); where it cannot be had, the plain kernel."""
    fresh = workspace(b, whole_floats(b, target, n, k))
    b.store(fresh, entry, 4)
    plain_kernel = "recir_gemm_nt.choose" if layout == "nt" else "recir_gemm_nn.packed"
    b.when(allocated(b, fresh), lambda e: call(e, f"recir_gemm_{layout}.given", *plain, fresh, 0),
           lambda e: call(e, plain_kernel, *plain))


def open_table(b: Emitter, ctx: SSAValue, sites: int, field: int = PACKED,
               fields: int = ENTRY, header: int = 1, after: int = 0
               ) -> tuple[SSAValue, SSAValue]:
    """A table of `header` fields (field 0: the count of entries), `sites`
    empty entries of `fields` i64 fields each and `after` more, all zeroed,
    on the function's stack, made the context's `field` (`packed`, or
    `row_logs`' table); returns it and the table it replaced."""
    table = b.alloca(header + fields * sites + after, i64)
    b.store(b.i64(sites), table, 0)
    b.each(header - 1 + fields * sites + after,
           lambda e, i: e.store(e.i64(0), table, e.add(i, 1)))
    slot = b.offset(ctx, field, i8)
    old = b.load(slot, 0, PTR)
    b.store(table, slot, 0)
    return table, old


def close_table(b: Emitter, ctx: SSAValue, table: SSAValue, old: SSAValue, sites: int
                ) -> None:
    """The table's copies freed, and the context's `packed` as it was."""
    b.each(sites, lambda e, i: release(e, e.load(table, e.add(e.mul(i, ENTRY), 1 + 4), PTR)))
    b.store(old, b.offset(ctx, PACKED, i8), 0)
