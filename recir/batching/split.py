"""A frontier's products and row kernels split across the team's threads.

On two threads, OpenBLAS's own threading split each big product but left
the rest of a frontier (small products, row kernels) on one core, and its
worker spun on the other core between products, so the frontier scheduler
gained ~1.1x from a second thread. Here each split call is a list of
*parts* (one call of a native function on a slice of the work) run by one
OpenMP team (libgomp, `GOMP_parallel`, as the recursive code's tasks):
threads claim parts with an atomic counter until none is left, so a team
smaller than asked for still runs every part. OpenBLAS stays on one thread.

A part is a record of 64-bit words `[kind, function, arguments...]`:
`SGEMM` calls CBLAS sgemm (enums and sizes, floats as their bits), `NT` the
small-product kernel `smallgemm.recir_sgemm_nt`, and `ROWS + n` a row
kernel `f(ctx, rows, p1..pn)` of `native.py`. The dispatcher is LLVM IR
text (calls through a loaded pointer with a signature per kind), compiled
once into the object cache.
"""

from __future__ import annotations

import ctypes
import struct
from functools import cache
from typing import Any

import numpy as np

from recir.batching.blas import NO_TRANS, ROW_MAJOR, TRANS

SGEMM, NT, ROWS = 0, 1, 2
MAX_POINTERS = 32  # row kernels with more pointers run unsplit
WORDS = 4 + MAX_POINTERS  # a record: kind, function, ctx, rows, pointers
COPY, PICK, ADD = range(ROWS + MAX_POINTERS + 1, ROWS + MAX_POINTERS + 4)  # `native_post.py`


def bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def loads(count: int, prefix: str) -> list[str]:
    """`%{prefix}w{i}` = word i of the record `%r`, for 2 <= i < 2 + count."""
    lines = []
    for i in range(2, 2 + count):
        lines += [f"%{prefix}a{i} = getelementptr i64, ptr %r, i64 {i}",
                  f"%{prefix}w{i} = load i64, ptr %{prefix}a{i}"]
    return lines


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


def nt_block() -> list[str]:
    """recir_sgemm_nt(m, n, k, X, ldx, W, ldw, Y, ldy) from words 2..10."""
    kinds = "nnnpnpnpn"
    lines = loads(9, "t")
    args = []
    for i, kind in zip(range(2, 11), kinds, strict=True):
        if kind == "p":
            lines.append(f"%tq{i} = inttoptr i64 %tw{i} to ptr")
            args.append(f"ptr %tq{i}")
        else:
            args.append(f"i64 %tw{i}")
    return lines + [f"call void %fn({', '.join(args)})", "br label %done"]


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
    """`recir_split_run(records, count, threads)` and its helpers."""
    cases = " ".join([f"i64 {SGEMM}, label %sgemm", f"i64 {NT}, label %nt",
                      f"i64 {COPY}, label %copy", f"i64 {PICK}, label %pick",
                      f"i64 {ADD}, label %add"] + [
        f"i64 {ROWS + n}, label %rows{n}" for n in range(1, MAX_POINTERS + 1)])
    part = ["define internal void @run_part(ptr %r) {", "entry:",
            "  %kind = load i64, ptr %r", "  %fa = getelementptr i64, ptr %r, i64 1",
            "  %fn = load ptr, ptr %fa", f"  switch i64 %kind, label %done [ {cases} ]"]
    blocks = [("sgemm", sgemm_block(integer)), ("nt", nt_block()),
              ("copy", ["call void @copy_rows(ptr %r)", "br label %done"]),
              ("pick", ["call void @pick_rows(ptr %r)", "br label %done"]),
              ("add", ["call void @add_rows(ptr %r)", "br label %done"])] + [
        (f"rows{n}", rows_block(n)) for n in range(1, MAX_POINTERS + 1)]
    for label, lines in blocks:
        part += [f"{label}:"] + [f"  {line}" for line in lines]
    part += ["done:", "  ret void", "}"]
    return "\n".join([
        "declare void @GOMP_parallel(ptr, ptr, i32, i32)",
        "declare void @GOMP_barrier()",
        COPY_ROWS, PICK_ROWS, ADD_ROWS, STEPS,
        "\n".join(part),
        # data: {records, count, next}; each thread claims parts until none is left
        """define internal void @team_body(ptr %data) {
entry:
  %records = load ptr, ptr %data
  %cp = getelementptr i64, ptr %data, i64 1
  %count = load i64, ptr %cp
  %np = getelementptr i64, ptr %data, i64 2
  br label %claim
claim:
  %i = atomicrmw add ptr %np, i64 1 monotonic
  %more = icmp slt i64 %i, %count
  br i1 %more, label %run, label %done
run:
  %off = mul i64 %i, """ + str(WORDS) + """
  %r = getelementptr i64, ptr %records, i64 %off
  call void @run_part(ptr %r)
  br label %claim
done:
  ret void
}""",
        """define void @recir_split_run(ptr %records, i64 %count, i32 %threads) {
entry:
  %data = alloca [3 x i64], align 8
  store ptr %records, ptr %data
  %cp = getelementptr i64, ptr %data, i64 1
  store i64 %count, ptr %cp
  %np = getelementptr i64, ptr %data, i64 2
  store i64 0, ptr %np
  call void @GOMP_parallel(ptr @team_body, ptr %data, i32 %threads, i32 0)
  ret void
}""",
    ]) + "\n"


