"""More mistakes users make while tracing: each is a RecirError at the
user's line (marked `# HERE`), not an AssertionError, TypeError or xDSL
traceback from inside recir, an error located in NumPy's files or at
another line, or a value silently different from Python's."""

from __future__ import annotations

import re

import numpy as np

import recir
from recir import frontend as rf
from recir.frontend import SubGraph, cond, trace
from test_tracing_errors import fails_at, model

X = np.array([1.0, -2.0, 3.5, 0.25], np.float32)


def fails_here(make, pattern: str) -> None:
    fails_at(__file__, make, pattern)


def scalars(body):
    """A model of an f32 `f`, an i32 `n` and a structure array `s`."""
    with trace("m") as m:
        f, n = m.input("f", recir.f32), m.input("n", recir.i32)
        s = m.input("s", recir.structure())
        out = body(f, n, s)
        m.output(*(out if isinstance(out, tuple) else (out,)))
    return m.traced


def test_products_and_slices_of_scalars():
    """`x @ scalar` and a slice of a scalar were AssertionErrors in row_types."""
    fails_here(lambda: scalars(lambda f, n, s: rf.zeros(4) @ f), "matvec")  # HERE
    fails_here(lambda: model(lambda m, x: x @ 2.0), "matvec")  # HERE
    fails_here(lambda: scalars(lambda f, n, s: n @ n), "matvec")  # HERE
    fails_here(lambda: scalars(lambda f, n, s: rf.slice(f, 0, 1)),  # HERE
               "slice takes a tensor, got f32")


def test_python_integers_a_type_cannot_hold():
    """An int beyond float32 was an OverflowError (from xDSL or `float()`); an
    int in [2**31, 2**32) became a negative i32 (`n < 3_000_000_000` false)."""
    fails_here(lambda: model(lambda m, x: x * 10**39), "beyond float32's range")  # HERE
    fails_here(lambda: model(lambda m, x: x * 10**5000),  # HERE
               r"number \(an integer of 16610 bits\) is beyond float32's range")
    fails_here(lambda: scalars(lambda f, n, s: n < 3_000_000_000),  # HERE
               "3000000000 does not fit in i32")
    fails_here(lambda: scalars(lambda f, n, s: s[2**31]), "does not fit in i32")  # HERE
    fits = scalars(lambda f, n, s: (n + (2**31 - 1), n + -(2**31) + 1))
    assert fits.run(0.0, 0, np.zeros(1, np.int32)) == (2**31 - 1, -(2**31) + 1)


def test_python_numbers_with_a_structure_array():
    """A splat of a dynamic i32 tensor was an xDSL traceback."""
    fails_here(lambda: scalars(lambda f, n, s: s + 1),  # HERE
               r"cannot combine the Python number 1 with a tensor<\?xi32> value")
    fails_here(lambda: scalars(lambda f, n, s: s < 0), "cannot combine")  # HERE


def test_numpy_scalars_on_either_side_are_python_numbers():
    """`np.float32(2) * x` was traced and `x * np.float32(2)`, `x[np.int64(1)]`
    and either order of `np.int32(3) < n` were refused."""
    traced = model(lambda m, x: x * np.float32(2) + np.float32(1)
                   + rf.fill(x[np.int64(1)] * np.ones(1)[0], [4]))
    np.testing.assert_allclose(traced.run(X)[0], X * 2 + 1 + X[1])
    both = scalars(lambda f, n, s: cond((np.int32(3) < n) & (n > np.int64(4)),
                                        lambda: f * np.float32(2), lambda: f))
    assert [both.run(1.5, v, np.zeros(1, np.int32))[0] for v in (3, 5)] == [1.5, 3.0]


def test_comparison_results_are_not_numbers():
    """i1 arithmetic wrapped (`(n > 0) + 1` was 0, Python's 2) and i1 ordered
    as signed (`(n > 0) < (n > 5)` was true for n = 3)."""
    fails_here(lambda: scalars(lambda f, n, s: (n > 0) + 1),  # HERE
               r"\(i1\) is not a number")
    fails_here(lambda: scalars(lambda f, n, s: (n > 0) + (n > 1)),  # HERE
               "is not a number")
    fails_here(lambda: scalars(lambda f, n, s: -(n > 0)), "is not a number")  # HERE
    fails_here(lambda: scalars(lambda f, n, s: (n > 0) < (n > 5)),  # HERE
               "has no order")
    same = scalars(lambda f, n, s: cond((n > 0) == (n < 5), lambda: 1, lambda: 0))
    assert [same.run(0.0, v, np.zeros(1, np.int32))[0] for v in (3, 7)] == [1, 0]


def test_lists_where_a_list_is_expected():
    """A single type, value or size where a list goes was a TypeError from
    recir, an IndexError, or a misleading "use recir.cond"."""
    def single_type():
        with trace("m") as m:
            with SubGraph("s", recir.i32, [recir.i32]) as s:  # HERE
                s.output(s.inputs[0])
            m.output(s(1))

    fails_here(single_type, r"input types are a list such as \[recir.i32\], got i32")
    fails_here(lambda: model(lambda m, x: rf.concat(x)), "concat takes a list")  # HERE
    fails_here(lambda: model(lambda m, x: rf.concat(y for y in [])),  # HERE
               "at least one value")
    fails_here(lambda: model(lambda m, x: rf.fill(1.0, 4)), "a shape is a list")  # HERE
    joined = model(lambda m, x: rf.concat(y for y in (x, x)))
    np.testing.assert_array_equal(joined.run(X)[0], np.concatenate([X, X]))


