"""The interpreter computes f32 as native code does: each scalar operation
rounded to float32 (not Python's doubles), relu and max keeping the zero
native code keeps. NumPy's float32 arithmetic and compiled code are the
references."""

from __future__ import annotations

import math

import numpy as np
import pytest

import recir
import recir.frontend as rf
from recir.context import make_context
from recir.interpreter import run_function
from recir.parsing import parse_module

F32 = np.float32
OPS = {"addf": np.add, "subf": np.subtract, "mulf": np.multiply, "divf": np.divide}
PAIRS = [(0.1, 0.2), (0.35, 4.2), (1e38, 1e38), (3e38, -3e38), (1e-30, 1e-30),
         (16777216.0, 1.0), (-0.0, 0.0), (7.0, 3.0)]


def run_scalar(op: str, a: float, b: float) -> float:
    text = (f"func.func @f(%a: f32, %b: f32) -> f32 {{\n  %r = arith.{op} %a, %b : f32\n"
            "  func.return %r : f32\n}\n")
    (result,) = run_function(parse_module(make_context(), text), "f", [a, b])
    return result


def same_float(got: float, want: float) -> bool:
    """Equal, with the sign of zero, or both NaN."""
    return (math.isnan(got) and math.isnan(want)) or (
        got == want and math.copysign(1, got) == math.copysign(1, want))


@pytest.mark.parametrize("op", sorted(OPS))
def test_scalar_ops_round_to_float32(op: str):
    for a, b in PAIRS:
        with np.errstate(all="ignore"):
            want = float(OPS[op](F32(a), F32(b)))
        got = run_scalar(op, a, b)
        assert type(got) is float and same_float(got, want), (op, a, b, got, want)


def summing():
    """x added n times, the innermost first: f32 additions in a recursion."""
    with recir.trace("acc") as m:
        n, x = m.input("n", recir.i32), m.input("x", recir.f32)
        with recir.SubGraph("total", [recir.i32], [recir.f32]) as s:
            (k,) = s.inputs
            s.output(recir.cond(k <= 0, lambda: x * 0.0, lambda: x + s(k - 1)))
        m.output(s(n))
    return m.traced


def test_a_recursive_f32_sum_is_native_codes_and_numpys():
    model = summing()
    want = F32(0)
    for _ in range(13):
        want = F32(F32(0.35) + want)
    (interpreted,) = model.run(13, 0.35)
    (native,) = recir.compile(model, threads=1)(13, 0.35)
    assert type(interpreted) is float and type(native) is float
    assert interpreted == native == float(want)  # 4.5500002, not 4.5499999


def test_an_f32_product_beyond_range_is_inf_as_in_float32():
    with recir.trace("big") as m:
        x = m.input("x", recir.f32)
        m.output(x * 1e38 * 10.0)
    (interpreted,) = m.traced.run(1.0)
    (native,) = recir.compile(m.traced, threads=1)(1.0)
    assert interpreted == native == math.inf  # (a double held 1e39)


def vector_model(fn, n: int):
    with recir.trace("v") as m:
        x = m.input("x", recir.vector(n))
        m.output(fn(x))
    return m.traced


def test_relu_keeps_negative_zero_and_nan_as_native_code():
    x = np.array([-0.0, 0.0, np.nan, -1.0, 2.0], F32)
    model = vector_model(rf.relu, 5)
    (interpreted,) = model.run(x)
    (native,) = recir.compile(model, threads=1)(x)
    want = np.array([-0.0, 0.0, np.nan, 0.0, 2.0], F32)  # 0 where x < 0, else x
    for got in (interpreted, native):
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def first_largest(values: list[float]) -> float:
    """Plain Python: the first NaN, else the first element no later one exceeds."""
    best = values[0]
    for v in values[1:]:
        if (math.isnan(v) and not math.isnan(best)) or v > best:
            best = v
    return best


@pytest.mark.parametrize("values", [[0.0, -0.0, -0.0, -0.0], [-0.0, 0.0, 0.0, 0.0],
                                    [1.0, np.nan, 3.0, np.nan], [-0.0, -0.0, 0.0, -0.0]])
def test_max_is_the_first_largest_element_as_native_code(values: list[float]):
    x = np.array(values, F32)
    model = vector_model(rf.max, 4)
    (interpreted,) = model.run(x)
    (native,) = recir.compile(model, threads=1)(x)
    want = first_largest(values)
    assert same_float(interpreted, want) and same_float(native, want), (interpreted, native)


def test_max_of_rows_is_each_rows_first_largest():
    text = ("func.func @f(%a: tensor<?x3xf32>) -> tensor<?xf32> {\n"
            "  %r = tmath.max %a : tensor<?x3xf32> -> tensor<?xf32>\n"
            "  func.return %r : tensor<?xf32>\n}\n")
    rows = [[0.0, -0.0, -0.0], [-0.0, 0.0, 1.0], [2.0, np.nan, np.nan]]
    (got,) = run_function(parse_module(make_context(), text), "f", [np.array(rows, F32)])
    for value, row in zip(got.tolist(), rows, strict=True):
        assert same_float(value, first_largest(row)), (got, rows)