# words 2..11: dst, dst row stride, src, src row stride, row bytes (a multiple
# of 4), index (0: row i is src row i), index bytes (4 or 8), index bound, rows,
# error cell (set to 1 for an index out of bounds; that row is not copied)
COPY_ROWS = """define internal void @copy_rows(ptr %r) {
entry:
""" + "\n".join(f"  {line}" for line in loads(10, "c")) + """
  %dst = inttoptr i64 %cw2 to ptr
  %src = inttoptr i64 %cw4 to ptr
  %idx = inttoptr i64 %cw7 to ptr
  %err = inttoptr i64 %cw11 to ptr
  %words = lshr i64 %cw6, 2
  %indexed = icmp ne i64 %cw7, 0
  %wide = icmp eq i64 %cw8, 8
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %more = icmp slt i64 %i, %cw10
  br i1 %more, label %row, label %exit
row:
  br i1 %indexed, label %index, label %copy
index:
  br i1 %wide, label %i64, label %i32
i64:
  %p8 = getelementptr i64, ptr %idx, i64 %i
  %j8 = load i64, ptr %p8
  br label %check
i32:
  %p4 = getelementptr i32, ptr %idx, i64 %i
  %j4 = load i32, ptr %p4
  %j4x = sext i32 %j4 to i64
  br label %check
check:
  %j = phi i64 [ %j8, %i64 ], [ %j4x, %i32 ]
  %ok = icmp ult i64 %j, %cw9
  br i1 %ok, label %copy, label %bad
bad:
  store i64 1, ptr %err
  br label %next
copy:
  %from = phi i64 [ %j, %check ], [ %i, %row ]
  %so = mul i64 %from, %cw5
  %sp = getelementptr i8, ptr %src, i64 %so
  %do = mul i64 %i, %cw3
  %dp = getelementptr i8, ptr %dst, i64 %do
  br label %word
word:
  %w = phi i64 [ 0, %copy ], [ %w1, %word ]
  %sw = getelementptr i32, ptr %sp, i64 %w
  %v = load i32, ptr %sw
  %dw = getelementptr i32, ptr %dp, i64 %w
  store i32 %v, ptr %dw
  %w1 = add i64 %w, 1
  %wmore = icmp slt i64 %w1, %words
  br i1 %wmore, label %word, label %next
next:
  %i1 = add i64 %i, 1
  br label %head
exit:
  ret void
}"""

