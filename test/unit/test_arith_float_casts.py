"""`arith.extf` (f32 to f64), `truncf` (f64 to f32) and `fptoui`, which
neither engine ran: both now give MLIR's meaning, checked against NumPy. A
native entry passes no f64, so the f64 values live inside the function.
fptoui of a value whose truncation is outside [0, 2^w) (poison in MLIR) is
an error in both, as fptosi's out-of-range value is; a cast between other
float types is a verifier error naming the op."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_interpreter_casts import both, function

import recir
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.parsing import parse_module

FMA_IN_F64 = """func.func @f(%a: f32, %b: f32, %c: f32) -> f32 {
  %x = arith.extf %a : f32 to f64
  %y = arith.extf %b : f32 to f64
  %z = arith.extf %c : f32 to f64
  %p = arith.mulf %x, %y : f64
  %s = arith.addf %p, %z : f64
  %r = arith.truncf %s : f64 to f32
  func.return %r : f32
}
"""

NEAR_ONE = 1 + 2**-12  # its square's 2^-24 is lost in f32, kept in f64


def fma_in_f64(a: float, b: float, c: float) -> float:
    with np.errstate(over="ignore", invalid="ignore"):  # (inf * 0 is NaN)
        return float(np.float32(np.float64(np.float32(a)) * np.float64(np.float32(b))
                                + np.float64(np.float32(c))))


@pytest.mark.parametrize("args", [(NEAR_ONE, NEAR_ONE, -1.0), (0.1, 0.2, 0.3),
                                  (3e38, 3e38, 0.0), (-3e38, 3e38, 0.0), (1e-30, 1e-30, 0.0),
                                  (math.nan, 1.0, 0.0), (math.inf, 0.0, 1.0)])
def test_extf_and_truncf_compute_in_f64(args):
    """f64 products then one rounding to f32 (round to nearest even; beyond
    f32's range an infinity, below it zero)."""
    want = fma_in_f64(*args)
    if args[0] == NEAR_ONE:  # (f32 arithmetic would give another result)
        assert want != float(np.float32(NEAR_ONE) * np.float32(NEAR_ONE) - np.float32(1.0))
    interpreted, native = both(FMA_IN_F64, *args)
    if math.isnan(want):
        assert math.isnan(interpreted), (args, interpreted)
        assert math.isnan(native), (args, native)
        return
    assert interpreted == native == want, (args, interpreted, native, want)
    assert math.copysign(1.0, interpreted) == math.copysign(1.0, want)


def unsigned_bits(x: float, width: int) -> int:
    """The unsigned integer `x` truncates to, read as a signed `width`-bit one."""
    value = int(x)
    assert 0 <= value < 1 << width
    return value - (1 << width) if value >= 1 << (width - 1) else value


F32_TO_UNSIGNED = [(3.7, 3), (0.0, 0), (-0.0, 0), (-0.5, 0), (-0.99, 0), (255.9, 255),
                   (3e9, 3000000000), (4294967040.0, 4294967040)]


@pytest.mark.parametrize("width", [8, 32, 64])
def test_fptoui_truncates_to_unsigned_bits(width):
    text = function(["f32"], f"i{width}", f"arith.fptoui %a0 : f32 to i{width}")
    for x, value in F32_TO_UNSIGNED:
        if value >= 1 << width:
            continue
        want = unsigned_bits(x, width)
        assert want == unsigned_bits(value, width)
        assert both(text, x) == (want, want), (x, width)


def test_fptoui_of_f64():
    """1e19 as f32 is 9999999980506447872, above i64's signed range."""
    text = ("func.func @f(%a: f32) -> i64 {\n  %e = arith.extf %a : f32 to f64\n"
            "  %r = arith.fptoui %e : f64 to i64\n  func.return %r : i64\n}\n")
    want = unsigned_bits(float(np.float32(1e19)), 64)
    assert want < 0
    assert both(text, 1e19) == (want, want)


def test_fptosi_of_f64():
    """The saturating intrinsic is named for the input's type (it was f32's)."""
    text = ("func.func @f(%a: f32) -> i32 {\n  %e = arith.extf %a : f32 to f64\n"
            "  %r = arith.fptosi %e : f64 to i32\n  func.return %r : i32\n}\n")
    assert both(text, -3.75) == (-3, -3)


@pytest.mark.parametrize(("width", "x"), [(32, -1.0), (32, 4294967296.0), (32, math.nan),
                                          (32, math.inf), (32, -math.inf), (8, 256.0),
                                          (64, -2.0), (64, 2.0**64)])
def test_fptoui_out_of_range_is_an_error(width, x):
    text = function(["f32"], f"i{width}", f"arith.fptoui %a0 : f32 to i{width}")
    runs = [lambda a: run_function(parse_module(make_context(), text), "f", [a]),
            recir.compile(parse_module(make_context(), text), entry="f", threads=1)]
    for run in runs:
        with pytest.raises(RecirError, match=rf"'arith.fptoui' op the value is out of range "
                           rf"for unsigned i{width}"):
            run(x)


@pytest.mark.parametrize(("cast", "message"), [
    ("arith.extf %a0 : f32 to f32", "'arith.extf' op converts f32 to f64 only .*got f32 to f32"),
    ("arith.extf %a0 : f16 to f32", "'arith.extf' op converts f32 to f64 only .*got f16 to f32"),
    ("arith.truncf %a0 : f32 to f16", "'arith.truncf' op converts f64 to f32 only .*got f32 "
     "to f16"),
    ("arith.truncf %a0 : tensor<2xf64> to tensor<2xf32>", "'arith.truncf' op converts f64 to "
     "f32 only .*got tensor<2xf64> to tensor<2xf32>"),
])
def test_other_float_casts_are_verifier_errors(cast, message):
    source, target = cast.split(" : ")[1].split(" to ")
    text = function([source], target, cast)
    with pytest.raises(RecirError, match=rf"^<input>:2:3: error: {message}"):
        parse_module(make_context(), text)
