"""The backward products of a frontier, natively: `dX (+)= dY W` and `G += dY^T X`.

`smallgemm.nt` covers the forward `x @ W.T`; the backward reads W the other
way. A BLAS tuned for large products leaves most of a core's FMA rate
unused on these shapes (few rows). `recir_gemm_nn(m, n, k, A, lda, B, ldb,
C, ldc, accumulate)` computes C (+)= A B (row-major f32, A m x k, B k x n)
by broadcast and accumulate: a tile of 4 rows of A by 6 vectors of 16
columns of B keeps 24 of the 32 vector registers as accumulators; for each p
it broadcasts A[i, p] and loads B's row p once. Column panels of B run
outside, blocks of `DEPTH` rows of a panel next (128 x 96 floats fill L1's
48 KB), and every row tile of A passes over a block. The last vector of a
panel is masked: nothing outside the arrays is touched. `recir_gemm_tn`
takes A as a transpose (A[i, p] at i + p lda: dY^T for a weight gradient)
and runs the same tiles on a row-major copy of each 16-row group's block.
Both against the host's BLAS: `python bench/run.py smallgemm`.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

from recir.backend.array_address import data_address
from recir.backend.kernels.smallgemm import DECLARATIONS, LANES, MASK, VEC, function, lane_mask

NN_ROWS, NN_VECTORS = 4, 6  # a tile: A rows x B vectors of LANES columns
FEW_ROWS = 16  # weight gradients of fewer rows run on one thread (a classifier's)
# B's rows a block holds, the fastest of the sizes tried (`python bench/run.py smallgemm`)
DEPTH = {"nn": 128, "tn": 64}
STORE = f"declare void @llvm.masked.store.v{LANES}f32.p0({VEC}, ptr, i32, {MASK})"


def tile(rows: int, vectors: int) -> str:
    """C[i, :] (+)= sum_p A[i, p] B[p, :] for `rows` rows (A's, lda apart)
    and `vectors` vectors of columns, the last one `%lanes` wide."""
    pairs = [(i, j) for i in range(rows) for j in range(vectors)]
    last = vectors - 1
    entry = [*lane_mask("%lanes"), "%some = icmp sgt i64 %k, 0",
             "br i1 %some, label %loop, label %tail"]
    loop = ["%p = phi i64 [0, %entry], [%p.next, %loop]"]
    loop += [f"%a{i}_{j} = phi {VEC} [zeroinitializer, %entry], [%b{i}_{j}, %loop]"
             for i, j in pairs]
    loop += ["%brow = mul i64 %p, %ldb", "%bp = getelementptr float, ptr %B, i64 %brow"]
    for j in range(vectors):
        loop.append(f"%bq{j} = getelementptr float, ptr %bp, i64 {j * LANES}")
        loop.append(f"%bv{j} = call {VEC} @llvm.masked.load.v{LANES}f32.p0(ptr %bq{j}, i32 4, "
                    f"{MASK} %mask, {VEC} zeroinitializer)" if j == last else
                    f"%bv{j} = load {VEC}, ptr %bq{j}, align 4")
    for i in range(rows):
        loop += [f"%ao{i} = mul i64 %lda, {i}", f"%ai{i} = add i64 %ao{i}, %p",
                 f"%aq{i} = getelementptr float, ptr %A, i64 %ai{i}",
                 f"%as{i} = load float, ptr %aq{i}, align 4",
                 f"%ah{i} = insertelement {VEC} poison, float %as{i}, i64 0",
                 f"%av{i} = shufflevector {VEC} %ah{i}, {VEC} poison, "
                 f"<{LANES} x i32> zeroinitializer"]
    loop += [f"%b{i}_{j} = call {VEC} @llvm.fma.v{LANES}f32({VEC} %av{i}, {VEC} %bv{j}, "
             f"{VEC} %a{i}_{j})" for i, j in pairs]
    loop += ["%p.next = add i64 %p, 1", "%more = icmp slt i64 %p.next, %k",
             "br i1 %more, label %loop, label %tail"]
    tail = [f"%s{i}_{j} = phi {VEC} [zeroinitializer, %entry], [%b{i}_{j}, %loop]"
            for i, j in pairs]
    tail.append("%add = icmp ne i64 %accumulate, 0")
    for i, j in pairs:
        tail += [f"%co{i}_{j} = mul i64 %ldc, {i}", f"%ci{i}_{j} = add i64 %co{i}_{j}, {j * LANES}",
                 f"%cp{i}_{j} = getelementptr float, ptr %C, i64 %ci{i}_{j}",
                 f"%cm{i}_{j} = select i1 %add, {MASK} %mask, {MASK} zeroinitializer"
                 if j == last else
                 f"%cm{i}_{j} = select i1 %add, {MASK} {ones()}, {MASK} zeroinitializer",
                 f"%cv{i}_{j} = call {VEC} @llvm.masked.load.v{LANES}f32.p0(ptr %cp{i}_{j}, "
                 f"i32 4, {MASK} %cm{i}_{j}, {VEC} zeroinitializer)",
                 f"%r{i}_{j} = fadd {VEC} %cv{i}_{j}, %s{i}_{j}"]
        tail.append(f"call void @llvm.masked.store.v{LANES}f32.p0({VEC} %r{i}_{j}, "
                    f"ptr %cp{i}_{j}, i32 4, {MASK} %mask)" if j == last else
                    f"store {VEC} %r{i}_{j}, ptr %cp{i}_{j}, align 4")
    tail.append("ret void")
    return function(f"internal void @nn_{rows}_{vectors}(ptr %A, i64 %lda, ptr %B, i64 %ldb, "
                    "ptr %C, i64 %ldc, i64 %k, i64 %lanes, i64 %accumulate)",
                    [("entry", entry), ("loop", loop), ("tail", tail)])


def ones() -> str:
    return "<" + ", ".join(["i1 true"] * LANES) + ">"


def panel_lines(o: str) -> list[str]:
    """The columns of the panel at `o`: `%v` vectors, the last `%lanes` wide."""
    width = NN_VECTORS * LANES
    return [f"%o.left = sub i64 %n, {o}", f"%o.few = icmp slt i64 %o.left, {width}",
            f"%cols = select i1 %o.few, i64 %o.left, i64 {width}",
            f"%v.up = add i64 %cols, {LANES - 1}", f"%v = udiv i64 %v.up, {LANES}",
            f"%v.full = mul i64 %v, {LANES}", "%v.spare = sub i64 %v.full, %cols",
            f"%lanes = sub i64 {LANES}, %v.spare"]


def depth_lines(depth: int) -> list[str]:
    """`%kb`, the rows of B's block at `%q`, and `%acc`: add into C after
    the first block, or if asked."""
    return ["%q.left = sub i64 %k, %q", f"%q.few = icmp slt i64 %q.left, {depth}",
            f"%kb = select i1 %q.few, i64 %q.left, i64 {depth}",
            "%q.on = icmp sgt i64 %q, 0", "%q.acc = zext i1 %q.on to i64",
            "%acc = or i64 %accumulate, %q.acc"]


def tile_calls(next_label: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """The switch on `%code` (rows * 16 + vectors) and a block per tile
    calling it on `%ap` (`%ld` apart), `%bp` and `%cp`."""
    tiles = [(r, v) for r in range(1, NN_ROWS + 1) for v in range(1, NN_VECTORS + 1)]
    cases = " ".join(f"i64 {r * 16 + v}, label %t{r}_{v}" for r, v in tiles)
    calls = [(f"t{r}_{v}", [f"call void @nn_{r}_{v}(ptr %ap, i64 %ld, ptr %bp, i64 %ldb, "
                            "ptr %cp, i64 %ldc, i64 %kb, i64 %lanes, i64 %acc)",
                            f"br label %{next_label}"]) for r, v in tiles]
    return f"switch i64 %code, label %{next_label} [ {cases} ]", calls


def row_tile_lines(i: str) -> list[str]:
    """`%r` rows from `i`, `%cp` their C at panel `%o`, `%code` the tile."""
    return [f"%i.left = sub i64 %m, {i}", f"%i.few = icmp slt i64 %i.left, {NN_ROWS}",
            f"%r = select i1 %i.few, i64 %i.left, i64 {NN_ROWS}",
            f"%co = mul i64 {i}, %ldc", "%co2 = add i64 %co, %o",
            "%cp = getelementptr float, ptr %C, i64 %co2",
            "%r16 = mul i64 %r, 16", "%code = add i64 %r16, %v"]


SIGNATURE = ("(i64 %m, i64 %n, i64 %k, ptr %A, i64 %lda, ptr %B, i64 %ldb, ptr %C, i64 %ldc, "
             "i64 %accumulate)")


def nn_driver() -> str:
    """`recir_gemm_nn`: panels of NN_VECTORS vectors of B's columns outside,
    blocks of DEPTH rows of a panel next, tiles of NN_ROWS rows of A inside."""
    depth = DEPTH["nn"]
    switch, calls = tile_calls("inner.next")
    blocks = [
        ("entry", ["%e1 = icmp sgt i64 %n, 0", "%e2 = icmp sgt i64 %m, 0",
                   "%go = and i1 %e1, %e2", "br i1 %go, label %outer, label %done"]),
        ("outer", ["%o = phi i64 [0, %entry], [%o.next, %outer.next]", *panel_lines("%o"),
                   "br label %block"]),
        ("block", ["%q = phi i64 [0, %outer], [%q.next, %block.next]", *depth_lines(depth),
                   "%bo = mul i64 %q, %ldb", "%bo2 = add i64 %bo, %o",
                   "%bp = getelementptr float, ptr %B, i64 %bo2", "br label %inner"]),
        ("inner", ["%i = phi i64 [0, %block], [%i.next, %inner.next]", *row_tile_lines("%i"),
                   "%ao = mul i64 %i, %lda", "%ao2 = add i64 %ao, %q",
                   "%ap = getelementptr float, ptr %A, i64 %ao2", "%ld = add i64 %lda, 0",
                   switch]),
        *calls,
        ("inner.next", [f"%i.next = add i64 %i, {NN_ROWS}", "%i.more = icmp slt i64 %i.next, %m",
                        "br i1 %i.more, label %inner, label %block.next"]),
        ("block.next", [f"%q.next = add i64 %q, {depth}", "%q.more = icmp slt i64 %q.next, %k",
                        "br i1 %q.more, label %block, label %outer.next"]),
        ("outer.next", [f"%o.next = add i64 %o, {NN_VECTORS * LANES}",
                        "%o.more = icmp slt i64 %o.next, %n",
                        "br i1 %o.more, label %outer, label %done"]),
        ("done", ["ret void"]),
    ]
    return function(f"void @recir_gemm_nn{SIGNATURE}", blocks)


def tn_driver() -> str:
    """`recir_gemm_tn`, A[i, p] at i + p lda: blocks of DEPTH rows of B
    outside; for each group of LANES rows of A, its block copied row-major
    into `%buf` (so the tiles broadcast from separate rows, as in nn: four
    adjacent A elements were loaded as one vector and shuffled, which was
    slower), then every panel of B's block and the group's tiles."""
    depth = DEPTH["tn"]
    switch, calls = tile_calls("tile.next")
    pack = []
    for t in range(LANES):
        pack += [f"%el{t} = extractelement {VEC} %row, i64 {t}",
                 f"%dt{t} = getelementptr float, ptr %dst, i64 {t * depth}",
                 f"store float %el{t}, ptr %dt{t}, align 4"]
    blocks = [
        ("entry", [f"%buf = alloca [{depth * LANES} x float], align 64",
                   "%e1 = icmp sgt i64 %n, 0", "%e2 = icmp sgt i64 %m, 0",
                   "%go = and i1 %e1, %e2", "br i1 %go, label %block, label %done"]),
        ("block", ["%q = phi i64 [0, %entry], [%q.next, %block.next]", *depth_lines(depth),
                   "br label %group"]),
        ("group", ["%g = phi i64 [0, %block], [%g.next, %group.next]",
                   "%g.left = sub i64 %m, %g", f"%g.few = icmp slt i64 %g.left, {LANES}",
                   f"%g.rows = select i1 %g.few, i64 %g.left, i64 {LANES}",
                   *lane_mask("%g.rows"), "%kb.some = icmp sgt i64 %kb, 0",
                   "br i1 %kb.some, label %pack, label %outer"]),
        ("pack", ["%pp = phi i64 [0, %group], [%pp.next, %pack]",
                  "%pq = add i64 %q, %pp", "%po = mul i64 %pq, %lda", "%po2 = add i64 %po, %g",
                  "%src = getelementptr float, ptr %A, i64 %po2",
                  f"%row = call {VEC} @llvm.masked.load.v{LANES}f32.p0(ptr %src, i32 4, "
                  f"{MASK} %mask, {VEC} zeroinitializer)",
                  "%dst = getelementptr float, ptr %buf, i64 %pp", *pack,
                  "%pp.next = add i64 %pp, 1", "%pp.more = icmp slt i64 %pp.next, %kb",
                  "br i1 %pp.more, label %pack, label %outer"]),
        ("outer", ["%o = phi i64 [0, %pack], [0, %group], [%o.next, %outer.next]",
                   *panel_lines("%o"),
                   "%bo = mul i64 %q, %ldb", "%bo2 = add i64 %bo, %o",
                   "%bp = getelementptr float, ptr %B, i64 %bo2", "br label %tile"]),
        ("tile", ["%t = phi i64 [0, %outer], [%t.next, %tile.next]", "%i = add i64 %g, %t",
                  *row_tile_lines("%i"), f"%ao = mul i64 %t, {depth}",
                  "%ap = getelementptr float, ptr %buf, i64 %ao", f"%ld = add i64 {depth}, 0",
                  switch]),
        *calls,
        ("tile.next", [f"%t.next = add i64 %t, {NN_ROWS}",
                       "%t.more = icmp slt i64 %t.next, %g.rows",
                       "br i1 %t.more, label %tile, label %outer.next"]),
        ("outer.next", [f"%o.next = add i64 %o, {NN_VECTORS * LANES}",
                        "%o.more = icmp slt i64 %o.next, %n",
                        "br i1 %o.more, label %outer, label %group.next"]),
        ("group.next", [f"%g.next = add i64 %g, {LANES}", "%g.more = icmp slt i64 %g.next, %m",
                        "br i1 %g.more, label %group, label %block.next"]),
        ("block.next", [f"%q.next = add i64 %q, {depth}", "%q.more = icmp slt i64 %q.next, %k",
                        "br i1 %q.more, label %block, label %done"]),
        ("done", ["ret void"]),
    ]
    return function(f"void @recir_gemm_tn{SIGNATURE}", blocks)


def module_text(layout: str) -> str:
    parts = [DECLARATIONS, STORE]
    parts += [tile(r, v) for r in range(1, NN_ROWS + 1) for v in range(1, NN_VECTORS + 1)]
    parts.append(nn_driver() if layout == "nn" else tn_driver())
    return "\n\n".join(parts) + "\n"


I64, PTR = ctypes.c_int64, ctypes.c_void_p


@cache
def kernel(layout: str) -> Any:
    """`recir_gemm_nn` or `recir_gemm_tn` as a ctypes function; compiled on
    first use."""
    from recir.backend.engine import text_function

    return text_function(module_text(layout), f"recir_gemm_{layout}", ctypes.CFUNCTYPE(
        None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64))


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """a @ b (c += a @ b if `c` is given) for f32 matrices with contiguous
    rows, `a` also a transposed view of one."""
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n), np.float32) if c is None else c
    layout, lda = ("nn", a.strides[0] // 4) if a.strides[1] == 4 else ("tn", a.strides[1] // 4)
    kernel(layout)(m, n, k, data_address(a), lda, data_address(b), b.strides[0] // 4,
                   data_address(out), out.strides[0] // 4, int(c is not None))
    return out


def add_outer_at(g: int, m: int, n: int, dy: int, ldy: int, x: int, ldx: int, k: int,
                 threads: int = 1) -> None:
    """G (m x n, row-major at `g`) += DY^T X over k rows of DY (m floats each,
    `ldy` apart) and of X (n floats, `ldx` apart), all f32 at addresses: the
    tn kernel, on a team of `threads` cut by G's rows (`split.py`)."""
    from recir.backend.kernels import split

    if k <= 0:
        return
    if threads > 1 and m >= FEW_ROWS and split.available():
        fn = split.address(kernel("tn"))
        split.run([[split.NN, fn, hi - lo, n, k, dy + 4 * lo, ldy, x, ldx, g + 4 * lo * n, n, 1]
                   for lo, hi in split.ranges(m, threads, 16)], threads)
        return
    kernel("tn")(m, n, k, dy, ldy, x, ldx, g, n, 1)


def add_outer(acc: np.ndarray, dy: np.ndarray, x: np.ndarray, threads: int = 1) -> None:
    """acc += dy.T @ x for a frontier: dy (n, m), x (n, k), acc (m, k), in
    place (NumPy's `acc += dy.T @ x` writes a temporary as big as the weight
    matrix and reads it back), by the tn kernel reading dy as a transpose
    (`python bench/run.py smallgemm` compares it with OpenBLAS); on
    `threads` > 1 cut by acc's rows across a team (`split.py`)."""
    n, m = dy.shape
    k = x.shape[1]
    if acc.dtype != np.float32 or not acc.flags.c_contiguous or acc.shape != (m, k) or (
            x.shape[0] != n):
        acc += dy.T @ x
        return
    dy = np.ascontiguousarray(dy, np.float32)
    x = np.ascontiguousarray(x, np.float32)
    add_outer_at(acc.ctypes.data, m, k, dy.ctypes.data, m, x.ctypes.data, k, n, threads)


def nn_parts(m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int, c: int, ldc: int,
             accumulate: int, parts: int) -> list[list[int]]:
    """`split.py` records of `recir_gemm_nn` for C (+)= A B (f32 at addresses),
    cut by C's columns into `parts` shares (multiples of 16)."""
    from recir.backend.kernels import split

    fn = split.address(kernel("nn"))
    return [[split.NN, fn, m, hi - lo, k, a, lda, b + 4 * lo, ldb, c + 4 * lo, ldc, accumulate]
            for lo, hi in split.ranges(n, parts, 16)]
