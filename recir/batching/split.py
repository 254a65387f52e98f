"""A frontier's products and row kernels split across the team's threads.

On two threads, OpenBLAS's own threading split each big product but left
the rest of a frontier (small products, row kernels) on one core, and its
worker spun on the other core between products, so the frontier scheduler
gained little from a second thread. Here each split call is a list of
*parts* (one call of a native function on a slice of the work) run by one
OpenMP team (libgomp, `GOMP_parallel`, as the recursive code's tasks):
threads claim parts with an atomic counter until none is left, so a team
smaller than asked for still runs every part. OpenBLAS stays on one thread.

A part is a record of 64-bit words `[kind, function, arguments...]`:
`SGEMM` calls CBLAS sgemm (enums and sizes, floats as their bits), `NT` the
small-product kernel `smallgemm.recir_sgemm_nt`, `ROWS + n` a row kernel
`f(ctx, rows, p1..pn)` of `native.py`, `COPY` and `PICK` the row loops of
`records.py` (the native post segment's), `ADD` `scatter.py`'s
`recir_scatter_add` (its backward's: rows added at indices), and `NN`
`gemm.py`'s `recir_gemm_nn` or `recir_gemm_tn` (its backward's `dX (+)=
dY W`, weight gradients). The dispatcher is LLVM IR text (calls through a
loaded pointer with a signature per kind), compiled once into the object
cache; `run` is one step of `records.STEPS`' runner, which runs whole lists
of steps.
"""

from __future__ import annotations

import ctypes
import struct
from functools import cache
from typing import Any

import numpy as np

from recir.backend.array_address import data_address
from recir.batching.blas import NO_TRANS, ROW_MAJOR, TRANS
from recir.batching.records import COPY_ROWS, PICK_ROWS, STEPS, loads

SGEMM, NT, ROWS = 0, 1, 2
MAX_POINTERS = 32  # row kernels with more pointers run unsplit
COPY, PICK, ADD, NN = range(ROWS + MAX_POINTERS + 1, ROWS + MAX_POINTERS + 5)  # `native_post.py`


def bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def sgemm_block(integer: str) -> list[str]:
    """Call CBLAS sgemm with words 2..15: order, transa, transb, m, n, k, alpha,
    a, lda, b, ldb, beta, c, ldc."""
    lines = loads(14, "s")
    args = []
    for i, kind in zip(range(2, 16), ("e", "e", "e", "n", "n", "n", "f", "p", "n", "p", "n",
                                      "f", "p", "n"), strict=True):
        if kind == "e":
            lines.append(f"%sv{i} = trunc i64 %sw{i} to i32")
            args.append(f"i32 %sv{i}")
        elif kind == "f":
            lines += [f"%si{i} = trunc i64 %sw{i} to i32", f"%sv{i} = bitcast i32 %si{i} to float"]
            args.append(f"float %sv{i}")
        elif kind == "p":
            lines.append(f"%sv{i} = inttoptr i64 %sw{i} to ptr")
            args.append(f"ptr %sv{i}")
        elif integer == "i64":
            args.append(f"i64 %sw{i}")
        else:
            lines.append(f"%sv{i} = trunc i64 %sw{i} to i32")
            args.append(f"i32 %sv{i}")
    return lines + [f"call void %fn({', '.join(args)})", "br label %done"]


def call_block(kinds: str, prefix: str) -> list[str]:
    """Call `%fn` with words 2, 3, ... as its arguments: `kinds` says which
    are pointers (p) and which i64 (n)."""
    lines = loads(len(kinds), prefix)
    args = []
    for i, kind in enumerate(kinds, start=2):
        if kind == "p":
            lines.append(f"%{prefix}q{i} = inttoptr i64 %{prefix}w{i} to ptr")
            args.append(f"ptr %{prefix}q{i}")
        else:
            args.append(f"i64 %{prefix}w{i}")
    return lines + [f"call void %fn({', '.join(args)})", "br label %done"]


def nt_block() -> list[str]:
    """recir_sgemm_nt(m, n, k, X, ldx, W, ldw, Y, ldy) from words 2..10."""
    return call_block("nnnpnpnpn", "t")


def gemm_block() -> list[str]:
    """recir_gemm_nn or _tn(m, n, k, A, lda, B, ldb, C, ldc, accumulate) from words 2..11."""
    return call_block("nnnpnpnpnn", "u")


def add_block() -> list[str]:
    """recir_scatter_add(n, k, index, src, lds, dst, ldd) from words 2..8."""
    return call_block("nnppnpn", "g")


def rows_block(count: int) -> list[str]:
    """f(ctx, rows, p1..p{count}) from words 2, 3, 4...: one block per arity."""
    lines = [f"%r{count}.ctx = getelementptr i64, ptr %r, i64 2",
             f"%r{count}.c = load ptr, ptr %r{count}.ctx",
             f"%r{count}.rp = getelementptr i64, ptr %r, i64 3",
             f"%r{count}.n = load i64, ptr %r{count}.rp"]
    args = [f"ptr %r{count}.c", f"i64 %r{count}.n"]
    for i in range(count):
        lines += [f"%r{count}.a{i} = getelementptr i64, ptr %r, i64 {4 + i}",
                  f"%r{count}.p{i} = load ptr, ptr %r{count}.a{i}"]
        args.append(f"ptr %r{count}.p{i}")
    return lines + [f"call void %fn({', '.join(args)})", "br label %done"]


