"""Conversion table from `arith` to xDSL's `llvm` dialect (used by convert-recir-to-llvm).

xDSL 0.74 has no arith-to-llvm conversion. Most ops map one to one; fast-math
flags are carried over, since they are what lets LLVM vectorize reductions.
Integer division is not in the table: the pass converts it after
`guard_division`'s checks of the divisor (`floordivsi` and `ceildivsi`
expanded into `divsi` and a correction, as MLIR's arith-expand does).
`maximumf` / `minimumf` become the `llvm.maximum` / `llvm.minimum`
intrinsics, as in MLIR's ArithToLLVM: NaN if either operand is NaN, and -0.0
below +0.0. `maxnumf` / `minnumf` (the other operand where one is NaN)
become `llvm.maximumnum` / `llvm.minimumnum`, not MLIR's `llvm.maxnum`,
whose tie of -0.0 and +0.0 gave either (x86 the first operand, constant
folding +0.0): these order -0.0 below +0.0, one of the results MLIR allows,
the same in both engines. arith.uitofp (xDSL's llvm has no uitofp) and
cmpf's constant predicates stay for the translation to LLVM IR
(`backend/llvm_convert.ARITH`).

Nor are the checks before ops LLVM makes poison for some operands (a shift by
the operand's width or more, a float out of the integer type's range
converted to it): native code gave whatever x86 or constant folding made of
the poison, the interpreter something else. `guard_shift` and
`guard_conversion` add a `cf.assert` before such an op written in the IR (one
with a source location: the ones recir's kernels make have none, and operands
in range, so generated code pays nothing); convert-recir-to-llvm calls them.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, cf, llvm
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, i64
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import format_error, location_prefix
from recir.passes.loop_builder import Emitter
from recir.passes.op_templates import build

_INT_BINARY: dict[type[Operation], type[Operation]] = {
    arith.AddiOp: llvm.AddOp,
    arith.SubiOp: llvm.SubOp,
    arith.MuliOp: llvm.MulOp,
    arith.AndIOp: llvm.AndOp,
    arith.OrIOp: llvm.OrOp,
    arith.XOrIOp: llvm.XOrOp,
    arith.ShLIOp: llvm.ShlOp,
    arith.ShRSIOp: llvm.AShrOp,
    arith.ShRUIOp: llvm.LShrOp,
    arith.DivSIOp: llvm.SDivOp,
    arith.DivUIOp: llvm.UDivOp,
    arith.RemSIOp: llvm.SRemOp,
    arith.RemUIOp: llvm.URemOp,
}

_FLOAT_BINARY: dict[type[Operation], type[Operation]] = {
    arith.AddfOp: llvm.FAddOp,
    arith.SubfOp: llvm.FSubOp,
    arith.MulfOp: llvm.FMulOp,
    arith.DivfOp: llvm.FDivOp,
}

_CASTS: dict[type[Operation], type[Operation]] = {
    arith.ExtSIOp: llvm.SExtOp,
    arith.ExtUIOp: llvm.ZExtOp,
    arith.TruncIOp: llvm.TruncOp,
    arith.SIToFPOp: llvm.SIToFPOp,
    arith.BitcastOp: llvm.BitcastOp,
    arith.ExtFOp: llvm.FPExtOp,  # (f32 to f64, f64 to f32 only: `verification`)
    arith.TruncFOp: llvm.FPTruncOp,
}

# min/max as a compare and a select: (predicate, pick lhs when true)
_MIN_MAX = {arith.MaxSIOp: "sgt", arith.MinSIOp: "slt",
            arith.MaxUIOp: "ugt", arith.MinUIOp: "ult"}


# min/max ordering -0.0 below +0.0, NaN-propagating (maximumf) or
# NaN-ignoring (maxnumf): the LLVM intrinsic of each
FLOAT_MIN_MAX = {arith.MaximumfOp: "llvm.maximum", arith.MinimumfOp: "llvm.minimum",
                 arith.MaxnumfOp: "llvm.maximumnum", arith.MinnumfOp: "llvm.minimumnum"}


def float_min_max_intrinsic(op: Operation) -> str:
    """The intrinsic's name for the op's float type (`llvm.maximum.f32`)."""
    return f"{FLOAT_MIN_MAX[type(op)]}.{op.results[0].type}"


def _fastmath(op: Operation) -> llvm.FastMathAttr:
    flags = op.fastmath.data if isinstance(op, arith.FloatingPointLikeBinaryOperation) else ()
    return llvm.FastMathAttr(list(flags) or None)


def _icmp(lhs: SSAValue, rhs: SSAValue, predicate: str) -> llvm.ICmpOp:
    code = llvm.ICmpPredicateFlag(predicate).to_int()
    return llvm.ICmpOp(lhs, rhs, IntegerAttr(code, i64))


def convert_arith(op: Operation) -> list[Operation] | None:
    """The llvm ops replacing `op` (the last one yields its result), or None."""
    kind = type(op)
    operands = tuple(op.operands)
    if kind in _INT_BINARY:
        target = _INT_BINARY[kind]
        return [build((target, operands[0].type), lambda: target(*operands), operands)]
    if kind in _FLOAT_BINARY:
        flags = op.fastmath if isinstance(op, arith.FloatingPointLikeBinaryOperation) else None
        target = _FLOAT_BINARY[kind]
        return [build((target, operands[0].type, flags),
                      lambda: target(*operands, _fastmath(op)), operands)]
    if kind in _CASTS:
        typ = op.results[0].type
        target = _CASTS[kind]
        return [build((target, operands[0].type, typ), lambda: target(operands[0], typ),
                      operands)]
    if kind in FLOAT_MIN_MAX:
        typ = op.results[0].type
        return [llvm.CallIntrinsicOp(float_min_max_intrinsic(op), list(operands), [typ])]
    if kind in _MIN_MAX:
        compare = _icmp(op.operands[0], op.operands[1], _MIN_MAX[kind])
        return [compare, llvm.SelectOp(compare, op.operands[0], op.operands[1])]
    converter = _SPECIAL.get(kind)
    return converter(op) if converter is not None else None


def _constant(op: arith.ConstantOp) -> list[Operation]:
    value, typ = op.value, op.result.type
    return [build((llvm.ConstantOp, value, typ), lambda: llvm.ConstantOp(value, typ), ())]


def _compare(target: type[llvm.ICmpOp | llvm.FCmpOp]) -> Callable[..., list[Operation] | None]:
    """arith.cmpi as llvm.icmp, arith.cmpf as llvm.fcmp: arith and llvm
    number their predicates the same way (cmpf's `false` and `true` left
    to the translation, `llvm_convert`: llvmlite names no fcmp for them)."""
    def convert(op: arith.CmpiOp | arith.CmpfOp) -> list[Operation] | None:
        code, operands = op.predicate.value.data, (op.lhs, op.rhs)
        if target is llvm.FCmpOp and code in (0, 15):
            return None
        return [build((target, code, operands[0].type),
                      lambda: target(*operands, IntegerAttr(code, i64)), operands)]

    return convert


def float_to_int_intrinsic(op: arith.FPToSIOp | arith.FPToUIOp) -> str:
    """The saturating intrinsic's name (`llvm.fptoui.sat.i32.f64`)."""
    kind = "fptosi" if isinstance(op, arith.FPToSIOp) else "fptoui"
    return f"llvm.{kind}.sat.i{op.result.type.width.data}.{op.input.type}"


