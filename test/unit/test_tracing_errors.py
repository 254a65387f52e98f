"""Mistakes made while writing a model are a RecirError at the user's line
(marked `# HERE` below), not a traceback from NumPy or xDSL, an endless
trace, IR that verifies and fails in a pass, or a value silently changed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.diagnostics import RecirError
from recir.frontend import SubGraph, cond, trace, vector

def fails_at(file: str, make, pattern: str) -> None:
    """`make()` raises a RecirError located in `file` at a line marked
    `# HERE`, whose message matches `pattern`."""
    with pytest.raises(RecirError) as e:
        make()
    message = str(e.value)
    where, _, rest = message.partition(": error: ")
    assert where.startswith(file + ":"), message
    line = int(where[len(file) + 1:].split(":")[0])
    assert "# HERE" in Path(file).read_text().splitlines()[line - 1], (line, message)
    assert pytest.importorskip("re").search(pattern, rest), message


def fails_here(make, pattern: str) -> None:
    fails_at(__file__, make, pattern)


def model(body):
    with trace("m") as m:
        x = m.input("x", vector(4))
        m.output(body(m, x))
    return m.traced


def kept_value():
    kept = {}

    def body(m, x):
        kept["x"] = rf.tanh(x)
        return x

    model(body)
    return kept["x"]


def test_iterating_a_traced_value_is_refused():
    # (Python iterated through __getitem__ 0, 1, 2, ... and traced forever)
    fails_here(lambda: model(lambda m, x: rf.concat(list(x))), "no Python value")  # HERE


def test_python_conversions_and_numpy_on_traced_values():
    fails_here(lambda: model(lambda m, x: x * float(rf.sum(x))), "no Python value")  # HERE
    fails_here(lambda: model(lambda m, x: x * len(x)), "no Python value")  # HERE
    fails_here(lambda: model(lambda m, x: np.tanh(x)), "NumPy's tanh")  # HERE
    fails_here(lambda: model(lambda m, x: np.ones((2, 4)) @ x), "NumPy's matmul")  # HERE


def test_numpy_scalars_on_the_left_of_a_traced_value_are_python_numbers():
    """`np.float64(0.5) * x` (a NumPy float64 is a Python float, as
    `1 / np.sqrt(n)` makes): traced as `0.5 * x`, as before NumPy's ufuncs
    were refused on traced values (it became "NumPy's multiply")."""
    traced = model(lambda m, x: np.float64(1.0) - np.float64(0.5) * x + np.int64(2) * x)
    value = np.array([1.0, -2.0, 3.5, 0.25], np.float32)
    np.testing.assert_allclose(traced.run(value)[0], 1.0 - 0.5 * value + 2 * value,
                               rtol=1e-6)


def test_a_value_used_outside_the_region_that_made_it():
    """Values kept from another trace, a subgraph or a cond branch made IR
    that verified, then failed in a pass (a KeyError) or compiled."""
    old = kept_value()
    fails_here(lambda: model(lambda m, x: x + old), "outside the subgraph, cond branch or "  # HERE
               "trace that made it")

    def from_subgraph():
        with trace("m") as m:
            x = m.input("x", vector(4))
            with SubGraph("a", [recir.i32], [vector(4)]) as a:
                y = rf.tanh(x)
                a.output(y)
            with SubGraph("b", [recir.i32], [vector(4)]) as b:
                b.output(y)  # HERE
            m.output(b(1))

    fails_here(from_subgraph, r"tensor<4xf32>, made at .*:\d+:1\) is used outside")

    def from_branch():
        with trace("m") as m:
            n = m.input("n", recir.i32)
            kept = {}

            def then():
                kept["v"] = rf.zeros(4) + 1.0
                return kept["v"]

            cond(n < 0, then, lambda: rf.zeros(4))
            m.output(kept["v"])  # HERE

    fails_here(from_branch, "is used outside")


def test_python_numbers_a_type_cannot_hold():
    fails_here(lambda: model(lambda m, x: x * 1e300), "beyond float32's range")  # HERE
    fails_here(lambda: model(lambda m, x: x + rf.constant([1e300, 0, 0, 0])),  # HERE
               "beyond float32's range")

    def int_overflow():
        with trace("m") as m:
            n = m.input("n", recir.i32)
            m.output(n + 2**40)  # HERE

    fails_here(int_overflow, "1099511627776 does not fit in i32")
    fails_here(lambda: model(lambda m, x: x + rf.constant(["a", "b", "c", "d"])),  # HERE
               "constant takes numbers")


def test_op_arguments_that_are_not_integers_or_shapes():
    fails_here(lambda: model(lambda m, x: rf.slice(x, 1.5, 2)), "offset is a Python integer")  # HERE
    fails_here(lambda: model(lambda m, x: rf.concat([])), "at least one value")  # HERE
    fails_here(lambda: model(lambda m, x: rf.fill(1.0, [-2])), "dimensions are >= 0")  # HERE
    fails_here(lambda: model(lambda m, x: rf.zeros(-3)), "dimensions are >= 0")  # HERE


def declares(what):
    def make():
        with trace("m") as m:
            x = m.input("x", vector(3))
            what(m)
            m.output(x)
    return make


@pytest.mark.parametrize("declaration, pattern", [
    (lambda m: m.param("w", "abc"), "holds <U3 values, not real numbers"),  # HERE
    (lambda m: m.param("w", [[1, 2], [3]]), "parameter 'w' is not an array"),  # HERE
    (lambda m: m.param("w", np.ones(3, np.complex64)), "complex64 values"),  # HERE
    (lambda m: m.input(5, vector(3)), "name of an input is a non-empty string"),  # HERE
    (lambda m: m.input("y", "vector"), "an input type is an IR type"),  # HERE
    (lambda m: m.input("x", vector(3)), "'x' is declared twice"),  # HERE
    (lambda m: SubGraph("s", ["i32"], [recir.i32]), "an input type is an IR type"),  # HERE
    (lambda m: cond(True, rf.zeros(1), rf.zeros(1)), "cond takes functions"),  # HERE
])
def test_declarations_are_checked_where_they_are_made(declaration, pattern):
    fails_here(declares(declaration), pattern)


def test_a_model_name_is_checked():
    def unnamed():
        with trace("") as m:  # HERE
            m.output(m.input("x", vector(3)))

    fails_here(unnamed, "name of a model is a non-empty string")  # (an xDSL traceback)


def test_outputs_are_given_once():
    def twice():
        with trace("m") as m:
            x = m.input("x", vector(3))
            m.output(x)
            m.output(x)  # HERE

    fails_here(twice, "has its outputs already")


def test_a_subgraph_name_already_taken_is_refused_where_it_is_declared():
    """Named like the model, invokes of it called the model ('@m expects 0
    arguments, got 1'); a second subgraph of a name was reported at the first."""
    def like_the_model():
        with trace("m") as m:
            with SubGraph("m", [recir.i32], [recir.i32]) as s:  # HERE
                s.output(s.inputs[0])
            m.output(s(1))

    def twice():
        with trace("m") as m:
            with SubGraph("node", [recir.i32], [recir.i32]) as a:
                a.output(a.inputs[0])
            with SubGraph("node", [recir.i32], [recir.i32]) as b:  # HERE
                b.output(b.inputs[0])
            m.output(a(1))

    fails_here(like_the_model, "the name 'm' is taken")
    fails_here(twice, "the name 'node' is taken")


def test_power_floor_division_and_modulo_are_refused_at_the_line():
    fails_here(lambda: model(lambda m, x: x ** 2), r"has no \*\*, // or %")  # HERE
    fails_here(lambda: model(lambda m, x: x // 2), r"has no \*\*, // or %")  # HERE
