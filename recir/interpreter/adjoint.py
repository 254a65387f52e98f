"""NumPy semantics of `adjoint`: accumulation adds into the caller's array in place."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from recir.dialects import adjoint
from recir.interpreter.tmath import checked_index, f32


@register_impls
class AdjointFunctions(InterpreterFunctions):
    @impl(adjoint.VecmatOp)
    def run_vecmat(self, interp: Interpreter, op: adjoint.VecmatOp, args: Any):
        return (f32(args[1].T @ args[0]),)

    @impl(adjoint.TransposeOp)
    def run_transpose(self, interp: Interpreter, op: adjoint.TransposeOp, args: Any):
        return (np.ascontiguousarray(args[0].T),)

    @impl(adjoint.PadOp)
    def run_pad(self, interp: Interpreter, op: adjoint.PadOp, args: Any):
        out = np.zeros(op.result.type.get_shape(), np.float32)
        offset = op.offset.value.data
        out[offset:offset + args[0].shape[0]] = args[0]
        return (out,)

    @impl(adjoint.OnehotOp)
    def run_onehot(self, interp: Interpreter, op: adjoint.OnehotOp, args: Any):
        out = np.zeros(op.result.type.get_shape(), np.float32)
        out[checked_index(op, args[0], out.shape[0])] = args[1]
        return (out,)

    @impl(adjoint.ReluGradOp)
    def run_relu_grad(self, interp: Interpreter, op: adjoint.ReluGradOp, args: Any):
        return (f32(np.where(args[0] > 0, args[1], 0)),)

    @impl(adjoint.BilinearLhsOp)
    def run_bilinear_lhs(self, interp: Interpreter, op: Any, args: Any):
        return (f32(np.einsum("kij,k,j->i", *args)),)

    @impl(adjoint.BilinearRhsOp)
    def run_bilinear_rhs(self, interp: Interpreter, op: Any, args: Any):
        return (f32(np.einsum("kij,k,i->j", *args)),)

    @impl(adjoint.AccumulateOp)
    def run_accumulate(self, interp: Interpreter, op: adjoint.AccumulateOp, args: Any):
        acc = args[0]
        acc += args[1]
        return ()

    @impl(adjoint.AccumulateOuterOp)
    def run_accumulate_outer(self, interp: Interpreter, op: Any, args: Any):
        acc = args[0]
        acc += np.outer(args[1], args[2])
        return ()

    @impl(adjoint.AccumulateRowOp)
    def run_accumulate_row(self, interp: Interpreter, op: Any, args: Any):
        acc, index, value = args
        acc[checked_index(op, index, acc.shape[0])] += value
        return ()

    @impl(adjoint.AccumulateBilinearOp)
    def run_accumulate_bilinear(self, interp: Interpreter, op: Any, args: Any):
        acc = args[0]
        acc += np.einsum("k,i,j->kij", *args[1:])
        return ()