def test_input_and_parameter_names_that_ir_cannot_hold():
    """They were a ValueError from xDSL's name check."""
    def named(make):
        def trace_it():
            with trace("m") as m:
                make(m)
                m.output(1)
        return trace_it

    fails_here(named(lambda m: m.input("my n", recir.i32)),  # HERE
               "name of an input .*got 'my n'")
    fails_here(named(lambda m: m.param("0w", np.ones(2))), "got '0w'")  # HERE


def test_tracing_after_an_output_points_at_that_line():
    """Ops, inputs and declarations after an output, an output given in
    another region and `m.traced` before the output were xDSL verifier
    messages at the `with` line; branches taking arguments a TypeError in
    recir's call of them."""
    def op_after_output():
        with trace("m") as m:
            n = m.input("n", recir.i32)
            m.output(n)
            n + 1  # HERE

    def input_after_output():
        with trace("m") as m:
            m.output(m.input("n", recir.i32))
            m.param("w", np.ones(2))  # HERE

    def subgraph_after_output():
        with trace("m") as m:
            with SubGraph("s", [recir.i32], [recir.i32]) as s:
                s.output(s.inputs[0])
                SubGraph("t", [recir.i32], [recir.i32])  # HERE
            m.output(s(1))

    def output_in_a_branch():
        with trace("m") as m:
            n = m.input("n", recir.i32)
            with SubGraph("s", [recir.i32], [recir.i32]) as s:
                cond(n > 0, lambda: s.output(n) or 1, lambda: 2)  # HERE
            m.output(s(n))

    def model_output_in_a_subgraph():
        with trace("m") as m:
            n = m.input("n", recir.i32)
            with SubGraph("s", [recir.i32], [recir.i32]) as s:
                m.output(n)  # HERE
                s.output(n)

    def traced_too_early():
        with trace("m") as m:
            n = m.input("n", recir.i32)
            m.traced  # HERE
            m.output(n)

    def branches_with_arguments():
        with trace("m") as m:
            n = m.input("n", recir.i32)
            m.output(cond(n > 0, lambda k: k, lambda k: -k))  # HERE

    fails_here(traced_too_early, "model 'm' has no outputs: call m.output")
    fails_here(branches_with_arguments, "cond calls its branches with no arguments")
    fails_here(op_after_output, "after the output")
    fails_here(input_after_output, "declare inputs and parameters before")
    fails_here(subgraph_after_output, "after the output")
    fails_here(output_in_a_branch, "subgraph 's' gives its outputs in its own")
    fails_here(model_output_in_a_subgraph, "model 'm' gives its outputs in its own")


def test_numpy_functions_on_traced_values():
    """np.sum was located in NumPy's fromnumeric.py, np.concatenate and
    np.float32 were NumPy ValueErrors, np.dot an error printing an object array."""
    fails_here(lambda: model(lambda m, x: np.sum(x)), "NumPy's sum")  # HERE
    fails_here(lambda: model(lambda m, x: np.concatenate([x, x])),  # HERE
               "NumPy's concatenate")
    fails_here(lambda: model(lambda m, x: np.dot(np.ones((4, 4)), x)),  # HERE
               "NumPy's dot")
    fails_here(lambda: model(lambda m, x: np.array(x)), "no Python value")  # HERE
    fails_here(lambda: model(lambda m, x: np.float32(rf.sum(x))),  # HERE
               "no Python value")
    fails_here(lambda: model(lambda m, x: m.param("w", x)), "no Python value")  # HERE


def test_operators_a_traced_value_lacks():
    """abs(), ~, ^, << and >> were Python TypeErrors raised inside recir."""
    pattern = r"\(f32\) has no abs\(\), ~, \^, << or >>"
    fails_here(lambda: scalars(lambda f, n, s: abs(f)), pattern)  # HERE
    fails_here(lambda: scalars(lambda f, n, s: ~(n > 0)), r"\(i1\) has no abs")  # HERE
    fails_here(lambda: scalars(lambda f, n, s: 1 ^ n), r"\(i32\) has no abs")  # HERE
    fails_here(lambda: scalars(lambda f, n, s: n << 2), r"\(i32\) has no abs")  # HERE
    fails_here(lambda: scalars(lambda f, n, s: (f, 8 >> n)), r"\(i32\) has no abs")  # HERE


def test_values_of_two_types_meet_in_one_operator():
    """An f32 compared with an i32 raised xDSL's TypeError (no line); `+`
    named xDSL's type variable 'T'; a tensor times a scalar, its operand's
    base attribute."""
    fails_here(lambda: scalars(lambda f, n, s: f < n),  # HERE
               r"'<' takes two values of one type, got f32 and i32")
    fails_here(lambda: scalars(lambda f, n, s: n == f),  # HERE
               r"'==' takes two values of one type, got i32 and f32")
    fails_here(lambda: scalars(lambda f, n, s: f + n),  # HERE
               r"'\+' takes two values of one type, got f32 and i32")
    fails_here(lambda: scalars(lambda f, n, s: rf.zeros(4) * f),  # HERE
               r"'\*' takes two tensors or two scalars, got tensor<4xf32> and f32: make "
               r"the scalar a tensor with rf.fill\(s, shape\)")


def test_a_vector_or_matrix_size_is_fixed_and_at_least_one():
    """vector(-1) made a per-row type the reductions took for rows (sum
    returned its input); 2.5 or "3" raised an xDSL error with no line."""
    for size in (-1, 0, 2.5, "3", True):
        fails_here(lambda: recir.vector(size),  # HERE
                   rf"recir.vector's n is a fixed size of at least 1, got {re.escape(repr(size))}")
    fails_here(lambda: recir.matrix(3, 0),  # HERE
               "recir.matrix's cols is a fixed size of at least 1, got 0")
