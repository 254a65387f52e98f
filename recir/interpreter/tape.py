"""Interpreter semantics of `tape`: a frame is a dict from byte offset to value.

Values are immutable here (ndarrays are never written in place, except
gradient accumulators, which are never saved), so saving keeps a reference.
"""

from __future__ import annotations

from typing import Any

from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from recir.diagnostics import emit_error
from recir.dialects import tape


@register_impls
class TapeFunctions(InterpreterFunctions):
    @impl(tape.NewOp)
    def run_new(self, interp: Interpreter, op: tape.NewOp, args: Any):
        return ({},)

    @impl(tape.SaveOp)
    def run_save(self, interp: Interpreter, op: tape.SaveOp, args: Any):
        value, frame = args
        frame[op.offset.value.data] = value
        return ()

    @impl(tape.LoadOp)
    def run_load(self, interp: Interpreter, op: tape.LoadOp, args: Any):
        frame, offset = args[0], op.offset.value.data
        if offset not in frame:
            raise emit_error(op, f"reads offset {offset} of a frame where nothing was saved")
        return (frame[offset],)
