"""A 0-d constant (`rf.constant(2.0)`, `rf.zeros()`: `tensor<f32>`) or input
runs in the interpreter as in native code, a 0-d float32 array: NumPy could
not broadcast the splat's one value to shape ()."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import TensorType, f32

import recir
import recir.frontend as rf

CASES = {"constant": (lambda: rf.constant(2.0), 2.0), "zeros": (rf.zeros, 0.0),
         "constant of a 0-d array": (lambda: rf.constant(np.array(-1.5)), -1.5)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_0d_constant_is_a_0d_array(name: str):
    make, value = CASES[name]
    with recir.trace("m") as m:
        x = m.input("x", recir.f32)
        m.output(make(), x)
    want = np.array(value, np.float32)
    for run in (m.traced.run, recir.compile(m.traced, threads=1)):
        got, _ = run(1.0)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        assert got.shape == () and got == want


def test_a_0d_input_stays_0d():
    """`coerce_tensor`'s conversion made a 0-d array shape (1,) for the
    interpreter; native code returned it 0-d."""
    with recir.trace("m") as m:
        t = m.input("t", TensorType(f32, []))
        m.output(t, rf.sum(t))
    given = np.array(2.5, np.float32)
    for run in (m.traced.run, recir.compile(m.traced, threads=1)):
        got, total = run(given)
        assert got.shape == () and got == given and total == 2.5
    for run in (m.traced.run, recir.compile(m.traced, threads=1)):
        got, total = run(np.array(2.5))  # (float64, narrowed; native: an IndexError)
        assert got.shape == () and got.dtype == np.float32 and total == 2.5
