"""Batched VJP rules: the reverse of each kernel in `kernels.py`, once per frontier.

`rule(op, vals, outs, dys, flags) -> cotangent per operand (None: none)`.
Rows of a frontier are independent, so a batched operand's cotangent has the
same rows; a uniform operand's (a parameter) is the sum over the rows, taken
inside the rule where a product does it cheaper (`dW = dY^T X`, one SGEMM per
frontier: Cavs' lazy batching of parameter gradients) and by the caller
otherwise. Embedding rows come back as `Rows` (indices and row cotangents,
added with `np.add.at`), slices as `Slice` (added into one buffer), a
frontier's weight gradient as `Outer` (added by one SGEMM with beta = 1), so
no table-, matrix- or vector-sized temporaries are made per use. The math is
`recir/autodiff/rules.py`'s, row by row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import arith

from recir.batching.kernels import product_nn, sigmoid
from recir.dialects import tmath

Rule = Callable[[Any, list[Any], list[Any], list[Any], tuple[bool, ...]], list[Any]]
F32 = np.float32


class Rows:
    """Cotangent rows `dy` for rows `index` of a table (an embedding gather)."""

    def __init__(self, index: np.ndarray, dy: np.ndarray):
        self.index, self.dy = index, dy


class Outer:
    """Cotangent `dy.T @ x` of a uniform matrix, summed over a frontier's rows."""

    def __init__(self, dy: np.ndarray, x: np.ndarray):
        self.dy, self.x = dy, x

    def dense(self) -> np.ndarray:
        return self.dy.T @ self.x


class Slice:
    """Cotangent `dy` of `x[..., start:start + len]` for an `x` of `shape`."""

    def __init__(self, start: int, dy: np.ndarray, shape: tuple[int, ...]):
        self.start, self.dy, self.shape = start, dy, shape


def add(op, vals, outs, dys, flags):
    return [dys[0], dys[0]]


def sub(op, vals, outs, dys, flags):
    return [dys[0], -dys[0]]


def mul(op, vals, outs, dys, flags):
    return [dys[0] * vals[1], dys[0] * vals[0]]


def div(op, vals, outs, dys, flags):
    da = dys[0] / vals[1]
    return [da, -da * outs[0]]


def neg(op, vals, outs, dys, flags):
    return [-dys[0]]


def sigmoid_(op, vals, outs, dys, flags):
    y = outs[0]
    return [dys[0] * y * (F32(1) - y)]


def tanh(op, vals, outs, dys, flags):
    y = outs[0]
    return [dys[0] * (F32(1) - y * y)]


def relu(op, vals, outs, dys, flags):
    return [dys[0] * (vals[0] > 0)]


def exp(op, vals, outs, dys, flags):
    return [dys[0] * outs[0]]


def log(op, vals, outs, dys, flags):
    return [dys[0] / vals[0]]


def nothing(op, vals, outs, dys, flags):
    return [None] * len(vals)


def fill(op, vals, outs, dys, flags):
    dy = dys[0]
    return [dy.reshape(dy.shape[0], -1).sum(axis=1) if flags[0] else F32(dy.sum())]


def matvec(op, vals, outs, dys, flags):
    (w, x), dy = vals, dys[0]
    if flags == (False, True):
        return [Outer(dy, x), product_nn(dy, w)]
    if flags == (True, True):
        return [dy[:, :, None] * x[:, None, :], np.matmul(dy[:, None, :], w)[:, 0, :]]
    if flags == (True, False):
        return [dy[:, :, None] * x, np.matmul(dy[:, None, :], w)[:, 0, :]]
    return [np.outer(dy, x), dy @ w]


