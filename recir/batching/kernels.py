"""Batched forward kernels: each op once per frontier, on arrays with a leading
frontier dimension.

A kernel is `fn(op, args, flags, frame) -> results`: `flags[k]` says whether
operand k is batched (its first axis is the frontier) or uniform (one value
for the whole frontier: a parameter, a constant). Matrix-vector products over
a frontier become one matrix-matrix product through NumPy's BLAS (OpenBLAS
SGEMM runs near this CPU's roof, see `bench/batching.py`); elementwise ops are
NumPy ufuncs that broadcast uniform operands; structure arrays are read with
fancy indexing. The semantics are `recir/interpreter/tmath.py`'s, row by row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import arith

from recir.batching import gemm, smallgemm, split
from recir.diagnostics import emit_error
from recir.dialects import tmath

Kernel = Callable[[Any, list[Any], tuple[bool, ...], Any], tuple[Any, ...]]
F32 = np.float32


class PerRoot:
    """An entry input that @f passes along: one value per root of the batch.
    `array` stacks fixed shapes ([roots, ...]); ragged structure arrays keep
    `flat` (concatenated), `offsets` and `lengths`."""

    def __init__(self, array: Any = None, flat: Any = None, offsets: Any = None,
                 lengths: Any = None):
        self.array, self.flat, self.offsets, self.lengths = array, flat, offsets, lengths

    @staticmethod
    def ragged(arrays: list[np.ndarray]) -> PerRoot:
        lengths = np.array([a.shape[0] for a in arrays], np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        flat = np.concatenate(arrays) if arrays else np.zeros(0)
        return PerRoot(flat=flat, offsets=offsets, lengths=lengths)


def sigmoid(x: np.ndarray) -> np.ndarray:
    # 0.5 * tanh(0.5 x) + 0.5: one transcendental pass, no overflow in exp
    out = np.multiply(x, F32(0.5))
    np.tanh(out, out=out)
    out *= F32(0.5)
    out += F32(0.5)
    return out


UNARY: dict[type, Callable[[np.ndarray], np.ndarray]] = {
    tmath.NegOp: np.negative, tmath.SigmoidOp: sigmoid, tmath.TanhOp: np.tanh,
    tmath.ReluOp: lambda x: np.maximum(x, F32(0)), tmath.ExpOp: np.exp, tmath.LogOp: np.log,
    arith.NegfOp: np.negative,
}
BINARY: dict[type, Callable[[Any, Any], Any]] = {
    tmath.AddOp: np.add, tmath.SubOp: np.subtract, tmath.MulOp: np.multiply,
    tmath.DivOp: np.divide, arith.AddfOp: np.add, arith.SubfOp: np.subtract,
    arith.MulfOp: np.multiply, arith.DivfOp: np.divide, arith.AddiOp: np.add,
    arith.SubiOp: np.subtract, arith.MuliOp: np.multiply, arith.AndIOp: np.bitwise_and,
    arith.OrIOp: np.bitwise_or, arith.XOrIOp: np.bitwise_xor,
    arith.MaxSIOp: np.maximum, arith.MinSIOp: np.minimum,
}
CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
        5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater,
        9: np.greater_equal}
CMPF = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal,
        6: np.not_equal, 8: np.equal, 9: np.greater, 10: np.greater_equal, 11: np.less,
        12: np.less_equal, 13: np.not_equal}


DTYPES: dict[Any, Any] = {}  # printing a type is slow: once per type


def dtype_of(typ: Any) -> Any:
    found = DTYPES.get(typ)
    if found is None:
        text = str(typ)
        found = DTYPES[typ] = (np.bool_ if text == "i1" else np.float32 if "f32" in text
                               else np.int32)
    return found


# Floating-point warnings are silenced once per run (`api.py`), not per op.


def unary(op, args, flags, frame):
    return (UNARY[type(op)](args[0]),)


def binary(op, args, flags, frame):
    out = BINARY[type(op)](args[0], args[1])
    if not (flags[0] or flags[1]):
        out = dtype_of(op.result.type)(out)
    return (out,)


def cmpi(op, args, flags, frame):
    return (CMPI[op.predicate.value.data](args[0], args[1]),)


def cmpf(op, args, flags, frame):
    pred = op.predicate.value.data
    if pred not in CMPF:
        raise emit_error(op, f"predicate {pred} has no batched kernel")
    return (CMPF[pred](args[0], args[1]),)


def select(op, args, flags, frame):
    return (np.where(args[0], args[1], args[2]),)


def convert(op, args, flags, frame):
    x = args[0]
    target = dtype_of(op.result.type)
    if isinstance(op, arith.ExtSIOp) and np.asarray(x).dtype == np.bool_:
        x = -np.asarray(x, np.int32)
    out = np.asarray(x).astype(target)
    return (out if flags[0] else target(out),)


def fill(op, args, flags, frame):
    shape = tmath.shape_of(op.result)
    if not flags[0]:
        return (np.full(shape, args[0], F32),)
    out = np.empty((frame.n, *shape), F32)
    out[...] = args[0].reshape((-1,) + (1,) * len(shape))
    return (out,)


# BLAS threads for one product: `THREADS[0]` (the run's count, set by `api.py`)
# from `PARALLEL_FLOPS` multiply-adds up, one below, where waking a second
# thread costs more than it saves. Where `split` runs (libgomp and CBLAS
# found) OpenBLAS stays on one thread and products are split by `split`.
class RunThreads(threading.local):
    """`[allowed, currently set]`, per Python thread: frontier calls of
    different functions may run at once from several (`api.py`). The count
    set is OpenBLAS's, which is the process's: `[1]` is this thread's last
    setting, which a call on another thread may have changed since (then
    a product runs on that call's count; `api.py` sets it again at each
    run's first product)."""

    def __init__(self) -> None:
        self.values = [1, 1]

    def __getitem__(self, index: Any) -> Any:
        return self.values[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self.values[index] = value


THREADS = RunThreads()
PARALLEL_FLOPS = 2_000_000


def split_threads() -> int:
    """The threads `split` cuts a product or row kernel for (1: none)."""
    return THREADS[0] if THREADS[0] > 1 and split.available() else 1


def split_for(work: int) -> int:
    """The threads to split `work` multiply-adds over (1: none); OpenBLAS is
    put on one thread for the parts."""
    threads = split_threads()
    if threads > 1 and work >= SPLIT_FLOPS:
        blas_threads_for(0)
        return threads
    return 1


def blas_threads_for(work: int) -> None:
    want = THREADS[0] if work >= PARALLEL_FLOPS and split_threads() == 1 else 1
    if want != THREADS[1]:
        from recir.batching import blas

        blas.set_threads(want)
        THREADS[1] = want


# Frontiers of 2 to SMALL_ROWS[threads] rows, and weights of fewer than
# NARROW rows (a classifier), go to `smallgemm.nt` (streams the weight once;
# `python bench/run.py smallgemm`); on OpenBLAS's two threads it splits the
# work and the kernel does not. Split products (SPLIT_FLOPS multiply-adds up)
# cut the weight's rows across threads. The kernel beat OpenBLAS on one core
# at every size measured (2-600 rows), and OpenBLAS on two cores up to ~48
# rows (`python bench/run.py smallgemm`).
SMALL_ROWS = {1: 4096, 2: 48}  # by OpenBLAS's threads: one, more
NARROW = 16
SPLIT_FLOPS = 131_072


def product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T: a frontier's rows times a weight."""
    m, n = x.shape[0], w.shape[0]
    if m == 1 or not smallgemm.fits(x, w):  # one row: BLAS's gemv beat both kernels
        blas_threads_for(m * w.size)
        return x @ w.T
    threads = split_for(m * w.size) if n >= NARROW else 1
    if threads > 1:
        return split.product_nt(x, w, threads, small=m <= SMALL_ROWS[1])
    one = split_threads() > 1 or THREADS[0] == 1  # OpenBLAS on one thread
    if n < NARROW or m <= (SMALL_ROWS[1] if one else SMALL_ROWS[2]):
        return smallgemm.nt(x, w)
    blas_threads_for(m * w.size)
    return x @ w.T  # one SGEMM for the frontier


def product_nn(dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dy @ w: a frontier's output gradients back through a weight, by
    `gemm.py`'s nn kernel (split by w's columns); one row, or arrays it does
    not take, by NumPy."""
    m, (n, k) = dy.shape[0], w.shape
    if m == 1 or not (dy.dtype == w.dtype == np.float32 and dy.ndim == 2
                      and dy.strides[1] == 4 and dy.strides[0] % 4 == 0
                      and w.flags.c_contiguous):
        blas_threads_for(dy.size * k)
        return dy @ w
    threads = split_for(dy.size * k)
    if threads == 1:
        return gemm.gemm(dy, w)
    out = np.empty((m, k), np.float32)
    split.run(gemm.nn_parts(m, k, n, dy.ctypes.data, dy.strides[0] // 4, w.ctypes.data, k,
                            out.ctypes.data, k, 0, threads), threads)
    return out


def matvec(op, args, flags, frame):
    w, x = args
    if flags == (False, True):
        return (product(x, w),)
    if flags == (True, True):
        return (np.matmul(w, x[:, :, None])[:, :, 0],)
    return (w @ x,)


def matmul(op, args, flags, frame):
    return (np.matmul(args[0], args[1]),)


def bilinear(op, args, flags, frame):
    v, x, y = args
    if flags != (False, True, True):
        subs = ",".join(("n" if f else "") + s for f, s in zip(flags, ("kij", "i", "j"),
                                                              strict=True))
        return (np.einsum(f"{subs}->{'n' if any(flags) else ''}k", v, x, y).astype(F32),)
    k, i, j = v.shape
    a = (x @ v.transpose(1, 0, 2).reshape(i, k * j)).reshape(-1, k, j)
    return (np.matmul(a, y[:, :, None])[:, :, 0],)


def concat(op, args, flags, frame):
    if not any(flags):
        return (np.concatenate(args, axis=0),)
    parts = [a if f else np.broadcast_to(a, (frame.n, *a.shape))
             for a, f in zip(args, flags, strict=True)]
    return (np.concatenate(parts, axis=1),)


def slice_(op, args, flags, frame):
    start = op.offset.value.data
    size = tmath.shape_of(op.result)[0]
    x = args[0]
    return (x[:, start:start + size] if flags[0] else x[start:start + size],)


def check_bounds(op, index, length) -> None:
    index = np.asarray(index)
    # one comparison: a negative index read as unsigned is past any length
    unsigned = (index.view(np.uint32) if index.dtype == np.int32 else
                index.astype(np.int64).view(np.uint64))
    if (unsigned >= length).any():
        bad = int(index[(index < 0) | (index >= length)].flat[0])
        raise emit_error(op, f"index {bad} out of range for length "
                         f"{int(np.max(length)) if np.ndim(length) == 0 else 'of its tree'}")


def gather(op, args, flags, frame):
    table, index = args
    if flags[0]:
        raise emit_error(op, "has no batched kernel for a per-invocation table")
    check_bounds(op, index, table.shape[0])
    return (table[index],)


def extract(op, args, flags, frame):
    array, index = args
    if isinstance(array, PerRoot):
        if array.flat is None:
            raise emit_error(op, "has no batched kernel for a fixed per-tree array")
        roots = frame.roots
        lengths = array.lengths[roots]
        check_bounds(op, index, lengths)
        return (array.flat[array.offsets[roots] + index],)
    if flags[0]:
        check_bounds(op, index, array.shape[1])
        return (array[np.arange(frame.n), index],)
    check_bounds(op, index, array.shape[0])
    return (array[index],)


def size(op, args, flags, frame):
    array = args[0]
    if isinstance(array, PerRoot):
        return (array.lengths[frame.roots].astype(np.int32),)
    return (np.int32(array.shape[-1]),)


def reduce_with(fn: Callable[..., Any]) -> Kernel:
    def run(op, args, flags, frame):
        out = fn(args[0], axis=-1)
        return (out.astype(dtype_of(op.result.type)) if flags[0] else
                dtype_of(op.result.type)(out),)
    return run


def sum_(op, args, flags, frame):
    out = args[0].sum(axis=-1, dtype=F32)
    return (out if flags[0] else F32(out),)


def softmax(op, args, flags, frame):
    x = args[0]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True),)


def softmax_xent(op, args, flags, frame):
    logits, label = args
    check_bounds(op, label, logits.shape[-1])
    shifted = logits - logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=-1))
    if not flags[0]:
        return (F32(lse - shifted[label]),)
    label = np.broadcast_to(label, (frame.n,))
    return (lse - shifted[np.arange(frame.n), label],)


def tanh_into(x: np.ndarray) -> np.ndarray:
    return np.tanh(x, out=x)


def sigmoid_into(x: np.ndarray) -> np.ndarray:
    x *= F32(0.5)
    np.tanh(x, out=x)
    x *= F32(0.5)
    x += F32(0.5)
    return x


INTO: dict[type, Callable[..., np.ndarray]] = {
    tmath.AddOp: lambda a, b: np.add(a, b, out=a), tmath.SubOp: lambda a, b: np.subtract(
        a, b, out=a), tmath.TanhOp: tanh_into, tmath.SigmoidOp: sigmoid_into,
}


def into(op, args, flags, frame):
    """The op written over its first operand: a fresh array nothing else reads
    (found by `Runner.program`); its gradient rule reads no operand values."""
    return (INTO[type(op)](*args),)


KERNELS: dict[type, Kernel] = {
    **{t: unary for t in UNARY}, **{t: binary for t in BINARY},
    arith.CmpiOp: cmpi, arith.CmpfOp: cmpf, arith.SelectOp: select,
    arith.SIToFPOp: convert, arith.FPToSIOp: convert, arith.ExtUIOp: convert,
    arith.ExtSIOp: convert, arith.IndexCastOp: convert,
    tmath.FillOp: fill, tmath.MatvecOp: matvec, tmath.MatmulOp: matmul,
    tmath.BilinearOp: bilinear, tmath.ConcatOp: concat, tmath.SliceOp: slice_,
    tmath.GatherOp: gather, tmath.ExtractOp: extract, tmath.SizeOp: size,
    tmath.SumOp: sum_, tmath.MaxOp: reduce_with(np.max),
    tmath.ArgmaxOp: reduce_with(np.argmax), tmath.SoftmaxOp: softmax,
    tmath.SoftmaxCrossEntropyOp: softmax_xent,
}
PER_ROOT_OPS = (tmath.ExtractOp, tmath.SizeOp)  # read an R operand without materializing


def constant(op: Any) -> Any:
    """The value of an `arith.constant` / `tmath.constant` (computed once)."""
    if isinstance(op, tmath.ConstantOp):
        shape = tmath.shape_of(op.result)
        values = np.asarray(op.value.get_values(), F32)
        return (np.broadcast_to(values, shape).copy() if values.size == 1
                else values.reshape(shape))
    value = op.value
    data = value.value.data if hasattr(value, "value") else value.data
    return dtype_of(op.result.type)(data)
