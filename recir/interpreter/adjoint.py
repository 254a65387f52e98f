"""NumPy semantics of `adjoint`: accumulation adds into the caller's array in place."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from recir.dialects import adjoint
from recir.dialects.row_types import is_rows
from recir.interpreter.tmath import checked_index, checked_rows, f32


@register_impls
class AdjointFunctions(InterpreterFunctions):
    @impl(adjoint.VecmatOp)
    def run_vecmat(self, interp: Interpreter, op: adjoint.VecmatOp, args: Any):
        return (f32(args[0] @ args[1]),)  # wᵀ dy, or each row's

    @impl(adjoint.TransposeOp)
    def run_transpose(self, interp: Interpreter, op: adjoint.TransposeOp, args: Any):
        return (np.ascontiguousarray(args[0].T),)

    @impl(adjoint.PadOp)
    def run_pad(self, interp: Interpreter, op: adjoint.PadOp, args: Any):
        x, offset = args[0], op.offset.value.data
        if is_rows(op.result):
            out = np.zeros((len(x), *op.result.type.get_shape()[1:]), np.float32)
            out[:, offset:offset + x.shape[1]] = x
            return (out,)
        out = np.zeros(op.result.type.get_shape(), np.float32)
        out[offset:offset + x.shape[0]] = x
        return (out,)

    @impl(adjoint.OnehotOp)
    def run_onehot(self, interp: Interpreter, op: adjoint.OnehotOp, args: Any):
        if is_rows(op.result):
            index, scale = args
            out = np.zeros((len(index), op.result.type.get_shape()[1]), np.float32)
            out[np.arange(len(index)), checked_rows(index, out.shape[1])] = scale
            return (out,)
        out = np.zeros(op.result.type.get_shape(), np.float32)
        out[checked_index(args[0], out.shape[0])] = args[1]
        return (out,)

    @impl(adjoint.ReluGradOp)
    def run_relu_grad(self, interp: Interpreter, op: adjoint.ReluGradOp, args: Any):
        return (f32(np.where(args[0] > 0, args[1], 0)),)

    @impl(adjoint.BilinearLhsOp)
    def run_bilinear_lhs(self, interp: Interpreter, op: Any, args: Any):
        return (f32(np.einsum("kij,...k,...j->...i", *args)),)

    @impl(adjoint.BilinearRhsOp)
    def run_bilinear_rhs(self, interp: Interpreter, op: Any, args: Any):
        return (f32(np.einsum("kij,...k,...i->...j", *args)),)

    @impl(adjoint.AccumulateOp)
    def run_accumulate(self, interp: Interpreter, op: adjoint.AccumulateOp, args: Any):
        acc, value = args
        acc += value if value.ndim == acc.ndim else value.sum(axis=0)  # rows: each row
        return ()

    @impl(adjoint.AccumulateOuterOp)
    def run_accumulate_outer(self, interp: Interpreter, op: Any, args: Any):
        acc, lhs, rhs = args
        acc += lhs.T @ rhs if lhs.ndim == 2 else np.outer(lhs, rhs)  # rows: Σ outer
        return ()

    @impl(adjoint.AccumulateRowOp)
    def run_accumulate_row(self, interp: Interpreter, op: Any, args: Any):
        acc, index, value = args
        if isinstance(index, np.ndarray):  # rows: a scatter-add
            np.add.at(acc, checked_rows(index, acc.shape[0]), value)
            return ()
        acc[checked_index(index, acc.shape[0])] += value
        return ()

    @impl(adjoint.AccumulateBilinearOp)
    def run_accumulate_bilinear(self, interp: Interpreter, op: Any, args: Any):
        acc, scale = args[0], args[1]
        acc += np.einsum("nk,ni,nj->kij" if scale.ndim == 2 else "k,i,j->kij", *args[1:])
        return ()
