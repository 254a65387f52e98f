"""Vectorizable f32 `math.exp`, `math.tanh` and the sigmoid as arith polynomials.

LLVM turns `llvm.exp` on a vector into one libm call per lane, which costs
more than the matrix-vector product of a TreeLSTM node. These expansions use
only arithmetic, selects, floor and bit casts, so the loop vectorizer keeps
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
from xdsl.ir import SSAValue

from xdsl.dialects.utils.fast_math import FastMathFlag

from recir.passes.loop_builder import CONTRACT, Emitter
from recir.passes.op_templates import build

LOG2E = 1.4426950408889634
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
EXP_MIN, EXP_MAX = -87.0, 88.72283
# Cephes expf: exp(r) = 1 + r + r^2 * P(r) on |r| <= ln(2)/2.
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
            4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
# Eigen's float tanh (`generic_fast_tanh_float`): x P(x^2) / Q(x^2), highest
# power first, on |x| <= TANH_CLAMP, where it reaches 1.0 in f32; below
# TANH_TINY tanh(x) is x to f32 precision.
TANH_NUMERATOR = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                  5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                  4.89352455891786e-03)
TANH_DENOMINATOR = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                    4.89352518554385e-03)
TANH_CLAMP, TANH_TINY = 7.99881172180175781, 0.0004
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


def _reduced(b: Emitter, clamped: SSAValue) -> tuple[SSAValue, SSAValue]:
    """n and exp(r) with clamped = n ln2 + r, |r| <= ln(2)/2."""
    n = b.value(llvm.FFloorOp(_add(b, _mul(b, clamped, _f(b, LOG2E)), _f(b, 0.5))))
    r = _sub(b, clamped, _mul(b, n, _f(b, LN2_HI)))
    r = _sub(b, r, _mul(b, n, _f(b, LN2_LO)))
    poly = _mul(b, _mul(b, horner(b, r, EXP_POLY), r), r)
    return n, _add(b, _add(b, poly, r), _f(b, 1.0))


def _power_of_two(b: Emitter, n: SSAValue, bias: int) -> SSAValue:
    """2^(n + bias - 127) from the bits of n + 1.5 * 2^23 (exact for |n| < 2^22)."""
    magic = b.value(arith.BitcastOp(_add(b, n, _f(b, 12582912.0)), i32))
    biased = b.value(arith.SubiOp(magic, b.const(0x4B400000 - bias, i32)))
    return b.value(arith.BitcastOp(b.value(arith.ShLIOp(biased, b.const(23, i32))), f32))


def exp(b: Emitter, x: SSAValue) -> SSAValue:
    """2^n * exp(r) with x = n ln2 + r; inf above the f32 range, 0 far below."""
    clamped = _select(b, x, "olt", EXP_MIN, _f(b, EXP_MIN), x)
    clamped = _select(b, clamped, "ogt", EXP_MAX, _f(b, EXP_MAX), clamped)
    n, y = _reduced(b, clamped)
    # 2^(n-1), times 2 afterwards, so that n = 128 does not overflow the exponent field.
    result = _mul(b, _mul(b, y, _power_of_two(b, n, 126)), _f(b, 2.0))
    result = _select(b, x, "ogt", EXP_MAX, _f(b, float("inf")), result)
    return _select(b, x, "olt", -87.33654, _f(b, 0.0), result)


def sigmoid(b: Emitter, x: SSAValue) -> SSAValue:
    """1 / (1 + exp(-x)) without exp's selects for inf and 0: 0 below
    -SIGMOID_LIMIT (and at -inf), 1 above about 17 (and at inf), NaN for NaN."""
    minus = b.value(arith.NegfOp(x))
    clamped = _select(b, minus, "olt", -SIGMOID_LIMIT, _f(b, -SIGMOID_LIMIT), minus)
    clamped = _select(b, clamped, "ogt", SIGMOID_LIMIT, _f(b, SIGMOID_LIMIT), clamped)
    n, y = _reduced(b, clamped)
    one = _f(b, 1.0)
    denominator = _add(b, _mul(b, y, _power_of_two(b, n, 127)), one)
    quotient = b.value(arith.DivfOp(one, denominator, CONTRACT))
    return _select(b, x, "olt", -SIGMOID_LIMIT, _f(b, 0.0), quotient)


def tanh(b: Emitter, x: SSAValue) -> SSAValue:
    """A rational function of the clamped x (exactly +-1 beyond the clamp);
    x itself near 0, where the ratio's coefficients would cost an ulp."""
    clamped = _select(b, x, "olt", -TANH_CLAMP, _f(b, -TANH_CLAMP), x)
    clamped = _select(b, clamped, "ogt", TANH_CLAMP, _f(b, TANH_CLAMP), clamped)
    z = _mul(b, clamped, clamped)
    numerator = _mul(b, clamped, horner(b, z, TANH_NUMERATOR))
    ratio = b.value(arith.DivfOp(numerator, horner(b, z, TANH_DENOMINATOR), RECIPROCAL))
    magnitude = b.value(llvm.FAbsOp(x, f32))
    return _select(b, magnitude, "olt", TANH_TINY, x, ratio)
