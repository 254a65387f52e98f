"""The backward product `dX (+)= dY W` of a frontier, natively.

`smallgemm.nt` covers the forward `x @ W.T`; the backward reads W the other
way. OpenBLAS runs its AVX2 kernels here (this environment sets
`OPENBLAS_CORETYPE=Haswell`): 70-130 GFLOP/s a core on these shapes, where
a loop of AVX-512 FMAs reaches 270. `recir_gemm_nn(m, n, k, A, lda, B, ldb,
C, ldc, accumulate)` computes C (+)= A B (row-major f32, A m x k, B k x n)
by broadcast and accumulate: a tile of 4 rows of A by 6 vectors of 16
columns of B keeps 24 of the 32 vector registers as accumulators; for each p
it broadcasts A[i, p] and loads B's row p once. Column panels of B run
outside, blocks of `DEPTH` rows of a panel next (128 x 96 floats fill L1's
48 KB), and every row tile of A passes over a block. The last vector of a
panel is masked: nothing outside the arrays is touched. 165-210 GFLOP/s on
one core from 8 rows up, 1.5-2.8x OpenBLAS (`python bench/run.py
smallgemm`). `recir_gemm_tn` reads A as a transpose (A[i, p] at i + p lda),
for a classifier's weight gradient `dY^T X` (5 x 256 over 994 rows: 33 us
against OpenBLAS's 67); for big weight gradients it only matched OpenBLAS
(123 against 131 GFLOP/s), which keeps them.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

from recir.batching.smallgemm import DECLARATIONS, LANES, MASK, VEC, function, lane_mask

NN_ROWS, NN_VECTORS = 4, 6  # a tile: A rows x B vectors of LANES columns
DEPTH = {"nn": 128, "tn": 256}  # nn: 64 was 2-5% slower; tn: 16-64 slower still
STORE = f"declare void @llvm.masked.store.v{LANES}f32.p0({VEC}, ptr, i32, {MASK})"


def tile(layout: str, rows: int, vectors: int) -> str:
    """C[i, :] (+)= sum_p A[i, p] B[p, :] for `rows` rows and `vectors`
    vectors of columns, the last one `%lanes` wide; A[i, p] is at
    i * lda + p (`layout` "nn") or i + p * lda ("tn": A is a transpose)."""
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
    step, skip = ("%lda", "1") if layout == "nn" else ("1", "%lda")
    loop.append(f"%apo = mul i64 %p, {skip}")
    for i in range(rows):
        loop += [f"%ao{i} = mul i64 {step}, {i}", f"%ai{i} = add i64 %ao{i}, %apo",
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
    return function(f"internal void @{layout}_{rows}_{vectors}(ptr %A, i64 %lda, ptr %B, i64 %ldb, "
                    "ptr %C, i64 %ldc, i64 %k, i64 %lanes, i64 %accumulate)",
                    [("entry", entry), ("loop", loop), ("tail", tail)])


def ones() -> str:
    return "<" + ", ".join(["i1 true"] * LANES) + ">"


def driver(layout: str) -> str:
    """`recir_gemm_{layout}(m, n, k, A, lda, B, ldb, C, ldc, accumulate)`: panels
    of NN_VECTORS vectors of B's columns outside, tiles of NN_ROWS rows of A
    inside; each tile's function picked by a switch on its size."""
    width = NN_VECTORS * LANES
    tiles = [(r, v) for r in range(1, NN_ROWS + 1) for v in range(1, NN_VECTORS + 1)]
    cases = " ".join(f"i64 {r * 16 + v}, label %t{r}_{v}" for r, v in tiles)
    blocks = [
        ("entry", ["%e1 = icmp sgt i64 %n, 0", "%e2 = icmp sgt i64 %m, 0",
                   "%go = and i1 %e1, %e2", "br i1 %go, label %outer, label %done"]),
        ("outer", ["%o = phi i64 [0, %entry], [%o.next, %outer.next]",
                   "%o.left = sub i64 %n, %o", f"%o.few = icmp slt i64 %o.left, {width}",
                   f"%cols = select i1 %o.few, i64 %o.left, i64 {width}",
                   f"%v.up = add i64 %cols, {LANES - 1}", f"%v = udiv i64 %v.up, {LANES}",
                   f"%v.full = mul i64 %v, {LANES}", "%v.spare = sub i64 %v.full, %cols",
                   f"%lanes = sub i64 {LANES}, %v.spare",
                   "br label %block"]),
        ("block", ["%q = phi i64 [0, %outer], [%q.next, %block.next]",
                   "%q.left = sub i64 %k, %q", f"%q.few = icmp slt i64 %q.left, {DEPTH[layout]}",
                   f"%kb = select i1 %q.few, i64 %q.left, i64 {DEPTH[layout]}",
                   "%q.on = icmp sgt i64 %q, 0", "%q.acc = zext i1 %q.on to i64",
                   "%acc = or i64 %accumulate, %q.acc",
                   "%bo = mul i64 %q, %ldb", "%bo2 = add i64 %bo, %o",
                   "%bp = getelementptr float, ptr %B, i64 %bo2", "br label %inner"]),
        ("inner", ["%i = phi i64 [0, %block], [%i.next, %inner.next]",
                   "%i.left = sub i64 %m, %i", f"%i.few = icmp slt i64 %i.left, {NN_ROWS}",
                   f"%r = select i1 %i.few, i64 %i.left, i64 {NN_ROWS}",
                   *(["%ao = mul i64 %i, %lda", "%ao2 = add i64 %ao, %q"] if layout == "nn" else
                     ["%aq = mul i64 %q, %lda", "%ao2 = add i64 %aq, %i"]),
                   "%ap = getelementptr float, ptr %A, i64 %ao2",
                   "%co = mul i64 %i, %ldc", "%co2 = add i64 %co, %o",
                   "%cp = getelementptr float, ptr %C, i64 %co2",
                   "%r16 = mul i64 %r, 16", "%code = add i64 %r16, %v",
                   f"switch i64 %code, label %inner.next [ {cases} ]"]),
    ]
    for r, v in tiles:
        blocks.append((f"t{r}_{v}", [f"call void @{layout}_{r}_{v}(ptr %ap, i64 %lda, ptr %bp, "
                                     "i64 %ldb, ptr %cp, i64 %ldc, i64 %kb, i64 %lanes, "
                                     "i64 %acc)", "br label %inner.next"]))
    blocks += [
        ("inner.next", [f"%i.next = add i64 %i, {NN_ROWS}", "%i.more = icmp slt i64 %i.next, %m",
                        "br i1 %i.more, label %inner, label %block.next"]),
        ("block.next", [f"%q.next = add i64 %q, {DEPTH[layout]}",
                        "%q.more = icmp slt i64 %q.next, %k",
                        "br i1 %q.more, label %block, label %outer.next"]),
        ("outer.next", [f"%o.next = add i64 %o, {width}", "%o.more = icmp slt i64 %o.next, %n",
                        "br i1 %o.more, label %outer, label %done"]),
        ("done", ["ret void"]),
    ]
    return function(f"void @recir_gemm_{layout}(i64 %m, i64 %n, i64 %k, ptr %A, i64 %lda, "
                    "ptr %B, i64 %ldb, ptr %C, i64 %ldc, i64 %accumulate)", blocks)


def module_text(layout: str) -> str:
    parts = [DECLARATIONS, STORE]
    parts += [tile(layout, r, v) for r in range(1, NN_ROWS + 1) for v in range(1, NN_VECTORS + 1)]
    parts.append(driver(layout))
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
    kernel(layout)(m, n, k, a.__array_interface__["data"][0], lda,
                   b.__array_interface__["data"][0], b.strides[0] // 4,
                   out.__array_interface__["data"][0], out.strides[0] // 4, int(c is not None))
    return out
