"""Codegen options that LLVM holds process-wide, chosen per object
(`engine.CodegenSetting`): the code is right under either setting, and an
emit never runs under another emit's setting."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from recir.backend.engine import LSR_GATE, Engine, compile_object

SUM = """
define float @total(ptr %xs, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %body]
  %acc = phi float [0.0, %entry], [%sum, %body]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %p = getelementptr float, ptr %xs, i64 %i
  %x = load float, ptr %p
  %sum = fadd float %acc, %x
  %next = add i64 %i, 1
  br label %loop
done:
  ret float %acc
}
"""


def test_a_loop_computes_the_same_compiled_as_row_code_or_not():
    xs = np.arange(1, 38, dtype=np.float32)
    for rows in (False, True, False):
        engine = Engine(compile_object(SUM, rows=rows))
        total = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)(
            engine.address("total"))
        assert total(xs.ctypes.data, len(xs)) == float(xs.sum())


def test_an_emit_under_the_other_setting_waits_and_one_under_the_same_does_not():
    gate = LSR_GATE  # (its own state must follow every change of the flag)
    entered, events = threading.Event(), []

    def other(enabled: bool, name: str) -> None:
        with gate.setting(enabled):
            events.append(name)
            entered.set()

    with gate.setting(False):
        waiting = threading.Thread(target=other, args=(True, "other setting"))
        waiting.start()
        same = threading.Thread(target=other, args=(False, "same setting"))
        same.start()
        same.join(timeout=10)
        assert events == ["same setting"]
        waiting.join(timeout=0.2)
        assert waiting.is_alive()  # still held back by this emit
        events.append("released")
    waiting.join(timeout=10)
    assert events == ["same setting", "released", "other setting"]
    with gate.setting(True):  # LLVM's default again for the rest of the process
        assert gate.current