def _float_to_int(op: arith.FPToSIOp | arith.FPToUIOp) -> list[Operation]:
    """Saturating, so NaN and out-of-range inputs are defined (no poison)."""
    return [llvm.CallIntrinsicOp(float_to_int_intrinsic(op), [op.input], [op.result.type])]


_SPECIAL: dict[type[Operation], Callable[..., list[Operation]]] = {
    arith.ConstantOp: _constant,
    arith.CmpiOp: _compare(llvm.ICmpOp),
    arith.CmpfOp: _compare(llvm.FCmpOp),
    arith.SelectOp: lambda op: [llvm.SelectOp(*op.operands)],
    arith.NegfOp: lambda op: [llvm.FNegOp(op.operands[0])],
    arith.FPToSIOp: _float_to_int,
    arith.FPToUIOp: _float_to_int,
}


SHIFTS = (arith.ShLIOp, arith.ShRSIOp, arith.ShRUIOp)
SIGNED_DIVISIONS = (arith.DivSIOp, arith.RemSIOp, arith.FloorDivSIOp, arith.CeilDivSIOp)
DIVISIONS = (*SIGNED_DIVISIONS, arith.DivUIOp, arith.RemUIOp)


GUARDED = (*DIVISIONS, *SHIFTS, arith.FPToSIOp, arith.FPToUIOp)