def swap(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def matmul(op, vals, outs, dys, flags):
    (a, b), dy = vals, dys[0]
    return [dy @ swap(b), swap(a) @ dy]


def bilinear(op, vals, outs, dys, flags):
    (v, x, y), dz = vals, dys[0]
    if flags != (False, True, True):
        raise NotImplementedError("bilinear gradient for these operand kinds")
    k, i, j = v.shape
    n = x.shape[0]
    vy = (y @ v.transpose(2, 0, 1).reshape(j, k * i)).reshape(n, k, i)
    vx = (x @ v.transpose(1, 0, 2).reshape(i, k * j)).reshape(n, k, j)
    dx = np.matmul(dz[:, None, :], vy)[:, 0, :]
    dy_ = np.matmul(dz[:, None, :], vx)[:, 0, :]
    dv = (dz.T @ (x[:, :, None] * y[:, None, :]).reshape(n, i * j)).reshape(k, i, j)
    return [dv, dx, dy_]


def concat(op, vals, outs, dys, flags):
    dy, grads, start = dys[0], [], 0
    axis = 1 if any(flags) else 0
    for x, f in zip(vals, flags, strict=True):
        size = x.shape[-1] if x.ndim > axis else 1
        part = dy[:, start:start + size] if axis else dy[start:start + size]
        grads.append(part if f or not axis else part.sum(axis=0))
        start += size
    return grads


def slice_(op, vals, outs, dys, flags):
    return [Slice(op.offset.value.data, dys[0], vals[0].shape)]


def gather(op, vals, outs, dys, flags):
    return [Rows(np.asarray(vals[1]), dys[0]), None]


def sum_(op, vals, outs, dys, flags):
    x, dy = vals[0], dys[0]
    return [np.broadcast_to(np.asarray(dy, F32)[..., None], x.shape)]


def max_(op, vals, outs, dys, flags):
    x, dy = vals[0], np.asarray(dys[0], F32)
    g = np.zeros_like(x)
    at = np.argmax(x, axis=-1)
    if x.ndim == 1:
        g[at] = dy
    else:
        g[np.arange(x.shape[0]), at] = dy
    return [g]


def softmax(op, vals, outs, dys, flags):
    y, dy = outs[0], dys[0]
    return [y * (dy - (dy * y).sum(axis=-1, keepdims=True))]


def softmax_xent(op, vals, outs, dys, flags):
    logits, label = vals
    dl = np.asarray(dys[0], F32)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    if logits.ndim == 1:
        p[label] -= 1
        return [p * dl, None]
    p[np.arange(p.shape[0]), np.broadcast_to(label, (p.shape[0],))] -= 1
    return [p * dl[:, None], None]


def select(op, vals, outs, dys, flags):
    cond, dy = vals[0], dys[0]
    zero = np.zeros_like(dy)
    return [None, np.where(cond, dy, zero), np.where(cond, zero, dy)]


VJP: dict[type, Rule] = {
    tmath.AddOp: add, tmath.SubOp: sub, tmath.MulOp: mul, tmath.DivOp: div,
    tmath.NegOp: neg, tmath.SigmoidOp: sigmoid_, tmath.TanhOp: tanh, tmath.ReluOp: relu,
    tmath.ExpOp: exp, tmath.LogOp: log, tmath.FillOp: fill, tmath.MatvecOp: matvec,
    tmath.MatmulOp: matmul, tmath.BilinearOp: bilinear, tmath.ConcatOp: concat,
    tmath.SliceOp: slice_, tmath.GatherOp: gather, tmath.SumOp: sum_, tmath.MaxOp: max_,
    tmath.SoftmaxOp: softmax, tmath.SoftmaxCrossEntropyOp: softmax_xent,
    arith.AddfOp: add, arith.SubfOp: sub, arith.MulfOp: mul, arith.DivfOp: div,
    arith.NegfOp: neg, arith.SelectOp: select,
}
# ops whose results carry no cotangent (integers, indices, predicates)
NO_GRAD = (tmath.ExtractOp, tmath.SizeOp, tmath.ArgmaxOp, arith.SIToFPOp, arith.UIToFPOp,
           arith.FPToSIOp)

__all__ = ["NO_GRAD", "VJP", "Outer", "Rows", "Slice", "sigmoid"]
