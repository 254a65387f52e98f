"""Tracing: operators emit the right ops, recursion works, errors name the user's line."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.diagnostics import RecirError


def line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text and "line_of" not in text)


def test_mutual_recursion_and_cond_run():
    with recir.trace("parity") as m:
        n = m.input("n", recir.i32)
        even = recir.SubGraph("even", [recir.i32], [recir.i32])
        odd = recir.SubGraph("odd", [recir.i32], [recir.i32])
        with even:
            (k,) = even.inputs
            even.output(recir.cond(k == 0, lambda: k * 0 + 1, lambda: odd(k - 1)))
        with odd:
            (k,) = odd.inputs
            odd.output(recir.cond(k == 0, lambda: k * 0, lambda: even(k - 1)))
        m.output(even(n))
    traced = m.traced
    assert [traced.run(v)[0] for v in range(6)] == [1, 0, 1, 0, 1, 0]
    text = str(traced)
    assert "invoke.subgraph @even" in text and "invoke.invoke @odd" in text


def test_operators_emit_tmath_and_arith():
    with recir.trace("f") as m:
        x = m.input("x", recir.vector(3))
        w = m.param("w", np.eye(3, dtype=np.float32) * 2)
        y = -(w @ x) * 2.0 + x / x - x
        m.output(rf.sum(y))
    text = str(m.traced)
    for op in ("tmath.matvec", "tmath.neg", "tmath.mul", "tmath.div", "tmath.sub", "tmath.sum"):
        assert op in text
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    assert m.traced.run(x)[0] == pytest.approx(float(np.sum(-(2 * x) * 2 + 1 - x)))


def test_shape_error_points_at_the_users_line():
    with pytest.raises(RecirError) as info:
        with recir.trace("bad") as m:
            x = m.input("x", recir.vector(3))
            w = m.param("w", np.zeros((4, 2), np.float32))
            m.output(w @ x)  # SHAPE-ERROR
    message = str(info.value)
    assert message.startswith(f"{__file__}:{line_of('# SHAPE-ERROR')}:")
    assert "'tmath.matvec' op matrix 4x2 cannot multiply vector 3" in message


def test_unsupported_value_and_branch_mismatch_are_located():
    with pytest.raises(RecirError, match=rf"{line_of('# BAD-VALUE')}:1: error: cannot use a Python str"):
        with recir.trace("bad") as m:
            x = m.input("x", recir.i32)
            m.output(x + "one")  # BAD-VALUE
    with pytest.raises(RecirError, match=rf"{line_of('# BRANCHES')}:1: error: cond branches"):
        with recir.trace("bad") as m:
            x = m.input("x", recir.i32)
            m.output(recir.cond(x < 0, lambda: x, lambda: 1.5))  # BRANCHES


def test_subgraph_output_types_are_checked():
    with pytest.raises(RecirError, match="returns \\(f32\\) but declares \\(i32\\)"):
        with recir.trace("bad") as m:
            with recir.SubGraph("s", [recir.i32], [recir.i32]) as s:
                s.output(1.5)
            m.output(s(m.input("x", recir.i32)))


def test_a_float64_parameter_beyond_float32_is_refused_not_made_infinite():
    """A float64 parameter of 1e300 became an f32 inf silently (at tracing and
    on assignment); NaN and inf given stay as they are."""
    def traced(w):
        with recir.trace("f") as m:
            x = m.input("x", recir.vector(2))
            m.output(rf.sum(m.param("w", w) * x))
        return m.traced

    # (at tracing, located at the user's line; on assignment, no line)
    message = (r"(^|\.py:\d+:1: )error: parameter 'w' holds 1e\+300, which is beyond "
               r"float32's range$")
    with pytest.raises(RecirError, match=message):
        traced(np.array([1e300, 0.0]))
    fine = traced(np.zeros(2))
    with pytest.raises(RecirError, match=message):
        recir.TracedModel(fine.module, fine.entry, fine.input_names,
                          {"w": np.array([0.0, 1e300])})
    model = traced(np.array([np.nan, -np.inf]))
    with pytest.raises(RecirError, match=message):
        model.params["w"] = np.array([1e300, 1.0])
    assert np.isnan(model.params["w"][0]) and model.params["w"][1] == -np.inf  # untouched
    model.params["w"] = np.array([2.0, 3.0])  # float64 in range: copied
    assert model.run(np.array([1.0, 1.0], np.float32))[0] == 5.0
