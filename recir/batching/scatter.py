"""A frontier's embedding gradient: its rows of dy added at their word indices.

The frontier backward hands an embedding table one cotangent row per leaf
gathered from it; words repeat within a batch, so the rows must be added one
after another. `np.add.at` does that slowly, `np.add.reduceat` over sorted
rows needs a sort first; this loop, LLVM IR
text compiled once like `smallgemm`'s kernel, adds row after row in the same
order as `np.add.at`.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

from recir.backend.array_address import data_address

TEXT = """
define void @recir_scatter_add(i64 %n, i64 %k, ptr noalias %index, ptr noalias %src,
                               i64 %lds, ptr noalias %dst, i64 %ldd) {
entry:
  %some = icmp sgt i64 %n, 0
  %wide = icmp sgt i64 %k, 0
  %go = and i1 %some, %wide
  br i1 %go, label %row, label %done
row:
  %i = phi i64 [0, %entry], [%i.next, %row.end]
  %ip = getelementptr i64, ptr %index, i64 %i
  %at = load i64, ptr %ip
  %so = mul i64 %i, %lds
  %s = getelementptr float, ptr %src, i64 %so
  %do = mul i64 %at, %ldd
  %d = getelementptr float, ptr %dst, i64 %do
  br label %col
col:
  %j = phi i64 [0, %row], [%j.next, %col]
  %sp = getelementptr float, ptr %s, i64 %j
  %dp = getelementptr float, ptr %d, i64 %j
  %x = load float, ptr %sp
  %y = load float, ptr %dp
  %z = fadd float %y, %x
  store float %z, ptr %dp
  %j.next = add i64 %j, 1
  %more = icmp slt i64 %j.next, %k
  br i1 %more, label %col, label %row.end
row.end:
  %i.next = add i64 %i, 1
  %rows = icmp slt i64 %i.next, %n
  br i1 %rows, label %row, label %done
done:
  ret void
}
"""


@cache
def kernel() -> Any:
    from recir.backend.engine import text_function

    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return text_function(TEXT, "recir_scatter_add", ctypes.CFUNCTYPE(
        None, i64, i64, ptr, ptr, i64, ptr, i64))


def add_rows(table: np.ndarray, index: Any, rows: np.ndarray) -> None:
    """table[index[i]] += rows[i] for each i in order (`np.add.at`)."""
    index = np.ascontiguousarray(index, np.int64).reshape(-1)
    if (table.dtype != np.float32 or table.ndim != 2 or not table.flags.c_contiguous
            or not table.flags.writeable or rows.shape != (len(index), table.shape[1])):
        np.add.at(table, index, rows)
        return
    if len(index) and (index.min() < 0 or index.max() >= table.shape[0]):
        raise IndexError(f"row index out of range for a table of {table.shape[0]} rows")
    rows = np.ascontiguousarray(rows, np.float32)
    kernel()(len(index), table.shape[1], data_address(index), data_address(rows), table.shape[1],
             data_address(table), table.shape[1])