def guard(op: Operation) -> None:
    """The checks before an op of `GUARDED`; a `floordivsi` or `ceildivsi`
    then expanded."""
    if isinstance(op, DIVISIONS):
        guard_division(op)
    elif isinstance(op, SHIFTS):
        guard_shift(op)
    elif isinstance(op, arith.FPToSIOp | arith.FPToUIOp):
        guard_conversion(op)
    if isinstance(op, arith.FloorDivSIOp | arith.CeilDivSIOp):
        expand_rounded_division(op)


def guard_division(op: Operation) -> None:
    """x86 traps on a zero divisor and on INT_MIN / -1: check both first."""
    b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
    lhs, rhs = op.operands
    ok = b.value(arith.CmpiOp(rhs, b.const(0, rhs.type), "ne"))
    b.op(cf.AssertOp(ok, format_error(op, "division by zero")))
    if isinstance(op, SIGNED_DIVISIONS):
        width = rhs.type.width.data
        not_min = b.value(arith.CmpiOp(lhs, b.const(-(1 << (width - 1)), lhs.type), "ne"))
        not_minus_one = b.value(arith.CmpiOp(rhs, b.const(-1, rhs.type), "ne"))
        ok = b.value(arith.OrIOp(not_min, not_minus_one))
        b.op(cf.AssertOp(ok, format_error(op, "overflows")))


# a rounded division's correction of the truncated quotient: where the
# signs of a ^ b compare so with 0, and in which direction
ROUNDING = {arith.FloorDivSIOp: ("slt", arith.SubiOp),
            arith.CeilDivSIOp: ("sge", arith.AddiOp)}


def expand_rounded_division(op: arith.FloorDivSIOp | arith.CeilDivSIOp) -> None:
    """`q = a / b`, moved by one where the division was inexact and the
    signs differ (floor: q - 1) or agree (ceil: q + 1), as MLIR's
    arith-expand; after `guard_division`, so b != 0 and no INT_MIN / -1
    reaches the `divsi` (nor the `muli`: |q * b| <= |a|)."""
    b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
    lhs, rhs, typ = op.lhs, op.rhs, op.result.type
    signs_compare, step = ROUNDING[type(op)]
    quotient = b.value(arith.DivSIOp(lhs, rhs))
    inexact = b.value(arith.CmpiOp(b.value(arith.MuliOp(quotient, rhs)), lhs, "ne"))
    signs = b.value(arith.XOrIOp(lhs, rhs))
    move = b.value(arith.CmpiOp(signs, b.const(0, typ), signs_compare))
    moved = b.value(step(quotient, b.const(1, typ)))
    rounded = b.value(arith.SelectOp(b.value(arith.AndIOp(inexact, move)), moved, quotient))
    op.result.replace_all_uses_with(rounded)
    Rewriter.erase_op(op)


def guard_shift(op: Operation) -> None:
    """The amount below the width, compared unsigned (x86 masked it:
    shli -100 by 40 gave -25600; constant folding did not)."""
    if not location_prefix(op):
        return
    b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
    amount = op.operands[1]
    width = amount.type.width.data if isinstance(amount.type, IntegerType) else 64
    ok = b.value(arith.CmpiOp(amount, b.const(width, amount.type), "ult"))
    message = f"shift amount out of range (0 to {width - 1})"
    b.op(cf.AssertOp(ok, format_error(op, message)))


def guard_conversion(op: arith.FPToSIOp | arith.FPToUIOp) -> None:
    """fptosi: -2^(w-1) <= x < 2^(w-1); fptoui: -1 < x < 2^w (-0.5
    truncates to 0); false for NaN (x86 gave INT_MIN or INT_MAX)."""
    if not location_prefix(op):
        return
    b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
    x, width = op.input, op.result.type.width.data
    unsigned = isinstance(op, arith.FPToUIOp)
    limits = (-1.0, 2.0 ** width) if unsigned else (-(2.0 ** (width - 1)), 2.0 ** (width - 1))
    bounds = [b.value(arith.ConstantOp(FloatAttr(limit, x.type))) for limit in limits]
    low = b.value(arith.CmpfOp(x, bounds[0], "ogt" if unsigned else "oge"))
    high = b.value(arith.CmpfOp(x, bounds[1], "olt"))
    ok = b.value(arith.AndIOp(low, high))
    message = f"the value is out of range for {'unsigned ' * unsigned}{op.result.type}"
    b.op(cf.AssertOp(ok, format_error(op, message)))
