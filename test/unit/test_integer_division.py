"""`/` on traced i32 values divides as C does (toward zero), interpreted and
native; `//` and `%`, which Python floors, are refused at the user's line
rather than given C's truncation."""

from __future__ import annotations

import pytest
from test_tracing_errors import fails_at

import recir
from recir.diagnostics import RecirError

PAIRS = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-1, 5), (2**31 - 1, -1)]


def c_division(a: int, b: int) -> int:
    """Plain Python: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def divide_model():
    with recir.trace("div") as m:
        a, b = m.input("a", recir.i32), m.input("b", recir.i32)
        m.output(a / b)
    return m.traced


def test_i32_division_truncates_toward_zero():
    model = divide_model()
    native = recir.compile(model, threads=1)
    for a, b in PAIRS:
        want = c_division(a, b)
        assert model.run(a, b) == native(a, b) == (want,), (a, b)
    assert model.run(-7, 2) != (-7 // 2,)  # not Python's floor


@pytest.mark.parametrize(("args", "message"), [
    ((5, 0), "'arith.divsi' op division by zero"),
    ((-2**31, -1), "'arith.divsi' op overflows"),
])
def test_division_errors_agree(args, message):
    model = divide_model()
    for run in (model.run, recir.compile(model, threads=1)):
        with pytest.raises(RecirError, match=message):
            run(*args)


def traced_int(body):
    with recir.trace("m") as m:
        n = m.input("n", recir.i32)
        m.output(body(n))
    return m.traced


HINT = r"has no \*\*, // or %: .*`/` on i32 divides as C does, toward zero \(-7 / 2 is -3\)"


def test_floor_division_and_modulo_of_i32_are_refused_at_the_line():
    fails_at(__file__, lambda: traced_int(lambda n: n // 2), HINT)  # HERE
    fails_at(__file__, lambda: traced_int(lambda n: n % 2), HINT)  # HERE
    fails_at(__file__, lambda: traced_int(lambda n: -7 // n), HINT)  # HERE
    fails_at(__file__, lambda: traced_int(lambda n: 7 % n), HINT)  # HERE


def test_the_hint_is_for_integers_only():
    with pytest.raises(RecirError) as e:
        with recir.trace("m") as m:
            x = m.input("x", recir.f32)
            m.output(x // 2.0)
    assert "has no **, // or %" in str(e.value) and "on i32" not in str(e.value)
