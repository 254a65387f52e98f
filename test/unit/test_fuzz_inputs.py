"""Property: argument conversion never narrows or reinterprets silently.
Integer arrays of any width convert to int32 with the same values exactly
when every value fits, and are refused otherwise; scalars are accepted by
the interpreter and native code alike exactly when they fit their type, and
then give the same result. `make fuzz` runs more examples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_input_checks import SCALARS  # the same program
from xdsl.dialects.builtin import TensorType, i32

from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import coerce_argument, run_function
from recir.parsing import parse_module
from recir.pipeline import compile_module

STRUCTURE = TensorType(i32, [-1])
INTEGER_DTYPES = st.sampled_from([np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                  np.uint32, np.int64, np.uint64])


@given(array=INTEGER_DTYPES.flatmap(lambda d: hnp.arrays(d, st.integers(0, 6))))
def test_integer_arrays_convert_exactly_or_are_refused(array):
    fits = all(-(2**31) <= int(v) < 2**31 for v in array)
    try:
        got = coerce_argument(0, array, STRUCTURE)
    except RecirError as e:
        assert not fits and "does not fit in int32" in str(e)
        return
    assert fits and got.dtype == np.int32
    assert [int(v) for v in got] == [int(v) for v in array]


@given(array=hnp.arrays(st.sampled_from([np.float16, np.float32, np.float64,
                                         np.complex64, np.bool_]), st.integers(0, 4)))
def test_non_integer_arrays_are_never_structure_arrays(array):
    with pytest.raises(RecirError, match="expects (integers|a numeric array)"):
        coerce_argument(0, array, STRUCTURE)


RANGES = [(-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1), (0, 1)]


@pytest.fixture(scope="module")
def scalar_module():
    module = parse_module(make_context(), SCALARS, "scalars.mlir")
    return module, compile_module(module, "f")


def around(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [low - 1, low, high, high + 1]
    return st.sampled_from(edges) | st.integers(low - 4, high + 4) | st.integers(
        -(2**70), 2**70)


def wrap64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


@given(a=around(*RANGES[0]), b=around(*RANGES[1]), c=around(*RANGES[2]))
def test_scalars_fit_their_type_in_interpreter_and_jit(scalar_module, a, b, c):
    module, native = scalar_module
    fits = all(low <= v <= high for v, (low, high) in zip((a, b, c), RANGES, strict=True))
    for call in (lambda *x: run_function(module, "f", x), native):
        if not fits:
            with pytest.raises(RecirError, match="does not fit"):
                call(a, b, c)
            continue
        assert call(a, b, c) == (wrap64(a + b + c),)
