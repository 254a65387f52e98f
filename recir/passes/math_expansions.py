"""Vectorizable f32 `math.exp`, `math.tanh` and the sigmoid as arith polynomials.

LLVM turns `llvm.exp` on a vector into one libm call per lane, which costs
more than the matrix-vector product of a TreeLSTM node. These expansions use
only arithmetic, selects and bit casts, so the loop vectorizer keeps
whole gate loops in SIMD registers; their products and sums may contract into
FMAs (half the instructions of a polynomial, and no less accurate).

tanh is one rational function (no exp, one branch); its divide has a finite
divisor, so it carries `arcp` and `ninf`: on vectors LLVM may then use a
reciprocal estimate and a Newton step instead of `vdivps` (scalar code keeps
the divide). The sigmoid is an exp of a clamped argument and a true divide,
which keeps 1 / (1 + 0) exactly 1. Accuracy (checked against NumPy in the
tests): about 2 ulp for exp, a relative 3e-7 for tanh and the sigmoid; both
saturate exactly.
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import f32, i32
from xdsl.dialects.utils.fast_math import FastMathFlag
from xdsl.ir import SSAValue

from recir.passes.loop_builder import CONTRACT, Emitter
from recir.passes.op_templates import build

# exp(x) = 2^n exp(r), x = n ln2 + r, |r| <= ln(2)/2, n rounded to nearest by
# adding SHIFT (1.5 * 2^23), whose bits then hold n; ln2 in two parts.
LOG2E, SHIFT = 1.4426950408889634, 12582912.0
LN2_HI, LN2_LO = float.fromhex("0x1.62e4p-1"), float.fromhex("0x1.7f7d1cp-20")
# exp's smallest argument whose result is not 0 (float32's least subnormal,
# 2^-149, is the nearest for exp(x) above 2^-150) and its largest
EXP_MIN, EXP_MAX = -103.97208, 88.72283
# Below 0, 2^(n + SUBNORMAL) then times 2^-SUBNORMAL: n down to -150 keeps
# the first factor normal, and the product rounds once into the subnormals.
SUBNORMAL = 64
# exp(r) = 1 + r P(r), highest power first: Arm's optimized-routines
# `v_expf` (1.45 ulp with the rest of the reduction).
EXP_POLY = tuple(float.fromhex(h) for h in (
    "0x1.0e4020p-7", "0x1.573e2ep-5", "0x1.555e66p-3", "0x1.fffdb6p-2", "0x1.ffffecp-1"))
# Eigen's float tanh (`generic_fast_tanh_float`) on |x| <= TANH_CLAMP:
# |x| P(x^2) / Q(x^2), highest power first, both divided by P's constant
# term so that each starts at 1 (the ratio is then |x| itself near 0, with
# no select for tiny x). Beyond the clamp tanh is 1 within 2.2e-7.
TANH_NUMERATOR = (-5.6416768365276024e-14, 4.087417904141688e-11, -1.7583792200071002e-08,
                  1.0467500942468178e-05, 0.003036098787561059, 0.1302255541086197, 1.0)
TANH_DENOMINATOR = (0.00024486612528562546, 0.02422276698052883, 0.4635584354400635, 1.0)
TANH_CLAMP = 7.99881172180175781
# The sigmoid's exp(-x) for -x within +-SIGMOID_LIMIT: 2^n stays a normal
# float and the sum 1 + exp(-x) finite. Below -SIGMOID_LIMIT the sigmoid
# (under 2e-38) is 0; above it, 1 + exp(-x) rounds to 1.
SIGMOID_LIMIT = 87.0
# A divide whose operands are finite: LLVM may use a reciprocal estimate.
RECIPROCAL = arith.FastMathFlagsAttr([FastMathFlag.ALLOW_RECIP, FastMathFlag.NO_INFS,
                                      FastMathFlag.ALLOW_CONTRACT])


def _f(b: Emitter, value: float) -> SSAValue:
    return b.const(value, f32)


def _binary(b: Emitter, kind: type[arith.FloatingPointLikeBinaryOperation], x: SSAValue,
            y: SSAValue) -> SSAValue:
    return b.value(build((kind, x.type, CONTRACT), lambda: kind(x, y, CONTRACT), (x, y)))


def _mul(b: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
    return _binary(b, arith.MulfOp, x, y)


def _add(b: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
    return _binary(b, arith.AddfOp, x, y)


def _sub(b: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
    return _binary(b, arith.SubfOp, x, y)


def _select(b: Emitter, x: SSAValue, pred: str, bound: float, then: SSAValue,
            other: SSAValue) -> SSAValue:
    return b.value(arith.SelectOp(b.value(arith.CmpfOp(x, _f(b, bound), pred)),
                                  then, other))


def horner(b: Emitter, x: SSAValue, coefficients: tuple[float, ...]) -> SSAValue:
    acc = _f(b, coefficients[0])
    for c in coefficients[1:]:
        acc = _add(b, _mul(b, acc, x), _f(b, c))
    return acc


def _reduced(b: Emitter, clamped: SSAValue, bias: SSAValue) -> tuple[SSAValue, SSAValue]:
    """exp(r) - 1 and 2^(n + bias - 127), with clamped = n ln2 + r (`bias`
    an i32 already shifted into the exponent field)."""
    shifted = _add(b, _mul(b, clamped, _f(b, LOG2E)), _f(b, SHIFT))
    n = _sub(b, shifted, _f(b, SHIFT))
    r = _sub(b, clamped, _mul(b, n, _f(b, LN2_HI)))
    r = _sub(b, r, _mul(b, n, _f(b, LN2_LO)))
    # The low bits of `shifted` are n (|n| < 2^22); shifted into the exponent
    # field, the bits above fall off.
    exponent = b.value(arith.ShLIOp(b.value(arith.BitcastOp(shifted, i32)), b.const(23, i32)))
    scale = b.value(arith.AddiOp(exponent, bias))
    return _mul(b, horner(b, r, EXP_POLY), r), b.value(arith.BitcastOp(scale, f32))


def exp(b: Emitter, x: SSAValue) -> SSAValue:
    """2^n * exp(r) with x = n ln2 + r; inf above the f32 range, 0 where
    exp(x) rounds to 0 (subnormal results kept, as NumPy's)."""
    clamped = _select(b, x, "olt", EXP_MIN, _f(b, EXP_MIN), x)
    clamped = _select(b, clamped, "ogt", EXP_MAX, _f(b, EXP_MAX), clamped)
    # Above 0, 2^(n-1) times 2, so that n = 128 does not overflow the
    # exponent field; below, 2^(n+SUBNORMAL) times 2^-SUBNORMAL, so that n
    # down to -150 does not underflow it.
    positive = b.value(arith.CmpfOp(clamped, _f(b, 0.0), "ogt"))
    bias = b.value(arith.SelectOp(positive, b.const(126 << 23, i32),
                                  b.const((127 + SUBNORMAL) << 23, i32)))
    less_one, scale = _reduced(b, clamped, bias)
    result = _mul(b, _add(b, _mul(b, less_one, scale), scale),
                  b.value(arith.SelectOp(positive, _f(b, 2.0), _f(b, 2.0 ** -SUBNORMAL))))
    result = _select(b, x, "ogt", EXP_MAX, _f(b, float("inf")), result)
    return _select(b, x, "olt", EXP_MIN, _f(b, 0.0), result)


def sigmoid(b: Emitter, x: SSAValue) -> SSAValue:
    """1 / (1 + exp(-x)) without exp's selects for inf and 0: 0 below
    -SIGMOID_LIMIT (and at -inf), 1 above about 17 (and at inf), NaN for NaN."""
    minus = b.value(arith.NegfOp(x))
    # -x above the limit needs no clamp: the last select replaces whatever
    # the divide made of it (no flag lets LLVM assume it finite).
    clamped = _select(b, minus, "olt", -SIGMOID_LIMIT, _f(b, -SIGMOID_LIMIT), minus)
    less_one, scale = _reduced(b, clamped, b.const(127 << 23, i32))
    one = _f(b, 1.0)
    denominator = _add(b, _add(b, _mul(b, less_one, scale), scale), one)
    quotient = b.value(arith.DivfOp(one, denominator, CONTRACT))
    return _select(b, x, "olt", -SIGMOID_LIMIT, _f(b, 0.0), quotient)


def tanh(b: Emitter, x: SSAValue) -> SSAValue:
    """A rational function of the clamped |x|, exactly 1 beyond the clamp,
    with x's sign (so tanh(-0) = -0, and NaN stays NaN)."""
    magnitude = b.value(llvm.FAbsOp(x, f32))
    clamped = _select(b, magnitude, "ogt", TANH_CLAMP, _f(b, TANH_CLAMP), magnitude)
    z = _mul(b, clamped, clamped)
    numerator = _mul(b, clamped, horner(b, z, TANH_NUMERATOR))
    ratio = b.value(arith.DivfOp(numerator, horner(b, z, TANH_DENOMINATOR), RECIPROCAL))
    saturated = _select(b, magnitude, "ogt", TANH_CLAMP, _f(b, 1.0), ratio)
    return b.value(llvm.FCopySignOp(saturated, x))