# A per-tree structure array read at each row's root (`tmath.extract` of a
# ragged array): words 2..9: out (4-byte elements), flat, offsets (i64),
# lengths (i64), roots (i64), index (i32), rows, error cell.
PICK_ROWS = """define internal void @pick_rows(ptr %r) {
entry:
""" + "\n".join(f"  {line}" for line in loads(8, "k")) + """
  %out = inttoptr i64 %kw2 to ptr
  %flat = inttoptr i64 %kw3 to ptr
  %offsets = inttoptr i64 %kw4 to ptr
  %lengths = inttoptr i64 %kw5 to ptr
  %roots = inttoptr i64 %kw6 to ptr
  %idx = inttoptr i64 %kw7 to ptr
  %err = inttoptr i64 %kw9 to ptr
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %more = icmp slt i64 %i, %kw8
  br i1 %more, label %row, label %exit
row:
  %rp = getelementptr i64, ptr %roots, i64 %i
  %root = load i64, ptr %rp
  %ip = getelementptr i32, ptr %idx, i64 %i
  %j4 = load i32, ptr %ip
  %j = sext i32 %j4 to i64
  %lp = getelementptr i64, ptr %lengths, i64 %root
  %len = load i64, ptr %lp
  %ok = icmp ult i64 %j, %len
  br i1 %ok, label %read, label %bad
read:
  %op = getelementptr i64, ptr %offsets, i64 %root
  %off = load i64, ptr %op
  %at = add i64 %off, %j
  %fp = getelementptr i32, ptr %flat, i64 %at
  %v = load i32, ptr %fp
  %dp = getelementptr i32, ptr %out, i64 %i
  store i32 %v, ptr %dp
  br label %next
bad:
  store i64 1, ptr %err
  br label %next
next:
  %i1 = add i64 %i, 1
  br label %head
exit:
  ret void
}"""

# f32 rows added: words 2..8: dst, dst row stride, src, src row stride, floats
# a row, index (0: src row i into dst row i; else into dst row index[i], i64),
# rows. A backward's cotangents (`native_grad.py`); no two rows of one record
# meet in dst (a call's children are distinct).
ADD_ROWS = """define internal void @add_rows(ptr %r) {
entry:
""" + "\n".join(f"  {line}" for line in loads(7, "d")) + """
  %dst = inttoptr i64 %dw2 to ptr
  %src = inttoptr i64 %dw4 to ptr
  %idx = inttoptr i64 %dw7 to ptr
  %indexed = icmp ne i64 %dw7, 0
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %more = icmp slt i64 %i, %dw8
  br i1 %more, label %row, label %exit
row:
  br i1 %indexed, label %index, label %add
index:
  %ip = getelementptr i64, ptr %idx, i64 %i
  %j = load i64, ptr %ip
  br label %add
add:
  %to = phi i64 [ %j, %index ], [ %i, %row ]
  %do = mul i64 %to, %dw3
  %dp = getelementptr i8, ptr %dst, i64 %do
  %so = mul i64 %i, %dw5
  %sp = getelementptr i8, ptr %src, i64 %so
  br label %word
word:
  %w = phi i64 [ 0, %add ], [ %w1, %word ]
  %sw = getelementptr float, ptr %sp, i64 %w
  %v = load float, ptr %sw
  %dwp = getelementptr float, ptr %dp, i64 %w
  %old = load float, ptr %dwp
  %sum = fadd float %old, %v
  store float %sum, ptr %dwp
  %w1 = add i64 %w, 1
  %wmore = icmp slt i64 %w1, %dw6
  br i1 %wmore, label %word, label %next
next:
  %i1 = add i64 %i, 1
  br label %head
exit:
  ret void
}"""

