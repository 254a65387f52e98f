"""Python's operators on traced f32 scalars mean what they mean in Python:
`x != y` is true of NaN (`arith.cmpf one` was false), `-x` of 0.0 is -0.0
(`0.0 - x` was +0.0, so `1 / -x` was +inf). Interpreted and native runs are
checked against Python's own result on float32 values."""

from __future__ import annotations

import math

import numpy as np
import pytest

import recir

NAN = float("nan")


@pytest.fixture(scope="module")
def model():
    with recir.trace("ops") as m:
        x, y = m.input("x", recir.f32), m.input("y", recir.f32)
        m.output(x != y, -x, 1.0 / -x)
    return m.traced


@pytest.fixture(scope="module")
def native(model):
    return recir.compile(model, threads=1)


def python(x: float, y: float) -> tuple[bool, float, float]:
    """The same expressions on float32 values in Python (1 / -0.0 as IEEE's -inf)."""
    x, y = float(np.float32(x)), float(np.float32(y))
    with np.errstate(divide="ignore", invalid="ignore"):
        return x != y, -x, float(np.float32(1.0) / np.float32(-x))


def same(got: tuple, want: tuple) -> bool:
    """Equal, with the sign of zero; NaN matches NaN."""
    return all(
        (isinstance(w, float) and math.isnan(w) and math.isnan(g))
        or (g == w and type(g) is type(w)
            and (not isinstance(w, float) or math.copysign(1, g) == math.copysign(1, w)))
        for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize(("x", "y"), [(NAN, 1.0), (NAN, NAN), (1.0, NAN), (0.0, 0.0),
                                  (-0.0, 0.0), (2.5, 2.5), (2.5, -1.0)])
def test_inequality_and_negation_are_pythons(model, native, x, y):
    want = python(x, y)
    assert same(model.run(x, y), want), (model.run(x, y), want)
    assert same(native(x, y), want), (native(x, y), want)


def test_inequality_picks_a_branch_as_python_does():
    with recir.trace("pick") as m:
        x, y = m.input("x", recir.f32), m.input("y", recir.f32)
        m.output(recir.cond(x != y, lambda: 1.0, lambda: 2.0))
    native = recir.compile(m.traced, threads=1)
    for x, y in [(NAN, NAN), (NAN, 1.0), (1.0, 1.0)]:
        want = 1.0 if x != y else 2.0
        assert m.traced.run(x, y) == native(x, y) == (want,), (x, y)
