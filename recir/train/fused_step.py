"""SGD and Adagrad steps on chosen rows in one pass over each row.

The NumPy step gathers a row set's gradient, parameter and Adagrad sum into
copies, makes a dozen elementwise passes over them with a temporary each,
then scatters two of them back: about fifteen trips through memory for each
touched row. It grows with the rows a step touches, and a data-parallel step
touches the union of N ranks' batches. This loop, LLVM IR text compiled once
like `recir.batching.scatter`'s kernel, reads each float once and writes it
once. It does the NumPy step's float32 operations in its order with no
fused multiply-add (LLVM contracts none without fast-math flags) and a
correctly rounded square root and division, so the results are the same bits.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

from recir.backend.array_address import data_address

SGD_KIND, ADAGRAD = 0, 1  # `kind`
DECAY, ZERO = 1, 2  # `flags`: add weight decay; clear the gradient rows used

# One row of `k` floats: `@sgd_row` and `@adagrad_row` are straight loops
# (selects, no branches) so that LLVM vectorises them.
TEXT = """
declare float @llvm.sqrt.f32(float)

define internal void @sgd_row(i64 %k, ptr noalias %g, ptr noalias %p, float %scale,
                              float %wd, float %lr, i1 %decay, i1 %zero) {
entry:
  br label %col
col:
  %j = phi i64 [0, %entry], [%j.next, %col]
  %gp = getelementptr float, ptr %g, i64 %j
  %pp = getelementptr float, ptr %p, i64 %j
  %graw = load float, ptr %gp
  %x = load float, ptr %pp
  %gs = fmul float %graw, %scale
  %wx = fmul float %wd, %x
  %gw = fadd float %gs, %wx
  %gd = select i1 %decay, float %gw, float %gs
  %d = fmul float %lr, %gd
  %y = fsub float %x, %d
  store float %y, ptr %pp
  %gz = select i1 %zero, float 0.0, float %graw
  store float %gz, ptr %gp
  %j.next = add i64 %j, 1
  %more = icmp slt i64 %j.next, %k
  br i1 %more, label %col, label %done
done:
  ret void
}

define internal void @adagrad_row(i64 %k, ptr noalias %g, ptr noalias %p, ptr noalias %s,
                                  float %scale, float %wd, float %lr, float %eps,
                                  i1 %decay, i1 %zero) {
entry:
  br label %col
col:
  %j = phi i64 [0, %entry], [%j.next, %col]
  %gp = getelementptr float, ptr %g, i64 %j
  %pp = getelementptr float, ptr %p, i64 %j
  %sp = getelementptr float, ptr %s, i64 %j
  %graw = load float, ptr %gp
  %x = load float, ptr %pp
  %sum = load float, ptr %sp
  %gs = fmul float %graw, %scale
  %wx = fmul float %wd, %x
  %gw = fadd float %gs, %wx
  %gd = select i1 %decay, float %gw, float %gs
  %sq = fmul float %gd, %gd
  %sum2 = fadd float %sum, %sq
  store float %sum2, ptr %sp
  %root = call float @llvm.sqrt.f32(float %sum2)
  %root2 = fadd float %root, %eps
  %gl = fmul float %gd, %lr
  %d = fdiv float %gl, %root2
  %y = fsub float %x, %d
  store float %y, ptr %pp
  %gz = select i1 %zero, float 0.0, float %graw
  store float %gz, ptr %gp
  %j.next = add i64 %j, 1
  %more = icmp slt i64 %j.next, %k
  br i1 %more, label %col, label %done
done:
  ret void
}

define void @recir_fused_step(i32 %kind, i32 %flags, i64 %n, i64 %k, ptr %rows,
                              ptr %grad, ptr %param, ptr %slot, float %scale,
                              float %wd, float %lr, float %eps) {
entry:
  %decay.bit = and i32 %flags, 1
  %decay = icmp ne i32 %decay.bit, 0
  %zero.bit = and i32 %flags, 2
  %zero = icmp ne i32 %zero.bit, 0
  %adagrad = icmp eq i32 %kind, 1
  %listed = icmp ne ptr %rows, null
  %some = icmp sgt i64 %n, 0
  %wide = icmp sgt i64 %k, 0
  %go = and i1 %some, %wide
  br i1 %go, label %row, label %done
row:
  %i = phi i64 [0, %entry], [%i.next, %row.end]
  %ip = getelementptr i64, ptr %rows, i64 %i
  br i1 %listed, label %lookup, label %place
lookup:
  %at = load i64, ptr %ip
  br label %place
place:
  %r = phi i64 [%i, %row], [%at, %lookup]
  %o = mul i64 %r, %k
  %g = getelementptr float, ptr %grad, i64 %o
  %p = getelementptr float, ptr %param, i64 %o
  br i1 %adagrad, label %ada, label %sgd
ada:
  %s = getelementptr float, ptr %slot, i64 %o
  call void @adagrad_row(i64 %k, ptr %g, ptr %p, ptr %s, float %scale, float %wd,
                         float %lr, float %eps, i1 %decay, i1 %zero)
  br label %row.end
sgd:
  call void @sgd_row(i64 %k, ptr %g, ptr %p, float %scale, float %wd, float %lr,
                     i1 %decay, i1 %zero)
  br label %row.end
row.end:
  %i.next = add i64 %i, 1
  %rows.left = icmp slt i64 %i.next, %n
  br i1 %rows.left, label %row, label %done
done:
  ret void
}
"""


@cache
def kernel() -> Any:
    from recir.backend.engine import text_function

    i32, i64, ptr, f32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    return text_function(TEXT, "recir_fused_step", ctypes.CFUNCTYPE(
        None, i32, i32, i64, i64, ptr, ptr, ptr, ptr, f32, f32, f32, f32))


def fits(*arrays: np.ndarray) -> bool:
    """Whether the kernel can take these arrays in place: float32, C order,
    writable, one shape."""
    shape = arrays[0].shape
    return all(a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
               and a.shape == shape for a in arrays)


def fused_step(kind: int, param: np.ndarray, grad: np.ndarray, slot: np.ndarray | None,
               rows: np.ndarray | slice, scale: float, weight_decay: float, lr: float,
               eps: float, zero: bool) -> None:
    """param (and Adagrad's `slot`) updated in place on `rows` (a row list,
    or `slice(None)` for all of it); callers check `fits`."""
    flags = (DECAY if weight_decay else 0) | (ZERO if zero else 0)
    if isinstance(rows, slice):
        n, k, address = 1, param.size, None
    else:
        rows = np.ascontiguousarray(rows, np.int64)
        if len(rows) > 1 and not np.all(rows[1:] > rows[:-1]):
            rows = np.unique(rows)  # a repeated row takes one step, as in NumPy
        if len(rows) and (rows[0] < 0 or rows[-1] >= param.shape[0]):
            raise IndexError(f"row index out of range for a table of {param.shape[0]} rows")
        n, k, address = len(rows), param.size // max(param.shape[0], 1), data_address(rows)
    kernel()(kind, flags, n, k, address, data_address(grad), data_address(param),
             None if slot is None else data_address(slot), scale, weight_decay, lr, eps)
