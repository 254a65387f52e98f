"""A 0-d parameter is refused at the user's line: it became shape (1,), so
`params` no longer held what was given; a (1,) parameter read as `w[0]` is
the scalar, interpreted and native."""

from __future__ import annotations

import numpy as np
import pytest
from test_tracing_errors import fails_at

import recir

SCALARS = [np.float32(2.0), np.array(2.0, np.float32), 2.0, np.float64(2.0)]


def declare(value):
    with recir.trace("m") as m:
        x = m.input("x", recir.f32)
        m.param("w", value)  # HERE
        m.output(x)
    return m.traced


@pytest.mark.parametrize("value", SCALARS, ids=lambda v: type(v).__name__)
def test_a_0d_parameter_is_refused_at_its_line(value):
    fails_at(__file__, lambda: declare(value),
             r"^parameter 'w' is a scalar \(shape \(\)\): a parameter is an array; declare "
             r"shape \(1,\), e\.g\. np\.array\(\[value\], np\.float32\), and read it as w\[0\]$")


def test_a_one_element_parameter_is_read_as_a_scalar():
    with recir.trace("m") as m:
        x = m.input("x", recir.f32)
        w = m.param("w", np.array([2.5], np.float32))
        m.output(w[0] * x)
    model = m.traced
    assert model.params["w"].shape == (1,)
    assert model.run(3.0) == (7.5,)
    assert recir.compile(model, threads=1)(3.0) == (7.5,)
    model.params["w"] = 4.0  # a number fills the array
    assert model.params["w"].shape == (1,) and model.run(3.0) == (12.0,)