# `recir_steps_run(words, offsets, starts, steps, counters, threads)`: record
# k starts at words[offsets[k]]; step s is the records starts[s] ..
# starts[s+1]-1, claimed with the counter counters[s] (zeroed by the caller);
# a team barrier between steps.
STEPS = """define internal void @steps_body(ptr %data) {
entry:
  %records = load ptr, ptr %data
  %sa = getelementptr i64, ptr %data, i64 1
  %starts = load ptr, ptr %sa
  %na = getelementptr i64, ptr %data, i64 2
  %steps = load i64, ptr %na
  %ca = getelementptr i64, ptr %data, i64 3
  %counters = load ptr, ptr %ca
  %ba = getelementptr i64, ptr %data, i64 4
  %team = load i64, ptr %ba
  %barrier = icmp ne i64 %team, 0
  %oa = getelementptr i64, ptr %data, i64 5
  %offsets = load ptr, ptr %oa
  br label %step
step:
  %s = phi i64 [ 0, %entry ], [ %s1, %after ]
  %smore = icmp slt i64 %s, %steps
  br i1 %smore, label %open, label %exit
open:
  %lp = getelementptr i64, ptr %starts, i64 %s
  %lo = load i64, ptr %lp
  %s1 = add i64 %s, 1
  %hp = getelementptr i64, ptr %starts, i64 %s1
  %hi = load i64, ptr %hp
  %cp = getelementptr i64, ptr %counters, i64 %s
  br label %claim
claim:
  %k = atomicrmw add ptr %cp, i64 1 monotonic
  %at = add i64 %lo, %k
  %run = icmp slt i64 %at, %hi
  br i1 %run, label %part, label %wait
part:
  %op = getelementptr i64, ptr %offsets, i64 %at
  %off = load i64, ptr %op
  %rec = getelementptr i64, ptr %records, i64 %off
  call void @run_part(ptr %rec)
  br label %claim
wait:
  br i1 %barrier, label %sync, label %after
sync:
  call void @GOMP_barrier()
  br label %after
after:
  br label %step
exit:
  ret void
}

define void @recir_steps_run(ptr %records, ptr %offsets, ptr %starts, i64 %steps,
                             ptr %counters, i32 %threads) {
entry:
  %data = alloca [6 x i64], align 8
  store ptr %records, ptr %data
  %oa = getelementptr i64, ptr %data, i64 5
  store ptr %offsets, ptr %oa
  %sa = getelementptr i64, ptr %data, i64 1
  store ptr %starts, ptr %sa
  %na = getelementptr i64, ptr %data, i64 2
  store i64 %steps, ptr %na
  %ca = getelementptr i64, ptr %data, i64 3
  store ptr %counters, ptr %ca
  %team = icmp sgt i32 %threads, 1
  %tw = zext i1 %team to i64
  %ba = getelementptr i64, ptr %data, i64 4
  store i64 %tw, ptr %ba
  br i1 %team, label %parallel, label %serial
parallel:
  call void @GOMP_parallel(ptr @steps_body, ptr %data, i32 %threads, i32 0)
  ret void
serial:
  call void @steps_body(ptr %data)
  ret void
}"""


@cache
def steps_runner() -> Any:
    """`recir_steps_run` as a ctypes function (None as for `runner`)."""
    if runner() is None:
        return None
    from recir.backend.engine import text_function
    from recir.batching import blas

    cblas = blas.sgemm()
    integer = "i64" if cblas.argtypes[3] is ctypes.c_int64 else "i32"  # type: ignore[attr-defined]
    return text_function(module_text(integer), "recir_steps_run", ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
        ctypes.c_void_p, ctypes.c_int32))


@cache
def runner() -> Any:
    """`recir_split_run` as a ctypes function, or None without libgomp or
    CBLAS (then frontiers use OpenBLAS's own threads)."""
    from recir.backend.engine import openmp, text_function
    from recir.batching import blas

    cblas = blas.sgemm()
    if openmp() is None or cblas is None:
        return None
    integer = "i64" if cblas.argtypes[3] is ctypes.c_int64 else "i32"  # type: ignore[attr-defined]
    return text_function(module_text(integer), "recir_split_run", ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32))


def available() -> bool:
    return runner() is not None


def run(parts: list[list[int]], threads: int) -> None:
    """Run the records on a team of `threads`."""
    records = (ctypes.c_uint64 * (WORDS * len(parts)))()
    for i, part in enumerate(parts):
        records[i * WORDS:i * WORDS + len(part)] = part
    runner()(ctypes.addressof(records), len(parts), threads)


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
    xp, wp, yp = smallgemm.pointer(x), smallgemm.pointer(w), smallgemm.pointer(y)
    if not small:
        sgemm(NO_TRANS, TRANS, m, n, k, xp, ldx, wp, ldw, 0.0, yp, n, threads, by_rows=False)
        return y
    fn = address(smallgemm.kernel())
    run([[NT, fn, m, hi - lo, k, xp, ldx, wp + 4 * lo * ldw, ldw, yp + 4 * lo, n]
         for lo, hi in ranges(n, threads, smallgemm.NT_COLS)], threads)
    return y
