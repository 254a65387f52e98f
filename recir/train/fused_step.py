"""SGD and Adagrad steps on chosen rows in one pass over each row.

The NumPy step gathers a row set's gradient, parameter and Adagrad sum into
copies, makes a dozen elementwise passes over them with a temporary each,
then scatters two of them back: about fifteen trips through memory for each
touched row. It grows with the rows a step touches, and a data-parallel step
touches the union of N ranks' batches. This loop, built with the loop
builder in the llvm dialect (as the GEMM kernels are) and compiled once per
host, reads each float once and writes it once. It does the NumPy step's
float32 operations in its order with no fused multiply-add (no fast-math
flags: LLVM contracts nothing) and a correctly rounded square root and
division, so the results are the same bits.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

from recir.backend.array_address import data_address

SGD_KIND, ADAGRAD = 0, 1  # `kind`
DECAY, ZERO = 1, 2  # `flags`: add weight decay; clear the gradient rows used
ENTRY = "recir_fused_step"


def step_function() -> Any:
    """`@recir_fused_step(kind, flags, n, k, rows, grad, param, slot, scale,
    wd, lr, eps)`: rows `rows[0..n)` of k floats each, in the llvm dialect."""
    from xdsl.dialects import arith, llvm
    from xdsl.dialects.builtin import f32, i32, i64

    from recir.passes.llvm_functions import lower_to_llvm, new_function
    from recir.passes.loop_builder import PTR

    function, b, args = new_function(
        ENTRY, [i32, i32, i64, i64, PTR, PTR, PTR, PTR, f32, f32, f32, f32], private=False)
    kind, flags, n, k, rows, grad, param, slot, scale, wd, lr, eps = args

    def bit(mask: int) -> Any:
        return b.value(arith.CmpiOp(b.value(arith.AndIOp(flags, b.const(mask, i32))),
                                    b.const(0, i32), "ne"))

    decay, zero = bit(DECAY), bit(ZERO)

    def each_float(adagrad: bool):
        def row(r: Any, i: Any) -> None:
            base = r.mul(r.load(rows, i, i64), k)

            def column(c: Any, j: Any) -> None:
                at = c.add(base, j)
                g, x = c.load(grad, at), c.load(param, at)
                scaled = c.value(llvm.FMulOp(g, scale))
                decayed = c.value(llvm.FAddOp(scaled, c.value(llvm.FMulOp(wd, x))))
                d = c.value(llvm.SelectOp(decay, decayed, scaled))
                if adagrad:
                    total = c.value(llvm.FAddOp(c.load(slot, at), c.value(llvm.FMulOp(d, d))))
                    c.store(total, slot, at)
                    root = c.value(llvm.CallIntrinsicOp("llvm.sqrt.f32", [total], [f32]))
                    step = c.value(llvm.FDivOp(c.value(llvm.FMulOp(d, lr)),
                                               c.value(llvm.FAddOp(root, eps))))
                else:
                    step = c.value(llvm.FMulOp(lr, d))
                c.store(c.value(llvm.FSubOp(x, step)), param, at)
                c.store(c.value(llvm.SelectOp(zero, c.const(0.0, f32), g)), grad, at)

            r.each(k, column)
        return lambda e: e.each(n, row)

    adagrad = b.value(arith.CmpiOp(kind, b.const(ADAGRAD, i32), "eq"))
    b.when(adagrad, each_float(True), each_float(False))
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


@cache
def kernel() -> Any:
    from xdsl.dialects.builtin import ModuleOp

    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir

    engine = cached_engine("fused optimizer step", ENTRY,
                           lambda: to_llvm_ir(ModuleOp([step_function()])))
    i32, i64, ptr, f32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    fn = ctypes.CFUNCTYPE(None, i32, i32, i64, i64, ptr, ptr, ptr, ptr, f32, f32, f32, f32)(
        engine.address(ENTRY))
    fn.engine = engine  # the engine owns the code
    return fn


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
    if isinstance(rows, slice):  # the whole array as one row
        n, k, rows = 1, param.size, np.zeros(1, np.int64)
    else:
        rows = np.ascontiguousarray(rows, np.int64)
        if len(rows) > 1 and not np.all(rows[1:] > rows[:-1]):
            rows = np.unique(rows)  # a repeated row takes one step, as in NumPy
        if len(rows) and (rows[0] < 0 or rows[-1] >= param.shape[0]):
            raise IndexError(f"row index out of range for a table of {param.shape[0]} rows")
        n, k = len(rows), param.size // max(param.shape[0], 1)
    kernel()(kind, flags, n, k, data_address(rows), data_address(grad), data_address(param),
             None if slot is None else data_address(slot), scale, weight_decay, lr, eps)
