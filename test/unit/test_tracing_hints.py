"""NumPy habits on traced values inside a recursive model (`h.T`, `h.sum()`,
`a & b` on f32) are refused at the user's line with what recir offers: they
were a bare AttributeError (no line, no hint) or arith's verifier naming its
operand."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.diagnostics import RecirError
from recir.models import tree_rnn
from recir.models.tree_common import trace_tree_model

PARAMS = tree_rnn.init_params(np.random.default_rng(0), hidden=4)


def line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text and "line_of" not in text)


def vector_transposed(p, ls, rs):
    return (rf.tanh(p["w"] @ rf.concat([ls[0], rs[0]]).T + p["b"]),)  # VECTOR-T


def matrix_transposed(p, ls, rs):
    return (rf.tanh(p["w"].T @ ls[0] + p["b"]),)  # MATRIX-T


def summed_by_method(p, ls, rs):
    return (rf.tanh(ls[0] * rf.fill(ls[0].sum(), [4]) + p["b"]),)  # SUM-METHOD


def anded_vectors(p, ls, rs):
    return (rf.tanh((ls[0] & rs[0]) + p["b"]),)  # AND-TENSORS


def ored_scalars(p, ls, rs):
    return (rf.tanh(ls[0] * rf.fill(ls[0][0] | rs[0][0], [4]) + p["b"]),)  # OR-SCALARS


CASES = [
    (vector_transposed, "VECTOR-T", "a traced value (tensor<8xf32>) has no attribute 'T': "
     "a vector has no orientation in recir: `w @ h` multiplies by it as a column, and a "
     "dot product is rf.sum(a * b)"),
    (matrix_transposed, "MATRIX-T", "a traced value (tensor<4x8xf32>) has no attribute "
     "'T': recir has no transpose: declare the parameter transposed (m.param(name, w.T)) "
     "and multiply with @"),
    (summed_by_method, "SUM-METHOD", "a traced value (tensor<4xf32>) has no attribute "
     "'sum': use rf.sum(x)"),
    (anded_vectors, "AND-TENSORS", "'&' combines comparisons (i1) or i32 values, got "
     "tensor<4xf32>: compare first, as in (a > 0) & (b > 0); on 0/1 masks of f32 write "
     "a * b"),
    (ored_scalars, "OR-SCALARS", "'|' combines comparisons (i1) or i32 values, got f32: "
     "compare first, as in (a > 0) | (b > 0); on 0/1 masks of f32 write a + b - a * b"),
]


@pytest.mark.parametrize(("combine", "marker", "message"), CASES,
                         ids=[marker for _, marker, _ in CASES])
def test_a_numpy_habit_in_a_recursive_cell_is_refused_at_its_line(combine, marker,
                                                                   message):
    with pytest.raises(RecirError) as info:
        trace_tree_model("cell", PARAMS, 4, lambda p, x: (x,), combine)
    assert str(info.value) == f"{__file__}:{line_of('# ' + marker)}:1: error: {message}"


def test_a_missing_attribute_is_still_an_attribute_error():
    """`hasattr` and `getattr` with a default answer as for any object."""
    with recir.trace("f") as m:
        x = m.input("x", recir.vector(3))
        assert not hasattr(x, "T")
        assert getattr(x, "sum", None) is None
        with pytest.raises(AttributeError, match="use rf.sum"):
            x.sum()  # noqa: B018
        assert x.shape == (3,)
        m.output(rf.sum(x))


def test_and_or_of_comparisons_still_trace_reflected_too():
    """`True & (n > 0)` was Python's TypeError (no reflected operator)."""
    with recir.trace("between") as m:
        n = m.input("n", recir.i32)
        inside = True & (n > 0) & (n < 10) | (n == 42)
        m.output(recir.cond(inside, lambda: n * 0 + 1, lambda: n * 0))
    assert [m.traced.run(v)[0] for v in (-1, 0, 1, 9, 10, 42)] == [0, 0, 1, 1, 0, 1]
