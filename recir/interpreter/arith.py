"""The `arith` ops recir programs use that xDSL 0.74's interpreter lacks."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    IntegerType,
    TensorType,
    f32,
    i1,
)
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl
from xdsl.interpreters.arith import ArithFunctions
from xdsl.utils.comparisons import to_signed
from xdsl.utils.exceptions import InterpretationError

from recir.interpreter.tmath import register_table


def round_f32(x: float) -> float:
    return float(np.float32(x))


class ArithExtraFunctions(InterpreterFunctions):
    @impl(arith.DivfOp)
    def run_divf(self, interp: Interpreter, op: arith.DivfOp, args: Any):
        lhs, rhs = args  # in f32, as native code divides (1.5 / -0.0 is -inf)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return (float(np.float32(lhs) / np.float32(rhs)),)

    @impl(arith.DivUIOp)
    def run_divui(self, interp: Interpreter, op: arith.DivUIOp, args: Any):
        width = bits(op.result.type)
        lhs, rhs = (v % (1 << width) for v in args)  # unsigned: -1 is 2**width - 1
        if rhs == 0:
            raise InterpretationError("division by zero")
        return (to_signed(lhs // rhs, width),)

    @impl(arith.ExtUIOp)
    def run_extui(self, interp: Interpreter, op: arith.ExtUIOp, args: Any):
        return (args[0] % (1 << bits(op.operands[0].type)),)  # (it sign-extended)

    @impl(arith.ExtSIOp)
    def run_extsi(self, interp: Interpreter, op: arith.ExtSIOp, args: Any):
        return (signed(args[0], op.operands[0].type),)

    @impl(arith.SIToFPOp)
    def run_sitofp(self, interp: Interpreter, op: arith.SIToFPOp, args: Any):
        return (round_f32(float(signed(args[0], op.operands[0].type))),)

    @impl(arith.UIToFPOp)
    def run_uitofp(self, interp: Interpreter, op: arith.UIToFPOp, args: Any):
        value = float(args[0] % (1 << bits(op.operands[0].type)))  # (-1 is 2**width - 1)
        return (round_f32(value) if op.result.type == f32 else value,)

    @impl(arith.BitcastOp)
    def run_bitcast(self, interp: Interpreter, op: arith.BitcastOp, args: Any):
        """The same bits in the other type, as native code's `llvm.bitcast`."""
        target, source = op.result.type, op.operands[0].type
        if target == source:
            return (args[0],)
        if type(target if isinstance(source, IntegerType) else source) not in BITS_AS:
            raise InterpretationError(f"cannot bitcast {source} to {target} here")
        if isinstance(target, IntegerType):
            width = bits(target)
            raw = np.array(args[0], BITS_AS[type(source)]).view(f"u{width // 8}")
            return (to_signed(int(raw), width),)
        width = bits(source)
        raw = np.array(args[0] % (1 << width), f"u{width // 8}")
        return (float(raw.view(BITS_AS[type(target)])),)

    @impl(arith.TruncIOp)
    def run_trunci(self, interp: Interpreter, op: arith.TruncIOp, args: Any):
        width = bits(op.result.type)
        return (to_signed(args[0] % (1 << width), width),)

    @impl(arith.FPToSIOp)
    def run_fptosi(self, interp: Interpreter, op: arith.FPToSIOp, args: Any):
        width = bits(op.result.type)
        if not -(2.0 ** (width - 1)) <= args[0] < 2.0 ** (width - 1):  # (NaN too)
            raise InterpretationError(f"the value is out of range for {op.result.type} "
                                     f"({args[0]})")
        return (int(args[0]),)

    @impl(arith.FPToUIOp)
    def run_fptoui(self, interp: Interpreter, op: arith.FPToUIOp, args: Any):
        """MLIR makes poison of a value whose truncation is not in [0, 2^w):
        an error here, as fptosi's (`arith_to_llvm.guard_conversion`); the
        bits of the unsigned result, read as signed as every integer here."""
        width = bits(op.result.type)
        if not -1.0 < args[0] < 2.0 ** width:  # (NaN too; -0.5 truncates to 0)
            raise InterpretationError(f"the value is out of range for unsigned "
                                     f"{op.result.type} ({args[0]})")
        return (to_signed(int(args[0]), width),)

    @impl(arith.ExtFOp)
    def run_extf(self, interp: Interpreter, op: arith.ExtFOp, args: Any):
        return (args[0],)  # (an f32 is a float already rounded to f32)

    @impl(arith.TruncFOp)
    def run_truncf(self, interp: Interpreter, op: arith.TruncFOp, args: Any):
        with np.errstate(over="ignore"):  # (beyond f32's range: an infinity)
            return (round_f32(args[0]),)


