"""The product of a few frontier rows with a weight matrix, natively.

A frontier high in a batch's trees has few rows (at h=256, batch 25, most of
an SST batch's heights have 1-30). OpenBLAS packs the whole weight for
every SGEMM, a cost such small products do not repay. `nt(x, w)` is the forward product `x @ w.T` (x: m rows of k, w: n rows
of k, row-major f32) as dot products: a tile of 4 rows of x by 6 rows of w
keeps 24 vector accumulators over k and reduces each once. The loops run
weight rows outside, so a tile of w stays in L1 while all of x passes. The k
tail is read with masked loads: nothing outside the arrays is touched. The
kernel is LLVM IR text (vector types and masked intrinsics, which tmath's
lowering does not model), compiled once and kept in the on-disk object cache.

Vectors are 16 lanes (AVX-512; LLVM splits them where the host has only
AVX2); 16 lanes with a 4 x 6 tile beat 8 lanes with a 4 x 3 one. How it
compares with the host's BLAS is measured by `python bench/run.py smallgemm`
(results in docs/benchmarks.md). The backward products are `gemm.py`'s.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

from recir.backend.array_address import data_address

LANES = 16  # f32 lanes of an AVX-512 register
NT_ROWS, NT_COLS = 4, 6  # nt's tile: X rows x W rows (24 of 32 AVX-512 registers)

VEC = f"<{LANES} x float>"
MASK = f"<{LANES} x i1>"
IOTA = "<" + ", ".join(f"i32 {i}" for i in range(LANES)) + ">"
DECLARATIONS = f"""
declare {VEC} @llvm.fma.v{LANES}f32({VEC}, {VEC}, {VEC})
declare {VEC} @llvm.masked.load.v{LANES}f32.p0(ptr, i32, {MASK}, {VEC})
declare float @llvm.vector.reduce.fadd.v{LANES}f32(float, {VEC})
"""


def lane_mask(count: str) -> list[str]:
    """`%mask`: the lanes below `count` (an i64 value) on."""
    return [f"%mask.n = trunc i64 {count} to i32",
            f"%mask.s = insertelement <{LANES} x i32> poison, i32 %mask.n, i64 0",
            f"%mask.v = shufflevector <{LANES} x i32> %mask.s, <{LANES} x i32> poison, "
            f"<{LANES} x i32> zeroinitializer",
            f"%mask = icmp ult <{LANES} x i32> {IOTA}, %mask.v"]


def row_pointers(prefix: str, base: str, stride: str, count: int) -> list[str]:
    """`%{prefix}{i}` = base + i * stride floats, for i < count."""
    lines = []
    for i in range(count):
        lines += [f"%{prefix}o{i} = mul i64 {stride}, {i}",
                  f"%{prefix}{i} = getelementptr float, ptr {base}, i64 %{prefix}o{i}"]
    return lines


def function(signature: str, blocks: list[tuple[str, list[str]]]) -> str:
    body = [f"define {signature} {{"]
    for label, lines in blocks:
        body.append(f"{label}:")
        body += [f"  {line}" for line in lines]
    return "\n".join(body + ["}"])


# --- nt: dot products -------------------------------------------------------

def nt_tile(rows: int, cols: int) -> str:
    """Y[i, j] = sum_p X[i, p] W[j, p] for a rows x cols tile."""
    pairs = [(i, j) for i in range(rows) for j in range(cols)]
    entry = [f"%k8 = and i64 %k, -{LANES}", *row_pointers("x", "%X", "%ldx", rows),
             *row_pointers("w", "%W", "%ldw", cols),
             "%some = icmp sgt i64 %k8, 0", "br i1 %some, label %loop, label %tail"]
    loop = ["%p = phi i64 [0, %entry], [%p.next, %loop]"]
    loop += [f"%a{i}_{j} = phi {VEC} [zeroinitializer, %entry], [%b{i}_{j}, %loop]"
             for i, j in pairs]
    for name, count in (("x", rows), ("w", cols)):
        for i in range(count):
            loop += [f"%{name}p{i} = getelementptr float, ptr %{name}{i}, i64 %p",
                     f"%{name}v{i} = load {VEC}, ptr %{name}p{i}, align 4"]
    loop += [f"%b{i}_{j} = call {VEC} @llvm.fma.v{LANES}f32({VEC} %xv{i}, {VEC} %wv{j}, "
             f"{VEC} %a{i}_{j})" for i, j in pairs]
    loop += [f"%p.next = add i64 %p, {LANES}", "%more = icmp slt i64 %p.next, %k8",
             "br i1 %more, label %loop, label %tail"]
    tail = [f"%c{i}_{j} = phi {VEC} [zeroinitializer, %entry], [%b{i}_{j}, %loop]"
            for i, j in pairs]
    tail += ["%rest = sub i64 %k, %k8", *lane_mask("%rest")]
    for name, count in (("x", rows), ("w", cols)):
        for i in range(count):
            tail += [f"%{name}q{i} = getelementptr float, ptr %{name}{i}, i64 %k8",
                     f"%{name}t{i} = call {VEC} @llvm.masked.load.v{LANES}f32.p0(ptr %{name}q{i}, "
                     f"i32 4, {MASK} %mask, {VEC} zeroinitializer)"]
    for i, j in pairs:
        tail += [f"%d{i}_{j} = call {VEC} @llvm.fma.v{LANES}f32({VEC} %xt{i}, {VEC} %wt{j}, "
                 f"{VEC} %c{i}_{j})",
                 f"%s{i}_{j} = call reassoc float @llvm.vector.reduce.fadd.v{LANES}f32(float -0.0, "
                 f"{VEC} %d{i}_{j})",
                 f"%yo{i}_{j} = mul i64 %ldy, {i}", f"%yi{i}_{j} = add i64 %yo{i}_{j}, {j}",
                 f"%yp{i}_{j} = getelementptr float, ptr %Y, i64 %yi{i}_{j}",
                 f"store float %s{i}_{j}, ptr %yp{i}_{j}, align 4"]
    tail.append("ret void")
    return function(f"internal void @nt_{rows}_{cols}(ptr %X, i64 %ldx, ptr %W, i64 %ldw, "
                    "ptr %Y, i64 %ldy, i64 %k)",
                    [("entry", entry), ("loop", loop), ("tail", tail)])


def nt_driver() -> str:
    """`recir_sgemm_nt(m, n, k, X, ldx, W, ldw, Y, ldy)`: tiles of W rows
    outside (a tile stays in L1 while all of X passes), X rows inside; each
    tile's function is picked by a switch on its actual size (r rows of X,
    c rows of W, fewer at the edges)."""
    tiles = [(r, c) for r in range(1, NT_ROWS + 1) for c in range(1, NT_COLS + 1)]
    cases = " ".join(f"i64 {r * 16 + c}, label %t{r}_{c}" for r, c in tiles)
    blocks = [
        ("entry", ["%e1 = icmp sgt i64 %n, 0", "%e2 = icmp sgt i64 %m, 0",
                   "%go = and i1 %e1, %e2", "br i1 %go, label %outer, label %done"]),
        ("outer", ["%o = phi i64 [0, %entry], [%o.next, %outer.next]",
                   "%o.left = sub i64 %n, %o", f"%o.few = icmp slt i64 %o.left, {NT_COLS}",
                   f"%c = select i1 %o.few, i64 %o.left, i64 {NT_COLS}",
                   "%wo = mul i64 %o, %ldw", "%wp = getelementptr float, ptr %W, i64 %wo",
                   "br label %inner"]),
        ("inner", ["%i = phi i64 [0, %outer], [%i.next, %inner.next]",
                   "%i.left = sub i64 %m, %i", f"%i.few = icmp slt i64 %i.left, {NT_ROWS}",
                   f"%r = select i1 %i.few, i64 %i.left, i64 {NT_ROWS}",
                   "%xo = mul i64 %i, %ldx", "%xp = getelementptr float, ptr %X, i64 %xo",
                   "%yo = mul i64 %i, %ldy", "%yo2 = add i64 %yo, %o",
                   "%yp = getelementptr float, ptr %Y, i64 %yo2",
                   "%r16 = mul i64 %r, 16", "%code = add i64 %r16, %c",
                   f"switch i64 %code, label %inner.next [ {cases} ]"]),
    ]
    for r, c in tiles:
        blocks.append((f"t{r}_{c}", [f"call void @nt_{r}_{c}(ptr %xp, i64 %ldx, ptr %wp, "
                                     "i64 %ldw, ptr %yp, i64 %ldy, i64 %k)",
                                     "br label %inner.next"]))
    blocks += [
        ("inner.next", [f"%i.next = add i64 %i, {NT_ROWS}", "%i.more = icmp slt i64 %i.next, %m",
                        "br i1 %i.more, label %inner, label %outer.next"]),
        ("outer.next", [f"%o.next = add i64 %o, {NT_COLS}", "%o.more = icmp slt i64 %o.next, %n",
                        "br i1 %o.more, label %outer, label %done"]),
        ("done", ["ret void"]),
    ]
    return function("void @recir_sgemm_nt(i64 %m, i64 %n, i64 %k, ptr %X, i64 %ldx, "
                    "ptr %W, i64 %ldw, ptr %Y, i64 %ldy)", blocks)


def module_text() -> str:
    parts = [DECLARATIONS]
    parts += [nt_tile(r, c) for r in range(1, NT_ROWS + 1) for c in range(1, NT_COLS + 1)]
    parts.append(nt_driver())
    return "\n\n".join(parts) + "\n"


# --- loading and calling ---------------------------------------------------------

I64, PTR = ctypes.c_int64, ctypes.c_void_p


@cache
def kernel() -> Any:
    """`recir_sgemm_nt` as a ctypes function; compiled on first use."""
    from recir.backend.engine import text_function

    return text_function(module_text(), "recir_sgemm_nt", ctypes.CFUNCTYPE(
        None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64))


def fits(x: np.ndarray, w: np.ndarray) -> bool:
    """Whether `nt` takes these: f32 matrices with contiguous rows."""
    return (x.dtype == np.float32 and w.dtype == np.float32 and x.ndim == 2 and w.ndim == 2
            and x.strides[1] == 4 and w.strides[1] == 4 and x.shape[1] == w.shape[1]
            and x.strides[0] % 4 == 0 and w.strides[0] % 4 == 0)


def nt(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T for x (m, k), w (n, k) that `fits`."""
    m, k = x.shape
    n = w.shape[0]
    y = np.empty((m, n), np.float32)
    kernel()(m, n, k, data_address(x), x.strides[0] // 4, data_address(w), w.strides[0] // 4,
             data_address(y), n)
    return y
