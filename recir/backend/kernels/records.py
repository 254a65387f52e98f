"""The row-loop records `native_post.py` adds to `split`'s dispatcher, and the
stepped team runner that runs every record list, as LLVM IR text.

A record is 64-bit words `[kind, unused, ...]` (`split.py`); these kernels
loop over a height's rows. Index checks flag an error cell and skip the row
(the Python loop then raises the located error); nothing reads or writes
out of bounds.
"""

from __future__ import annotations


def loads(count: int, prefix: str) -> list[str]:
    """`%{prefix}w{i}` = word i of the record `%r`, for 2 <= i < 2 + count."""
    lines = []
    for i in range(2, 2 + count):
        lines += [f"%{prefix}a{i} = getelementptr i64, ptr %r, i64 {i}",
                  f"%{prefix}w{i} = load i64, ptr %{prefix}a{i}"]
    return lines


def row_function(name: str, words: int, prefix: str, rows: int, setup: list[str],
                 body: str) -> str:
    """`@name(ptr %r)`: record words 2 .. 1 + `words` as `%{prefix}w{i}`,
    `setup`, then `body` (from label `row:`, ending in `br label %next`) for
    each row `%i` below word `rows`."""
    lines = [f"  {line}" for line in loads(words, prefix) + setup]
    return f"""define internal void @{name}(ptr %r) {{
entry:
""" + "\n".join(lines) + f"""
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %more = icmp slt i64 %i, %{prefix}w{rows}
  br i1 %more, label %row, label %exit
row:
{body}
next:
  %i1 = add i64 %i, 1
  br label %head
exit:
  ret void
}}"""


# words 2..11: dst, dst row stride, src, src row stride, row bytes (a multiple
# of 4), index (0: row i is src row i), index bytes (4 or 8), index bound, rows,
# error cell (set to 1 for an index out of bounds; that row is not copied)
COPY_ROWS = row_function("copy_rows", 10, "c", 10, [
    "%dst = inttoptr i64 %cw2 to ptr", "%src = inttoptr i64 %cw4 to ptr",
    "%idx = inttoptr i64 %cw7 to ptr", "%err = inttoptr i64 %cw11 to ptr",
    "%words = lshr i64 %cw6, 2", "%indexed = icmp ne i64 %cw7, 0",
    "%wide = icmp eq i64 %cw8, 8"], """  br i1 %indexed, label %index, label %copy
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
  br i1 %wmore, label %word, label %next""")

# A per-tree structure array read at each row's root (`tmath.extract` of a
# ragged array): words 2..9: out (4-byte elements), flat, offsets (i64),
# lengths (i64), roots (i64), index (i32), rows, error cell.
PICK_ROWS = row_function("pick_rows", 8, "k", 8, [
    "%out = inttoptr i64 %kw2 to ptr", "%flat = inttoptr i64 %kw3 to ptr",
    "%offsets = inttoptr i64 %kw4 to ptr", "%lengths = inttoptr i64 %kw5 to ptr",
    "%roots = inttoptr i64 %kw6 to ptr", "%idx = inttoptr i64 %kw7 to ptr",
    "%err = inttoptr i64 %kw9 to ptr"], """  %rp = getelementptr i64, ptr %roots, i64 %i
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
  br label %next""")

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