BITS_AS = {Float32Type: np.float32, Float64Type: np.float64}  # a float type's NumPy type


def bits(typ: Any) -> int:
    """An integer type's width (an index: 64)."""
    return typ.width.data if isinstance(typ, IntegerType) else 64


def signed(value: int, typ: Any) -> int:
    """An integer of `typ` read as signed, as native code's sign extensions
    read it: a true i1 is -1 (a comparison's True is 1 here)."""
    width = bits(typ)
    return to_signed(value % (1 << width), width)


class CheckedDivisionFunctions(InterpreterFunctions):
    """xDSL's signed divisions (`floordivsi`, and `ceildivsi` it lacks) and
    unsigned remainder after the checks native code makes
    (`arith_to_llvm.guard_division`), with its messages: xDSL asserts a
    non-zero divisor (a traceback) and wraps INT_MIN / -1."""

    def __init__(self) -> None:
        self.xdsl = ArithFunctions()
        self.impls = dict(type(self.xdsl)._impls())  # pyright: ignore[reportPrivateUsage]


def _checked_division(op_type: type) -> Any:
    def run(self: CheckedDivisionFunctions, interp: Interpreter, op: Any, args: Any):
        lhs, rhs = args
        if rhs == 0:
            raise InterpretationError("division by zero")
        width = bits(op.result.type)
        if op_type is arith.RemUIOp:  # (xDSL has none)
            return (to_signed(lhs % (1 << width) % (rhs % (1 << width)), width),)
        if to_signed(lhs, width) == -(1 << (width - 1)) and to_signed(rhs, width) == -1:
            raise InterpretationError("overflows")
        if op_type is arith.CeilDivSIOp:  # (xDSL has none): -floor(-a / b)
            return (-(-to_signed(lhs, width) // to_signed(rhs, width)),)
        return self.impls[op_type](self.xdsl, interp, op, args).values

    return run


register_table(CheckedDivisionFunctions, {t: t for t in (
    arith.DivSIOp, arith.RemSIOp, arith.FloorDivSIOp, arith.CeilDivSIOp, arith.RemUIOp)},
    _checked_division)


# shifts of a `width`-bit value by an amount in range, as native code does
# them (`convert_recir_to_llvm.guard_shift` refuses the others); xDSL
# asserted on a negative amount and lacks shrui
SHIFTS: dict[type, Any] = {
    arith.ShLIOp: lambda x, n, width: x << n,
    arith.ShRSIOp: lambda x, n, width: to_signed(x, width) >> n,
    arith.ShRUIOp: lambda x, n, width: (x & ((1 << width) - 1)) >> n,
}


def _checked_shift(shift: Any) -> Any:
    def run(self: CheckedDivisionFunctions, interp: Interpreter, op: Any, args: Any):
        width = bits(op.result.type)
        lhs, amount = args
        if not 0 <= amount % (1 << width) < width:  # (as unsigned, as native code compares)
            raise InterpretationError(f"shift amount out of range (0 to {width - 1})")
        return (to_signed(shift(lhs, amount % (1 << width), width) & ((1 << width) - 1),
                          width),)

    return run


register_table(CheckedDivisionFunctions, SHIFTS, _checked_shift)


class Float32Functions(InterpreterFunctions):
    """f32 `addf`, `subf`, `mulf` rounded to float32 as native code computes
    them: xDSL adds Python floats (doubles), so a sum of 0.35s drifted from
    the native one. One double operation then one rounding is exact here
    (a double holds the f32 product, and the sum's double rounding is
    innocuous). Other float types keep xDSL's."""


def _float32_impl(fn: Any) -> Any:
    def run(self: Float32Functions, interp: Interpreter, op: Any, args: Any):
        if op.result.type == f32:
            with np.errstate(over="ignore", invalid="ignore"):
                return (float(np.float32(fn(*args))),)
        return (fn(*args),)

    return run


register_table(Float32Functions, {arith.AddfOp: operator.add, arith.SubfOp: operator.sub,
                                  arith.MulfOp: operator.mul}, _float32_impl)


def _unsigned_impl(pick: Any) -> Any:
    """`maxui` / `minui`: the operand `pick` chooses by unsigned value."""
    def run(self: Any, interp: Interpreter, op: Any, args: Any):
        width = bits(op.result.type)
        return (to_signed(pick(args, key=lambda v: v % (1 << width)) % (1 << width), width),)

    return run


register_table(ArithExtraFunctions, {arith.MaxUIOp: max, arith.MinUIOp: min}, _unsigned_impl)


def _signed_impl(pick: Any) -> Any:
    """`maxsi` / `minsi`: the operand `pick` chooses by signed value, as
    native code compares (a true i1 is -1, less than a false one)."""
    def run(self: Any, interp: Interpreter, op: Any, args: Any):
        return (pick(args, key=lambda v: signed(v, op.result.type)),)

    return run


register_table(ArithExtraFunctions, {arith.MaxSIOp: max, arith.MinSIOp: min}, _signed_impl)


# The scalar ops whose semantics are one Python function of the operands.
SCALAR_ARITH: dict[type, Any] = {
    arith.NegfOp: lambda x: -x,
    arith.MaxnumfOp: lambda a, b: float(maxnumf(a, b)),
    arith.MinnumfOp: lambda a, b: float(minnumf(a, b)),
}


def _scalar_impl(fn: Any) -> Any:
    def run(self: Any, interp: Interpreter, op: Any, args: Any):
        return (fn(*args),)

    return run


register_table(ArithExtraFunctions, SCALAR_ARITH, _scalar_impl)


def maximumf(a: Any, b: Any) -> Any:
    """NaN where either is, and +0.0 above -0.0 (`np.maximum` may give either zero)."""
    return np.where(a == b, np.where(np.signbit(a), b, a), np.maximum(a, b))


def minimumf(a: Any, b: Any) -> Any:
    """NaN where either is, and -0.0 below +0.0."""
    return np.where(a == b, np.where(np.signbit(a), a, b), np.minimum(a, b))


def maxnumf(a: Any, b: Any) -> Any:
    """The other operand where one is NaN (`llvm.maximumnum`, as native code:
    MLIR lets a tie of -0.0 and +0.0 give either, this gives +0.0)."""
    return np.where(np.isnan(b), a, np.where(np.isnan(a), b, maximumf(a, b)))


def minnumf(a: Any, b: Any) -> Any:
    """The other operand where one is NaN, and -0.0 below +0.0."""
    return np.where(np.isnan(b), a, np.where(np.isnan(a), b, minimumf(a, b)))


# The row forms of arith ops (`invoke-to-frontier`): the same op on tensors
# of rows, elementwise; NumPy's int32 arithmetic wraps as i32 does.
ROW_ARITH: dict[type, Any] = {
    arith.AddiOp: np.add, arith.SubiOp: np.subtract, arith.MuliOp: np.multiply,
    arith.AndIOp: np.bitwise_and, arith.OrIOp: np.bitwise_or,
    arith.XOrIOp: np.bitwise_xor, arith.MaxSIOp: np.maximum, arith.MinSIOp: np.minimum,
    arith.AddfOp: np.add, arith.SubfOp: np.subtract, arith.MulfOp: np.multiply,
    arith.DivfOp: np.divide, arith.NegfOp: np.negative, arith.MaximumfOp: maximumf,
    arith.MinimumfOp: minimumf, arith.MaxnumfOp: maxnumf, arith.MinnumfOp: minnumf,
}


class ArithRowFunctions(InterpreterFunctions):
    """Tensor-typed arith ops in NumPy, scalar ones by the scalar impls;
    registered over those (xDSL dispatches on the op's class only)."""

    def __init__(self, *scalar: InterpreterFunctions):
        impls = [(f, type(f)._impls()) for f in scalar]  # pyright: ignore[reportPrivateUsage]
        self.scalar = {op_type: (f, run) for f, runs in impls for op_type, run in runs}


def _row_impl(fn: Any) -> Any:
    def run(self: ArithRowFunctions, interp: Interpreter, op: Any, args: Any):
        typ = op.result.type
        if isinstance(typ, TensorType) and typ.element_type == i1:
            return (on_bits(fn, args),)
        if isinstance(typ, TensorType):
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                return (fn(*args),)
        functions, scalar = self.scalar[type(op)]
        return scalar(functions, interp, op, args).values

    return run


register_table(ArithRowFunctions, ROW_ARITH, _row_impl)


def on_bits(fn: Any, args: Any) -> Any:
    """`fn` on rows of i1 (0 or 1 here, or bools) as on i1 values: signed,
    a true one is -1 (maxsi is and), and the result taken mod 2 (1 + 1 is 0)."""
    signed = [-(np.asarray(a, np.int32) & 1) for a in args]
    return np.bitwise_and(fn(*signed), 1).astype(np.asarray(args[0]).dtype)
