"""Codegen options that LLVM holds process-wide, chosen per object
(`engine.CodegenSetting`): the code is right under either setting, and an
emit never runs under another emit's setting."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

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


def test_an_engine_of_several_objects_runs_each_ones_code(tmp_path, monkeypatch):
    """`cached_engine` over several modules: each an object (compiled while
    the next is built) that the one engine calls into, stored apart in the
    cache, from which a second engine loads them without building any."""
    from recir.backend import engine as engine_module

    monkeypatch.setenv("RECIR_CACHE_DIR", str(tmp_path))
    built: list[str] = []

    def module(name: str, scale: float):
        def build() -> str:
            built.append(name)
            return SUM.replace("@total", f"@{name}").replace(
                "ret float %acc", f"%out = fmul float %acc, {scale:e}\n  ret float %out")
        return build

    xs = np.arange(1, 38, dtype=np.float32)
    for run in range(2):
        monkeypatch.setattr(engine_module, "_engines", {})  # a fresh process's
        engine = engine_module.cached_engine("parts", "test", module("once", 1.0),
                                             module("twice", 2.0), module("thrice", 3.0))
        for name, scale in [("once", 1), ("twice", 2), ("thrice", 3)]:
            total = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)(
                engine.address(name))
            assert total(xs.ctypes.data, len(xs)) == scale * float(xs.sum())
        assert built == ["once", "twice", "thrice"]  # the second run built none
    assert len(list(tmp_path.glob("*.o"))) == 3


def test_a_module_that_fails_to_build_fails_the_engine(tmp_path, monkeypatch):
    """An error building one of an engine's modules is the caller's (the
    ones queued behind it are dropped, the one compiling finishes)."""
    from recir.backend import engine as engine_module

    monkeypatch.setenv("RECIR_CACHE_DIR", str(tmp_path))

    def failing() -> str:
        raise RuntimeError("no module")

    with pytest.raises(RuntimeError, match="no module"):
        engine_module.cached_engine("parts", "failing", lambda: SUM, failing, lambda: SUM)


def test_every_function_starts_on_a_cache_line():
    """`engine.FUNCTION_ALIGNMENT`: each definition, whatever the size of the
    code before it, starts at a multiple of 64 bytes, and still runs; headers
    as llvmlite writes them (the `{` on a line of its own, attributes), one
    with its `{` on its line, and a quoted name holding a newline and a `{`
    (llvmlite does not escape newlines: the header spans two lines)."""
    from recir.backend.engine import FUNCTION_ALIGNMENT

    headers = {"first": "define float @first(ptr %xs, i64 %n)\n{",
               "second": "define internal float @second(ptr %xs, i64 %n) nounwind\n{",
               "third": "define float @third(ptr %xs, i64 %n) {",
               "odd\n{name": 'define float @"odd\n{name"(ptr %xs, i64 %n)\n{'}
    tiny = "define void @tiny{}()\n{{\n  ret void\n}}\n"  # a few bytes of code before each
    text = "".join(tiny.format(k) + SUM.replace("define float @total(ptr %xs, i64 %n) {", header)
                   for k, header in enumerate(headers.values()))
    text += "define ptr @second_address()\n{\n  ret ptr @second\n}\n"
    engine = Engine(compile_object(text))
    addresses = {name: engine.address(name) for name in headers if name != "second"}
    addresses["second"] = ctypes.CFUNCTYPE(ctypes.c_void_p)(engine.address("second_address"))()
    assert FUNCTION_ALIGNMENT == 64
    assert {name: a % FUNCTION_ALIGNMENT for name, a in addresses.items()} == dict.fromkeys(
        headers, 0)
    xs = np.arange(1, 8, dtype=np.float32)
    for address in addresses.values():
        total = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)(address)
        assert total(xs.ctypes.data, len(xs)) == float(xs.sum())