def module_text(integer: str) -> str:
    """`recir_steps_run` (`records.py`) and the part dispatcher it calls."""
    cases = " ".join([f"i64 {SGEMM}, label %sgemm", f"i64 {NT}, label %nt",
                      f"i64 {COPY}, label %copy", f"i64 {PICK}, label %pick",
                      f"i64 {ADD}, label %add", f"i64 {NN}, label %nn"] + [
        f"i64 {ROWS + n}, label %rows{n}" for n in range(1, MAX_POINTERS + 1)])
    part = ["define internal void @run_part(ptr %r) {", "entry:",
            "  %kind = load i64, ptr %r", "  %fa = getelementptr i64, ptr %r, i64 1",
            "  %fn = load ptr, ptr %fa", f"  switch i64 %kind, label %done [ {cases} ]"]
    blocks = [("sgemm", sgemm_block(integer)), ("nt", nt_block()),
              ("copy", ["call void @copy_rows(ptr %r)", "br label %done"]),
              ("pick", ["call void @pick_rows(ptr %r)", "br label %done"]),
              ("add", add_block()), ("nn", gemm_block())] + [
        (f"rows{n}", rows_block(n)) for n in range(1, MAX_POINTERS + 1)]
    for label, lines in blocks:
        part += [f"{label}:"] + [f"  {line}" for line in lines]
    part += ["done:", "  ret void", "}"]
    return "\n".join([
        "declare void @GOMP_parallel(ptr, ptr, i32, i32)",
        "declare void @GOMP_barrier()",
        COPY_ROWS, PICK_ROWS, STEPS,
        "\n".join(part),
    ]) + "\n"


@cache
def runner() -> Any:
    """`recir_steps_run(words, offsets, starts, steps, counters, threads)` as a
    ctypes function, or None without an OpenMP runtime or CBLAS (then
    frontiers use OpenBLAS's own threads)."""
    from recir.backend.engine import openmp, text_function
    from recir.batching import blas

    cblas = blas.sgemm()
    if openmp() is None or cblas is None:
        return None
    integer = "i64" if cblas.argtypes[3] is ctypes.c_int64 else "i32"  # type: ignore[attr-defined]
    p = ctypes.c_void_p
    return text_function(module_text(integer), "recir_steps_run", ctypes.CFUNCTYPE(
        None, p, p, p, ctypes.c_int64, p, ctypes.c_int32))


def available() -> bool:
    return runner() is not None


def run(parts: list[list[int]], threads: int) -> None:
    """Run the records on a team of `threads`: one step."""
    words = np.array([w for part in parts for w in part], np.uint64)
    offsets = np.cumsum([0] + [len(part) for part in parts[:-1]], dtype=np.int64)
    starts, counter = np.array([0, len(parts)], np.int64), np.zeros(1, np.int64)
    runner()(words.ctypes.data, offsets.ctypes.data, starts.ctypes.data, 1, counter.ctypes.data,
             threads)


def ranges(total: int, parts: int, step: int = 1) -> list[tuple[int, int]]:
    """`parts` contiguous ranges covering [0, total), cut at multiples of `step`."""
    if parts == 1:
        return [(0, total)] if total else []
    cuts = [min(total, (total * i // parts + step - 1) // step * step) for i in range(parts + 1)]
    cuts[-1] = total
    return [(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True) if hi > lo]


def address(function: Any) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value or 0


def sgemm(trans_a: int, trans_b: int, m: int, n: int, k: int, a: int, lda: int, b: int,
          ldb: int, beta: float, c: int, ldc: int, threads: int, by_rows: bool) -> None:
    """C = op(A) op(B) + beta C (row-major f32 at addresses), cut into parts
    along C's rows (`by_rows`) or columns, each part one-threaded OpenBLAS."""
    from recir.batching import blas

    fn = address(blas.sgemm())
    parts = []
    for lo, hi in ranges(m if by_rows else n, threads, 16):
        pa, pb, pc, pm, pn = a, b, c + 4 * lo, m, hi - lo
        if by_rows:
            pa = a + 4 * (lo if trans_a == TRANS else lo * lda)
            pb, pc, pm, pn = b, c + 4 * lo * ldc, hi - lo, n
        else:
            pb = b + 4 * (lo * ldb if trans_b == TRANS else lo)
        parts.append([SGEMM, fn, ROW_MAJOR, trans_a, trans_b, pm, pn, k, bits(1.0), pa, lda,
                      pb, ldb, bits(beta), pc, ldc])
    run(parts, threads)


def product_nt(x: np.ndarray, w: np.ndarray, threads: int, small: bool) -> np.ndarray:
    """x @ w.T (both `smallgemm.fits`) split by weight rows, so each thread
    streams its share of w: `smallgemm`'s kernel if `small`, else OpenBLAS."""
    from recir.batching import smallgemm

    m, k = x.shape
    n = w.shape[0]
    y = np.empty((m, n), np.float32)
    ldx, ldw = x.strides[0] // 4, w.strides[0] // 4
    xp, wp, yp = data_address(x), data_address(w), data_address(y)
    if not small:
        sgemm(NO_TRANS, TRANS, m, n, k, xp, ldx, wp, ldw, 0.0, yp, n, threads, by_rows=False)
        return y
    fn = address(smallgemm.kernel())
    run([[NT, fn, m, hi - lo, k, xp, ldx, wp + 4 * lo * ldw, ldw, yp + 4 * lo, n]
         for lo, hi in ranges(n, threads, smallgemm.NT_COLS)], threads)
    return y
