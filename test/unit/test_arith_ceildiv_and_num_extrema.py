"""`arith.ceildivsi`, `maxnumf` and `minnumf`, which neither engine ran:
both now give MLIR's meaning, checked against plain Python. ceildivsi
rounds toward plus infinity and fails as the other signed divisions do (by
zero, INT_MIN / -1); maxnumf / minnumf give the other operand where one is
NaN, and order -0.0 below +0.0 (MLIR allows either zero), on scalars and on
rows."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from test_arith_floor_and_extrema import (
    FLOAT_CASES,
    FLOOR_CASES,
    I32_MIN,
    I64_MIN,
    extrema_rows_match,
    fails_in_both,
    same,
)
from test_interpreter_casts import both, function


@pytest.mark.parametrize("typ", ["i32", "i64"])
def test_ceildivsi_rounds_toward_plus_infinity(typ):
    text = function([typ, typ], typ, f"arith.ceildivsi %a0, %a1 : {typ}")
    cases = FLOOR_CASES + ([(I64_MIN, 3), (I64_MIN, -3), (I64_MIN, 1)] if typ == "i64" else [])
    for a, b in cases:
        want = math.ceil(Fraction(a, b))
        assert both(text, a, b) == (want, want), (a, b)


@pytest.mark.parametrize(("typ", "args", "message"), [
    ("i32", (5, 0), "'arith.ceildivsi' op division by zero"),
    ("i64", (-5, 0), "'arith.ceildivsi' op division by zero"),
    ("i32", (I32_MIN, -1), "'arith.ceildivsi' op overflows"),
    ("i64", (I64_MIN, -1), "'arith.ceildivsi' op overflows"),
])
def test_ceildivsi_fails_as_the_other_divisions(typ, args, message):
    fails_in_both(function([typ, typ], typ, f"arith.ceildivsi %a0, %a1 : {typ}"), args,
                  message)


def maxnumf(a: float, b: float) -> float:
    """The other operand where one is NaN; +0.0 above -0.0."""
    if math.isnan(a) or math.isnan(b):
        return b if math.isnan(a) else a
    if a == b:
        return b if math.copysign(1.0, a) < 0 else a
    return max(a, b)


def minnumf(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return b if math.isnan(a) else a
    if a == b:
        return a if math.copysign(1.0, a) < 0 else b
    return min(a, b)


NUM_CASES = [*FLOAT_CASES, (math.nan, math.nan), (-math.inf, math.nan), (math.nan, -0.0),
             (3.0, math.inf)]


@pytest.mark.parametrize(("op", "reference"), [("maxnumf", maxnumf), ("minnumf", minnumf)])
def test_num_extrema_ignore_nan(op, reference):
    text = function(["f32", "f32"], "f32", f"arith.{op} %a0, %a1 : f32")
    for a, b in NUM_CASES:
        interpreted, native = both(text, a, b)
        want = reference(a, b)
        assert same(interpreted, want), (a, b, interpreted)
        assert same(native, want), (a, b, native)


def test_num_extrema_on_rows(tmp_path):
    """The row forms (a loop LLVM vectorizes) give each row's scalar result."""
    extrema_rows_match(tmp_path, (maxnumf, minnumf), NUM_CASES)
