"""Invocations grouped by height in one native pass (`Schedule.order_by_height`).

In NumPy the heights took one pass per depth level and call site; here one loop from the last invocation back
(a child's id is always above its parent's) computes every height, a
counting sort numbers the invocations by height (stable: within a height,
in expansion order), and the children tables are renumbered into that order.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

# recir_order(children, sites, total, perm, inv, sorted_children, bounds, count):
# children/sorted_children: `sites` pointers to i64[total] (-1: no child);
# perm[k] = the invocation at sorted position k, inv its inverse; bounds[h] =
# first position of height h (bounds has total + 1 slots, count is scratch of
# total + 1); returns the number of heights.
ORDER = """
define i64 @recir_order(ptr %children, i64 %sites, i64 %total, ptr %perm, ptr %inv,
                        ptr %sorted, ptr %bounds, ptr %count) {
entry:
  %tp1 = add i64 %total, 1
  br label %zero
zero:
  %z = phi i64 [ 0, %entry ], [ %z1, %zero ]
  %zp = getelementptr i64, ptr %count, i64 %z
  store i64 0, ptr %zp
  %z1 = add i64 %z, 1
  %zmore = icmp slt i64 %z1, %tp1
  br i1 %zmore, label %zero, label %heights
heights:
  %i0 = sub i64 %total, 1
  br label %node
node:
  %i = phi i64 [ %i0, %heights ], [ %inext, %stored ]
  %top = phi i64 [ 0, %heights ], [ %top1, %stored ]
  %live = icmp sge i64 %i, 0
  br i1 %live, label %site, label %prefix
site:
  %s = phi i64 [ 0, %node ], [ %s1, %child ]
  %h = phi i64 [ 0, %node ], [ %h1, %child ]
  %smore = icmp slt i64 %s, %sites
  br i1 %smore, label %look, label %store
look:
  %tp = getelementptr ptr, ptr %children, i64 %s
  %table = load ptr, ptr %tp
  %cp = getelementptr i64, ptr %table, i64 %i
  %c = load i64, ptr %cp
  %has = icmp sge i64 %c, 0
  br i1 %has, label %deeper, label %child
deeper:
  %hp = getelementptr i64, ptr %inv, i64 %c
  %ch = load i64, ptr %hp
  %ch1 = add i64 %ch, 1
  %more = icmp sgt i64 %ch1, %h
  %hm = select i1 %more, i64 %ch1, i64 %h
  br label %child
child:
  %h1 = phi i64 [ %h, %look ], [ %hm, %deeper ]
  %s1 = add i64 %s, 1
  br label %site
store:
  %mine = getelementptr i64, ptr %inv, i64 %i
  store i64 %h, ptr %mine
  %kp = getelementptr i64, ptr %count, i64 %h
  %k = load i64, ptr %kp
  %k1 = add i64 %k, 1
  store i64 %k1, ptr %kp
  %higher = icmp sgt i64 %h, %top
  %top1 = select i1 %higher, i64 %h, i64 %top
  %inext = sub i64 %i, 1
  br label %stored
stored:
  br label %node
prefix:
  %levels = add i64 %top, 1
  br label %sum
sum:
  %l = phi i64 [ 0, %prefix ], [ %l1, %sum ]
  %acc = phi i64 [ 0, %prefix ], [ %acc1, %sum ]
  %lp = getelementptr i64, ptr %count, i64 %l
  %lc = load i64, ptr %lp
  %bp = getelementptr i64, ptr %bounds, i64 %l
  store i64 %acc, ptr %bp
  store i64 %acc, ptr %lp
  %acc1 = add i64 %acc, %lc
  %l1 = add i64 %l, 1
  %lmore = icmp slt i64 %l1, %levels
  br i1 %lmore, label %sum, label %last
last:
  %endp = getelementptr i64, ptr %bounds, i64 %levels
  store i64 %total, ptr %endp
  br label %place
place:
  %j = phi i64 [ 0, %last ], [ %j1, %place ]
  %jp = getelementptr i64, ptr %inv, i64 %j
  %jh = load i64, ptr %jp
  %np = getelementptr i64, ptr %count, i64 %jh
  %at = load i64, ptr %np
  %at1 = add i64 %at, 1
  store i64 %at1, ptr %np
  %pp = getelementptr i64, ptr %perm, i64 %at
  store i64 %j, ptr %pp
  %j1 = add i64 %j, 1
  %jmore = icmp slt i64 %j1, %total
  br i1 %jmore, label %place, label %invert
invert:
  br label %inv.loop
inv.loop:
  %q = phi i64 [ 0, %invert ], [ %q1, %inv.loop ]
  %qp = getelementptr i64, ptr %perm, i64 %q
  %who = load i64, ptr %qp
  %wp = getelementptr i64, ptr %inv, i64 %who
  store i64 %q, ptr %wp
  %q1 = add i64 %q, 1
  %qmore = icmp slt i64 %q1, %total
  br i1 %qmore, label %inv.loop, label %renumber
renumber:
  br label %rs
rs:
  %t = phi i64 [ 0, %renumber ], [ %t1, %rs.next ]
  %tmore = icmp slt i64 %t, %sites
  br i1 %tmore, label %rs.open, label %done
rs.open:
  %itp = getelementptr ptr, ptr %children, i64 %t
  %in = load ptr, ptr %itp
  %otp = getelementptr ptr, ptr %sorted, i64 %t
  %out = load ptr, ptr %otp
  br label %rk
rk:
  %k2 = phi i64 [ 0, %rs.open ], [ %k3, %rk ]
  %fp = getelementptr i64, ptr %perm, i64 %k2
  %from = load i64, ptr %fp
  %ip = getelementptr i64, ptr %in, i64 %from
  %old = load i64, ptr %ip
  %valid = icmp sge i64 %old, 0
  %safe = select i1 %valid, i64 %old, i64 0
  %np2 = getelementptr i64, ptr %inv, i64 %safe
  %new = load i64, ptr %np2
  %val = select i1 %valid, i64 %new, i64 -1
  %op = getelementptr i64, ptr %out, i64 %k2
  store i64 %val, ptr %op
  %k3 = add i64 %k2, 1
  %kmore = icmp slt i64 %k3, %total
  br i1 %kmore, label %rk, label %rs.next
rs.next:
  %t1 = add i64 %t, 1
  br label %rs
done:
  ret i64 %levels
}
"""


@cache
def kernel() -> Any:
    from recir.backend.engine import text_function

    p = ctypes.c_void_p
    return text_function(ORDER, "recir_order", ctypes.CFUNCTYPE(
        ctypes.c_int64, p, ctypes.c_int64, ctypes.c_int64, p, p, p, p, p))


def order(children: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray],
                                               np.ndarray]:
    """(perm, inv, children renumbered in height order, height bounds) for
    children tables in expansion order (int64, -1 for none; a child's id is
    above its parent's). `total` must be at least 1."""
    total = len(children[0])
    tables = [np.ascontiguousarray(c, np.int64) for c in children]
    perm, inv = np.empty(total, np.int64), np.empty(total, np.int64)
    renumbered = [np.empty(total, np.int64) for _ in tables]
    bounds, count = np.empty(total + 1, np.int64), np.empty(total + 1, np.int64)
    ins = np.array([t.ctypes.data for t in tables], np.uint64)
    outs = np.array([t.ctypes.data for t in renumbered], np.uint64)
    levels = kernel()(ins.ctypes.data, len(tables), total, perm.ctypes.data, inv.ctypes.data,
                      outs.ctypes.data, bounds.ctypes.data, count.ctypes.data)
    return perm, inv, renumbered, bounds[:levels + 1]
