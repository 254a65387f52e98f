"""Matrix-matrix kernels in the llvm dialect, sized for the host CPU.

One function per layout, each `(m, n, k, A, lda, B, ldb, C, ldc, accumulate)`
on row-major f32 (C is m x n, `ldc` floats apart; C = A B, or C += A B where
`accumulate` is not 0):

- `recir_gemm_nn`: A is m x k, B is k x n (the backward's `dX = dY W`,
  tmath.matmul);
- `recir_gemm_tn`: A[i, p] at A + i + p lda (a transpose: `dY^T X`, a
  weight's gradient);
- `recir_gemm_nt`: B[p, j] at B + j ldb + p (`x W^T`, the forward),
  and `recir_gemm_nt_bias(..., C, ldc, bias)`: C = A B^T + the row `bias`
  in every row (a matvec over rows plus its bias, with no pass over C to
  copy the bias in: the tiles start from it).

nn and tn broadcast A's elements against vectors of B's row: a register tile
of `rows` rows of C by `vectors` vectors (`gemm_tiles.py`) keeps its
accumulators over a block of `depth` steps of k. B's block of `depth` rows
by the tile's columns is copied first into a contiguous buffer (most of L1:
B's own rows, `ldb` floats apart, fall into few L1 sets), and the tiles of a
block of A's rows pass over it (the block's rows of A and of C in L2), each
tile bringing a share of the next block of B into L2 as it goes where B is
packed whole (larger than L2 at a frontier's shapes, so it would come from
L3). Where several blocks of rows reuse B, all of it is packed once into a
heap workspace (or into a weight's copy for all a call's heights,
`gemm_cached.py`), and where more than one tile of rows reads a block of A,
the block is packed tile by tile (`gemm_packing.py`): a tile's elements of a
step side by side, which its broadcasts read at constant offsets from one
pointer (`.packed_a<rows>`), with no address arithmetic per row of A. A
tile's loop takes two steps of k an iteration, the second's loads at
constant offsets from the first's. nt does the same on a transposed copy of
B where there are enough rows of A to repay the copy; with fewer (or few
rows of B) it takes dot products along k (`gemm_dots.py`; `nt_driver`
compares the two costs). The last vector of a row is masked: no load or
store leaves the arrays, whatever m, n, k and the leading dimensions.
Everything is built with the loop builder (`scf.for`, `scf.if`) and lowered
to the llvm dialect (`llvm_functions.py`).

Sizes: `gemm_target.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr, i1, i64
from xdsl.ir import Attribute, SSAValue

from recir.passes.frame_buffers import allocated, declare_heap
from recir.passes.gemm_cached import CACHED, cached_functions, cached_name
from recir.passes.gemm_dots import SIGNATURE, dot_driver, dot_tile, nt_driver, nt_entries
from recir.passes.gemm_packing import (
    block_rows,
    k_blocks,
    pack_a_tiles,
    pack_function,
    release,
    workspace,
)
from recir.passes.gemm_target import Target, host_target
from recir.passes.gemm_tiles import CACHE_LINE_FLOATS, broadcast_tile
from recir.passes.llvm_functions import (
    accumulating,
    at_least_zero,
    call,
    ceil_div,
    dispatch,
    lower_to_llvm,
    new_function,
)
from recir.passes.loop_builder import PTR, Emitter, Index, VectorEmitter

LAYOUTS = ("nn", "tn", "nt")


def a_at(b: Emitter, layout: str, a: SSAValue, lda: SSAValue, i: Index, p: Index) -> SSAValue:
    """A[i, p]: row-major, or a transpose (tn)."""
    return b.offset(a, b.add(b.mul(i, lda), p) if layout != "tn" else b.add(i, b.mul(p, lda)))


def b_at(b: Emitter, layout: str, bm: SSAValue, ldb: SSAValue, p: Index, j: Index
         ) -> SSAValue:
    """B[p, j]: row-major, or a transpose (nt)."""
    return b.offset(bm, b.add(b.mul(p, ldb), j) if layout != "nt" else b.add(b.mul(j, ldb), p))


def broadcast_driver(target: Target, layout: str, name: str, biased: bool = False,
                     given: bool = False) -> llvm.FuncOp:
    """Blocks of rows of A (as many as L2 needs, as even as tiles allow);
    in each, blocks of k (as many as `depth` needs, as even as lanes allow);
    in each, panels of `width` columns of B, packed, then every tile of
    rows. Where more than one block of rows reuses B, the first block packs
    each (block of k, panel) into a buffer of its own in a heap workspace
    (`gemm_packing.workspace`) as it uses it, and the later blocks read it
    there. Where m is more than a tile of rows, each block of A is packed
    too, tile by tile, into the workspace, and the tiles read it there
    (`.packed_a<rows>`). Else (or if the workspace cannot be had)
    each block packs each panel into a stack buffer as it uses it.
    nn and tn read B in place, each tile of rows across all panels (C then
    streams row by row), where a packed block would serve one tile of rows
    only (m <= rows) or B's block fits half of L1 anyway (few steps of k: a
    weight's gradient over few rows). `biased`: an argument after the
    layouts', a row of n (or null), that C's rows start from instead of C or
    zeros. `given`: two arguments more, a buffer for all of B packed
    (`gemm_packing.whole_floats`: a weight's copy, `gemm_cached`), which
    every block of rows reads instead of a workspace, and whether it holds
    B packed already (else the first block of rows packs B there, as into
    its workspace)."""
    return BroadcastDriver(target, layout, name, biased, given).function


class BroadcastDriver:
    """`broadcast_driver`'s function: its sizes and workspace, then a
    method per level of its blocks."""

    def __init__(self, target: Target, layout: str, name: str, biased: bool,
                 given: bool = False):
        self.target, self.layout = target, layout
        rows, width, depth = self.rows, self.width, self.depth = (
            target.tile[0], target.width, target.depth)
        self.function, b, args = new_function(name, SIGNATURE + [PTR] * biased
                                              + [PTR, i64] * given)
        m, n, k, self.a, self.lda, self.bm, self.ldb, self.c, self.ldc, self.accumulate = \
            args[:10]
        self.bias = args[10] if biased else None
        # the copy (never null), and whether it holds B packed already
        self.given = (args[-2], b.compare("ne", args[-1], 0)) if given else None
        self.buf = b.alloca(depth * width)
        m, n, k = self.m, self.n, self.k = at_least_zero(b, m, n, k)
        self.block = block = block_rows(b, target, m, n, k)
        self.steps, self.even = k_blocks(b, target, k)
        panels = self.panels = ceil_div(b, n, width)
        one_tile = self.one_tile = b.compare("sle", m, rows)
        self.chunk = chunk = depth * width
        reused = b.value(arith.AndIOp(b.compare("sgt", m, block), b.compare("sgt", k, 0)))
        if self.given is not None:  # B goes to the copy, not to a workspace
            reused = b.const(0, i1)
        b_floats = b.value(arith.SelectOp(reused, b.mul(b.mul(self.steps, panels), chunk),
                                          b.i64(0)))
        # A's blocks are packed tile by tile where more than one tile of rows
        # reads them: a tile's elements of a step side by side, at constant
        # offsets from one pointer (tn's rows of a step, dY's rows, far apart)
        wanted = b.value(arith.XOrIOp(one_tile, b.const(1, i1)))
        a_floats = b.value(arith.SelectOp(wanted, b.mul(block, depth), b.i64(0)))
        self.space = space = workspace(b, b.add(b_floats, a_floats))
        have = allocated(b, space)
        self.whole_b = b.value(arith.AndIOp(have, reused))
        self.packed_b = space
        if self.given is not None:
            self.whole_b = b.const(1, i1)
            self.packed_b = self.given[0]
        self.a_tiles = b.value(arith.AndIOp(have, wanted))
        self.packed_a = b.offset(space, b_floats)
        # A's strides in place (across rows, along k)
        self.plain = (self.lda, b.i64(1)) if layout != "tn" else (b.i64(1), self.lda)
        b.each(ceil_div(b, m, block), self.row_block)
        release(b, space)
        b.op(llvm.ReturnOp())

    def chunk_at(self, e: Emitter, kb: SSAValue, jp: SSAValue) -> SSAValue:
        return e.offset(self.packed_b, e.mul(e.add(e.mul(kb, self.panels), jp), self.chunk))

    def row_block(self, s: VectorEmitter, ib: SSAValue) -> None:
        i0 = s.mul(ib, self.block)
        mb = s.min(self.block, s.sub(self.m, i0))
        s.each(self.steps, lambda d, kb: self.depth_block(d, i0, mb, kb))

    def depth_block(self, s: VectorEmitter, i0: SSAValue, mb: SSAValue, kb: SSAValue
                    ) -> None:
        p0 = s.mul(kb, self.even)
        kc = s.min(self.even, s.sub(self.k, p0))
        later = s.compare("sgt", kb, 0)
        add, from_bias, ldbase = accumulating(s, self.accumulate, later), None, self.ldc
        if self.bias is not None:  # the first block of k starts from the bias row
            from_bias = s.value(arith.AndIOp(allocated(s, self.bias),
                                             s.value(arith.XOrIOp(later, s.const(1, i1)))))
            add = s.value(arith.SelectOp(from_bias, s.i64(1), add))
            ldbase = s.value(arith.SelectOp(from_bias, s.i64(0), self.ldc))
        at = (i0, mb, p0, kc, add, kb, from_bias, ldbase)

        def all_packed(e: VectorEmitter) -> None:
            e.when(self.a_tiles, lambda f: pack_a_tiles(
                f, self.target, self.layout, a_at(f, self.layout, self.a, self.lda, i0, p0),
                self.lda, mb, kc, self.packed_a))
            e.each(self.panels, lambda f, jp: self.packed(f, at, jp))

        if self.layout == "nt":
            all_packed(s)
            return
        fits = s.compare("sle", s.mul(s.mul(kc, self.n), 4), self.target.l1_bytes // 2)
        direct = s.value(arith.AndIOp(s.value(arith.OrIOp(self.one_tile, fits)),
                                      s.value(arith.XOrIOp(self.whole_b, s.const(1, i1)))))
        s.when(direct, lambda e: self.in_place(e, at), all_packed)

    def tile(self, e: Emitter, kind: str, count: int, i: Index, j0: Index, at,
             source: SSAValue, stride: Index, bias_row: SSAValue | None = None) -> None:
        i0, _, p0, kc, add, _, from_bias, ldbase = at
        cols = e.min(self.width, e.sub(self.n, j0))
        tile_of_c = e.offset(self.c, e.add(e.mul(i, self.ldc), j0))
        base = tile_of_c
        if from_bias is not None and bias_row is not None:
            base = e.value(arith.SelectOp(from_bias, bias_row, base))
        rows_of_a = a_at(e, self.layout, self.a, self.lda, i, p0)
        rest = (*self.plain, source, stride, tile_of_c, self.ldc, kc, cols, add, base, ldbase)
        if kind != "tile":
            call(e, f"recir_gemm_{self.layout}.{kind}{count}", rows_of_a, *rest)
            return
        ahead = self.ahead(e, source, i, i0, kc)
        # A's tile packed (its rows side by side a step), else in place
        tile_of_a = e.offset(self.packed_a, e.mul(e.sub(i, i0), self.depth))
        e.when(self.a_tiles, lambda f: call(f, f"recir_gemm_{self.layout}.packed_a{count}",
                                            tile_of_a, *rest, ahead),
               lambda f: call(f, f"recir_gemm_{self.layout}.tile{count}", rows_of_a, *rest,
                              ahead))

    def ahead(self, e: Emitter, panel: SSAValue, i: Index, i0: Index, kc: SSAValue
              ) -> SSAValue:
        """Where a tile prefetches into L2, a line a step: where B is packed
        whole (a workspace or a weight's copy, larger than L2 at a
        frontier's shapes), the block of B after `panel` (the next one
        read), its lines shared among the first tiles of rows, so that it
        comes from L2, not L3, to the first tile that reads it; else (a panel
        packed in place) the panel itself."""
        lines_per_step = max(self.width // CACHE_LINE_FLOATS, 1)  # SSE: a step under a line
        share = e.value(arith.RemSIOp(e.value(arith.DivSIOp(e.sub(i, i0), e.i64(self.rows))),
                                      e.i64(lines_per_step)))
        nxt = e.offset(panel, e.add(self.chunk, e.mul(e.mul(share, kc), CACHE_LINE_FLOATS)))
        return e.value(arith.SelectOp(self.whole_b, nxt, panel))

    def row_tiles(self, t: Emitter, at, each) -> None:
        """`each(e, i, count)` for the tiles of rows of the block, the last partial."""
        rows, (i0, mb) = self.rows, at[:2]
        full = t.value(arith.DivSIOp(mb, t.i64(rows)))
        t.each(full, lambda e, q: each(e, e.add(i0, e.mul(q, rows)), rows))
        rest_at = t.add(i0, t.mul(full, rows))
        dispatch(t, t.sub(mb, t.mul(full, rows)), rows - 1, lambda e, n: each(e, rest_at, n))

    def packed(self, s: VectorEmitter, at, jp: SSAValue) -> None:
        p0, kc, kb = at[2], at[3], at[5]
        j0 = s.mul(jp, self.width)
        cols = s.min(self.width, s.sub(self.n, j0))
        # the first block of rows packs B (into the workspace, if it has
        # one, where the later blocks read it), each panel as it uses it
        panel = s.value(arith.SelectOp(self.whole_b, self.chunk_at(s, kb, jp), self.buf))
        first = s.value(arith.OrIOp(s.compare("eq", at[0], 0), s.value(
            arith.XOrIOp(self.whole_b, s.const(1, i1)))))
        if self.given is not None:  # the copy filled already: nothing to pack
            first = s.value(arith.AndIOp(first, s.value(arith.XOrIOp(self.given[1],
                                                                      s.const(1, i1)))))
        s.when(first, lambda e: call(e, f"recir_gemm_{self.layout}.pack", b_at(
            e, self.layout, self.bm, self.ldb, p0, j0), self.ldb, kc, cols, panel))
        bias_row = None if self.bias is None else s.offset(self.bias, j0)
        self.row_tiles(s, at, lambda e, i, count: self.tile(
            e, "tile", count, i, j0, at, panel, self.width, bias_row))

    def in_place(self, s: VectorEmitter, at) -> None:
        """Each tile of rows across every panel, reading B where it is."""
        def direct(f: Emitter, i: Index, count: int, j0: SSAValue) -> None:
            self.tile(f, "direct", count, i, j0, at,
                      b_at(f, self.layout, self.bm, self.ldb, at[2], j0), self.ldb)

        self.row_tiles(s, at, lambda e, i, count: e.each(
            self.panels, lambda f, jp: direct(f, i, count, f.mul(jp, self.width))))


# --- modules -------------------------------------------------------------------------


def kernel_functions(layout: str, target: Target) -> list[llvm.FuncOp]:
    """The functions of `recir_gemm_<layout>` (its tiles first), in the llvm dialect."""
    if layout == "nt":
        rows, cols = target.nt_tile
        made = [dot_tile(target, r, q) for r in range(1, rows + 1) for q in range(1, cols + 1)]
        made += [broadcast_tile(target, layout, r, packed_a=packed_a)
                 for r in range(1, target.tile[0] + 1) for packed_a in (False, True)]
        made.append(pack_function(target, layout))
        made += [dot_driver(target), broadcast_driver(target, layout, "recir_gemm_nt.packed",
                                                      biased=True),
                 broadcast_driver(target, layout, "recir_gemm_nt.given", biased=True,
                                  given=True),
                 nt_driver(target), *nt_entries()]
    else:
        made = [broadcast_tile(target, layout, r, direct, packed_a)
                for r in range(1, target.tile[0] + 1)
                for direct, packed_a in ((False, False), (True, False), (False, True))]
        made.append(pack_function(target, layout))
        made.append(broadcast_driver(target, layout, f"recir_gemm_{layout}.packed"))
        if layout in CACHED:  # nn: a weight's copy made and read by its own driver
            made.append(broadcast_driver(target, layout, f"recir_gemm_{layout}.given",
                                         given=True))
        public, b, args = new_function(f"recir_gemm_{layout}", SIGNATURE, private=False)
        call(b, f"recir_gemm_{layout}.packed", *args)
        b.op(llvm.ReturnOp())
        made.append(public)
    made += cached_functions(target, layout)
    return [lower_to_llvm(f) for f in made]


def gemm_module(layouts: Sequence[str] = LAYOUTS, target: Target | None = None) -> ModuleOp:
    target = target or host_target()
    module = ModuleOp([f for layout in layouts for f in kernel_functions(layout, target)])
    declare_heap(module)  # the allocator of the workspaces
    return module


def declare_in(module: ModuleOp, layout: str) -> str:
    """`recir_gemm_<layout>` declared in `module` (once), and the name to
    call: its code is the host's kernel object (`gemm_module`, compiled once
    per host), which an engine loads beside the module (`links`)."""
    return declare_linked(module, f"recir_gemm_{layout}", SIGNATURE, KERNELS)


# --- objects a module's engine loads beside it ----------------------------------------

LINKS = "recir.links"  # a module attribute: the compiled objects its code calls into
KERNELS, TEAMS = "gemm", "gemm-teams"  # the kernels; their team forms (`row_products`)


def declare_linked(module: ModuleOp, name: str, inputs: Sequence[Attribute], link: str
                   ) -> str:
    """An external declaration of `name` in `module` (once), and `link`
    recorded in its `LINKS`: the object that defines it."""
    if not any(isinstance(op, llvm.FuncOp) and op.sym_name.data == name for op in module.ops):
        module.body.blocks[0].add_op(llvm.FuncOp(name, llvm.LLVMFunctionType(list(inputs)),
                                                 llvm.LinkageAttr("external")))
    if link not in links(module):
        module.attributes[LINKS] = ArrayAttr([StringAttr(x) for x in [*links(module), link]])
    return name


def declare_bias_in(module: ModuleOp) -> str:
    """`recir_gemm_nt_bias` declared in `module` (once), as `declare_in`."""
    return declare_linked(module, "recir_gemm_nt_bias", [*SIGNATURE[:-1], PTR], KERNELS)


def entry_names() -> list[str]:
    """The kernel object's functions that modules call (`declare_in`,
    `declare_bias_in`, `packed_weights.with_packed`) or Python does
    (`compiled_gemm.kernel`)."""
    return [*(f"recir_gemm_{layout}" for layout in LAYOUTS), "recir_gemm_nt_bias",
            *(cached_name(layout) for layout in CACHED)]


def links(module: ModuleOp) -> list[str]:
    found = module.attributes.get(LINKS)
    return [x.data for x in found.data] if isinstance(found, ArrayAttr) else []
