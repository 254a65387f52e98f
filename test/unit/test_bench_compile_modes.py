"""bench/compile_modes.py: each mode compiles as it says, its code computes
what the first mode's does, and the compiler is left as it was."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import compile_modes  # noqa: E402
from recir import gradients, pipeline  # noqa: E402


def test_each_mode_is_timed_and_the_compiler_restored(monkeypatch):
    split = []
    real = pipeline.split_module
    monkeypatch.setattr(pipeline, "split_module", lambda text, suffix: (
        split.append(suffix) or real(text, suffix)))
    compiling, splitting = pipeline.compile_module, pipeline.split_module
    seconds, per_call = compile_modes.measure(1, 1, calls=2)
    assert list(seconds) == list(per_call) == list(compile_modes.MODES)
    assert all(len(s) == 1 and s[0] > 0 for s in [*seconds.values(), *per_call.values()])
    assert len(split) == 2  # the parts mode's inference and gradient alone
    assert pipeline.compile_module is gradients.compile_module is compiling
    assert pipeline.split_module is splitting


def test_here_starts_no_child_and_restores_them():
    from recir.backend import llvm_workers

    child = llvm_workers.Child
    with compile_modes.mode("here"):
        with pytest.raises(OSError):
            llvm_workers.Child("", False)
    assert llvm_workers.Child is child
