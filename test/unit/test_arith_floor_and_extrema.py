"""`arith.floordivsi`, `maximumf` and `minimumf`, which the interpreter ran
and native code refused as unsupported: both now give MLIR's meaning,
checked against plain Python. floordivsi rounds toward minus infinity and
fails as the other signed divisions do (by zero, INT_MIN / -1);
maximumf / minimumf give NaN if either operand is NaN and order -0.0 below
+0.0, on scalars and on rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_interpreter_casts import both, function
from xdsl.dialects import func

import recir
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.frontier_compile import compile_rows
from recir.interpreter import run_function
from recir.parsing import parse_module

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN = -(2**63)
FLOOR_CASES = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (6, -3), (0, -5),
               (-1, 5), (1, -5), (I32_MIN, 1), (I32_MIN, 2), (I32_MIN, 3), (I32_MAX, -1),
               (I32_MAX, -2), (-1, I32_MIN), (I32_MIN, I32_MIN)]


@pytest.mark.parametrize("typ", ["i32", "i64"])
def test_floordivsi_rounds_toward_minus_infinity(typ):
    text = function([typ, typ], typ, f"arith.floordivsi %a0, %a1 : {typ}")
    cases = FLOOR_CASES + ([(I64_MIN, 3), (I64_MIN, -3)] if typ == "i64" else [])
    for a, b in cases:
        assert both(text, a, b) == (a // b, a // b), (a, b)  # Python's // floors


@pytest.mark.parametrize(("typ", "args", "message"), [
    ("i32", (5, 0), "'arith.floordivsi' op division by zero"),
    ("i32", (I32_MIN, -1), "'arith.floordivsi' op overflows"),
    ("i64", (I64_MIN, -1), "'arith.floordivsi' op overflows"),
])
def test_floordivsi_fails_as_the_other_divisions(typ, args, message):
    """xDSL asserted a non-zero divisor (a traceback) and wrapped INT_MIN / -1."""
    fails_in_both(function([typ, typ], typ, f"arith.floordivsi %a0, %a1 : {typ}"), args,
                  message)


def fails_in_both(text: str, args: tuple[int, ...], message: str) -> None:
    """`@f` of `text` raises `message` in the interpreter and natively."""
    module = parse_module(make_context(), text)
    runs = [lambda *a: run_function(module, "f", list(a)),
            recir.compile(parse_module(make_context(), text), entry="f", threads=1)]
    for run in runs:
        with pytest.raises(RecirError, match=message):
            run(*args)


def maximumf(a: float, b: float) -> float:
    """MLIR's definition in plain Python."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b:
        return b if math.copysign(1.0, a) < 0 else a
    return max(a, b)


def minimumf(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b:
        return a if math.copysign(1.0, a) < 0 else b
    return min(a, b)


def same(x: float, y: float) -> bool:
    """Equal, the sign of a zero included, or both NaN."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


FLOAT_CASES = [(-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (0.0, 0.0), (math.nan, 1.0),
               (1.0, math.nan), (math.nan, -math.inf), (math.inf, -math.inf), (1.5, -2.5),
               (-3.0, -2.0), (2.0, 2.0)]


@pytest.mark.parametrize(("op", "reference"), [("maximumf", maximumf),
                                               ("minimumf", minimumf)])
def test_float_extrema_propagate_nan_and_order_signed_zeros(op, reference):
    text = function(["f32", "f32"], "f32", f"arith.{op} %a0, %a1 : f32")
    for a, b in FLOAT_CASES:
        interpreted, native = both(text, a, b)
        want = reference(a, b)
        assert same(interpreted, want) and same(native, want), (a, b, interpreted, native)


ROWS = """
func.func @extrema(%a: tensor<?xf32>, %b: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
  %x = arith.MAX %a, %b : tensor<?xf32>
  %n = arith.MIN %a, %b : tensor<?xf32>
  func.return %x, %n : tensor<?xf32>, tensor<?xf32>
}
"""


def test_float_extrema_on_rows(tmp_path):
    """The row forms (a loop LLVM vectorizes) give each row's scalar result;
    `np.maximum` alone returns either zero of -0.0 and +0.0."""
    extrema_rows_match(tmp_path, (maximumf, minimumf), FLOAT_CASES)


def extrema_rows_match(tmp_path, references, cases) -> None:
    """The row forms of the two ops named as `references` (max, then min)
    give, in both engines, each row's `reference` of `cases` (past one
    vector's lanes)."""
    text = ROWS.replace("MAX", references[0].__name__).replace("MIN", references[1].__name__)
    a = np.array([a for a, _ in cases] * 5, np.float32)
    b = np.array([b for _, b in cases] * 5, np.float32)
    interpreted = run_function(parse_module(make_context(), text), "extrema", [a, b])
    function_op = next(op for op in parse_module(make_context(), text).ops
                       if isinstance(op, func.FuncOp))
    native = compile_rows([([function_op], None)], tmp_path).functions["extrema"]([a, b])
    for k, reference in enumerate(references):
        want = [reference(float(x), float(y)) for x, y in zip(a, b, strict=True)]
        for got in (interpreted[k], native[k]):
            assert all(same(float(g), w) for g, w in zip(got, want, strict=True)), (
                reference.__name__, got.tolist(), want)
