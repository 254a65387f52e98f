"""The reference interpreter: xDSL's interpreter framework with NumPy semantics.

It is the oracle every pass and backend is checked against. `run_function`
checks arguments against the entry's signature, runs on a thread with a large
stack, and turns recursion that is too deep into a `RecirError`.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import cf, func, scf
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    ModuleOp,
    TensorType,
    i1,
)
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    OpImplResult,
    _InterpreterFunctionImpls,
    impl,
    register_impls,
)
from xdsl.interpreters.arith import ArithFunctions
from xdsl.interpreters.cf import CfFunctions
from xdsl.interpreters.func import FuncFunctions
from xdsl.interpreters.scf import ScfFunctions
from xdsl.ir import Attribute
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import InterpretationError

from recir.diagnostics import RecirError, format_error
from recir.interpreter.adjoint import AdjointFunctions
from recir.interpreter.arith import (ArithExtraFunctions, ArithRowFunctions,
                                    CheckedDivisionFunctions, Float32Functions)
from recir.interpreter.frontier import FrontierFunctions
from recir.interpreter.frontier_grad import FrontierGradFunctions
from recir.interpreter.invoke import InvokeFunctions
from recir.interpreter.tape import TapeFunctions
from recir.interpreter.tmath import TMathFunctions

STACK_BYTES = 512 * 1024 * 1024
MAX_PYTHON_FRAMES = 400_000


@register_impls
class CheckedLoopFunctions(InterpreterFunctions):
    """`scf.for` with a step that is not positive is an error, as in native
    code (`convert_scf_to_cf.guard_step`): xDSL's range() ran a negative
    step no times and raised ValueError on 0."""

    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args: Any) -> Any:
        if args[2] <= 0:
            raise InterpretationError(f"step must be positive, got {args[2]}")
        return ScfFunctions.run_for(ScfFunctions(), interpreter, op, args).values


@register_impls
class AssertFunctions(InterpreterFunctions):
    """`cf.assert`, which xDSL does not interpret: a failed one raises its
    message as written, as native code's failed check does."""

    @impl(cf.AssertOp)
    def run_assert(self, interpreter: Interpreter, op: cf.AssertOp, args: Any) -> Any:
        if not args[0]:
            raise RecirError(op.msg.data)
        return ()


class _LocatedImpls(_InterpreterFunctionImpls):
    """Dispatch without xDSL's per-level re-wrapping of errors.

    xDSL prints the failing op's IR at every level an error passes through,
    which is quadratic in recursion depth; here the innermost failing op
    gives one located message and outer levels pass it on unchanged.
    """

    def run(self, interpreter: Interpreter, op: Any, args: tuple[Any, ...]) -> OpImplResult:
        entry = self._impl_dict.get(type(op))
        if entry is None:
            raise RecirError(format_error(op, "has no interpreter implementation"))
        ft, impl = entry
        try:
            return impl(ft, interpreter, op, args)
        except (InterpretationError, ArithmeticError, IndexError) as e:
            raise RecirError(format_error(op, str(e))) from None
        except ValueError as e:  # NumPy's, e.g. row forms of different row counts
            raise RecirError(format_error(op, f"cannot run: {e}")) from None


def make_interpreter(module: ModuleOp) -> Interpreter:
    interp = Interpreter(module)
    interp._impls = _LocatedImpls()  # pyright: ignore[reportPrivateUsage]
    for functions in (
        ArithFunctions(),
        ArithExtraFunctions(),
        FuncFunctions(),
        ScfFunctions(),
        CfFunctions(),
        AssertFunctions(),
        InvokeFunctions(),
        TMathFunctions(),
        TapeFunctions(),
        AdjointFunctions(),
        FrontierFunctions(),
        FrontierGradFunctions(),
    ):
        interp.register_implementations(functions)
    interp.register_implementations(CheckedDivisionFunctions(), override=True)
    interp.register_implementations(Float32Functions(), override=True)
    interp.register_implementations(CheckedLoopFunctions(), override=True)
    rows = ArithRowFunctions(ArithFunctions(), ArithExtraFunctions(), Float32Functions())
    interp.register_implementations(rows, override=True)
    return interp


def find_entry(module: ModuleOp, name: str) -> func.FuncOp:
    entry = SymbolTable.lookup_symbol(module, name)
    if not isinstance(entry, func.FuncOp):
        names = [op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp)]
        raise RecirError(
            f"error: no function @{name} in the module (functions: "
            f"{', '.join('@' + n for n in names) or 'none'})"
        )
    return entry


class ArgumentName:
    """`argument 3 (tensor<?xi32>)`, printed only for an error: printing an
    xDSL type costs more than a native call of a small model."""

    def __init__(self, index: int, typ: Attribute):
        self.index, self.typ = index, typ

    def __str__(self) -> str:
        return f"argument {self.index} ({self.typ})"


def integer_range(typ: IntegerType | IndexType) -> tuple[int, int]:
    """The values an integer argument may take: signed, as the native code
    reads them (i1: 0 and 1; index: 64 bits)."""
    width = 64 if isinstance(typ, IndexType) else typ.width.data
    if width == 1:
        return 0, 1
    return -(1 << (width - 1)), (1 << (width - 1)) - 1


def coerce_argument(index: int, value: Any, typ: Attribute) -> Any:
    """A Python/NumPy value checked and converted to the interpreter's form:
    every path (interpreter, native, `.batch`, frontier) converts its
    arguments here, so none narrows or reinterprets a value silently."""
    if isinstance(typ, TensorType):
        return coerce_tensor(index, value, typ)
    where = ArgumentName(index, typ)
    if isinstance(typ, IntegerType | IndexType):
        one_bit = isinstance(typ, IntegerType) and typ.width.data == 1
        if not isinstance(value, bool | int | np.integer | np.bool_) or (
                isinstance(value, bool | np.bool_) and not one_bit):  # (a bool is an i1's)
            raise RecirError(f"error: {where} expects an integer, got {value!r}")
        low, high = integer_range(typ)
        if not low <= int(value) <= high:
            raise RecirError(f"error: {where} does not fit: {value} is outside "
                             f"[{low}, {high}]")
        return int(value)
    if isinstance(typ, Float32Type | Float64Type):
        if not isinstance(value, int | float | np.floating | np.integer):
            raise RecirError(f"error: {where} expects a number, got {value!r}")
        try:
            with np.errstate(over="ignore"):  # (an overflow is refused below)
                number = float(np.float32(value) if isinstance(typ, Float32Type) else value)
        except OverflowError:
            raise RecirError(f"error: {where} is too large for {typ}: {value}") from None
        if math.isinf(number) and math.isfinite(value):  # (as an array's: `check_narrowed`)
            raise RecirError(f"error: {where} is {value}, which is beyond float32's range")
        return number
    raise RecirError(f"error: {where}: unsupported argument type")


INT32 = np.iinfo(np.int32)


TensorFacts = tuple[np.dtype[Any], int, tuple[tuple[int, int], ...]]


def tensor_facts(typ: TensorType[Attribute]) -> TensorFacts:
    """The array dtype a tensor type converts to, its rank and its fixed
    dimensions (axis, size): the frontier works them out once per batch and
    column, not once per tree."""
    is_int = isinstance(typ.element_type, IntegerType)
    shape = tuple(typ.get_shape())
    fixed = tuple((axis, d) for axis, d in enumerate(shape) if d >= 0)
    return np.dtype(np.int32 if is_int else np.float32), len(shape), fixed


def coerce_tensor(index: int, value: Any, typ: TensorType[Attribute],
                  facts: TensorFacts | None = None) -> np.ndarray:
    """An int32 or float32 array; integers of another width are range-checked
    before they are narrowed (a word id 2**32 + w must not become w), floats
    never become integers, and only numeric (bool, integer, float) arrays
    are accepted."""
    dtype, rank, fixed = tensor_facts(typ) if facts is None else facts
    if not isinstance(value, np.ndarray):
        raise RecirError(f"error: {ArgumentName(index, typ)} expects an array, "
                         f"got {type(value).__name__}")
    narrowing = False  # float64 (or wider) to float32: may overflow
    if value.dtype is not dtype and value.dtype != dtype:
        check_dtype(ArgumentName(index, typ), value, dtype)
        narrowing = dtype.kind == "f" and value.dtype.kind == "f" and value.dtype.itemsize > 4
    if value.ndim != rank or any(value.shape[axis] != d for axis, d in fixed):
        raise RecirError(f"error: {ArgumentName(index, typ)} got an array of shape "
                         f"{value.shape}")
    if narrowing:
        with np.errstate(over="ignore"):  # (refused just below, by name)
            converted = np.asarray(value, dtype, order="C")
        check_narrowed(ArgumentName(index, typ), value, converted)
        return converted
    return np.asarray(value, dtype, order="C")  # (0-d stays 0-d, unlike ascontiguousarray)


def check_narrowed(where: object, value: np.ndarray, narrowed: np.ndarray) -> None:
    """No finite float64 became an f32 infinity (NaN and inf given stay as
    they are): one vectorized scan of the result, a second only if it holds
    an infinity."""
    if not np.isinf(narrowed).any():
        return
    overflowed = np.isinf(narrowed) & np.isfinite(value)
    if overflowed.any():
        bad = value[overflowed].flat[0]
        raise RecirError(f"error: {where} holds {bad}, which is beyond float32's range")


def check_dtype(where: ArgumentName, value: np.ndarray, dtype: np.dtype[Any]) -> None:
    """`value` converts to `dtype` (int32 or float32) without losing meaning."""
    if value.dtype.kind not in "biuf":
        raise RecirError(f"error: {where} expects a numeric array, got dtype {value.dtype}")
    if dtype.kind == "f":
        return
    if value.dtype.kind not in "iu":
        raise RecirError(f"error: {where} expects integers, got dtype {value.dtype}")
    if value.size and (value.min() < INT32.min or value.max() > INT32.max):
        bad = value[(value < INT32.min) | (value > INT32.max)][0]
        raise RecirError(f"error: {where} holds {bad}, which does not fit in int32")


def coerce_arguments(name: str, args: Sequence[Any], inputs: Sequence[Attribute]
                     ) -> list[Any]:
    """`args` for `@name`'s parameter types `inputs`, each `coerce_argument`ed."""
    if len(args) != len(inputs):
        raise RecirError(f"error: @{name} takes {len(inputs)} arguments, got {len(args)}")
    return [coerce_argument(i, a, t) for i, (a, t) in enumerate(zip(args, inputs))]


def run_function(module: ModuleOp, name: str, args: Sequence[Any]) -> tuple[Any, ...]:
    """Run `@name` on `args`; integers, floats and ndarrays in and out."""
    entry = find_entry(module, name)
    values = coerce_arguments(name, args, entry.function_type.inputs.data)
    results = run_deep(lambda: make_interpreter(module).call_op(entry, tuple(values)))
    return as_returned(results, entry.function_type.outputs.data)


def as_returned(results: Sequence[Any], types: Sequence[Attribute]) -> tuple[Any, ...]:
    """Results as native code returns them: an i1 is a bool (xDSL's
    `arith.constant true` is the signed -1)."""
    return tuple(bool(int(v) & 1) if typ == i1 and isinstance(v, int) else v
                 for v, typ in zip(results, types, strict=True))


class DeepCalls:
    """The interpreter calls running on threads at once, under its lock:
    the recursion limit is the process's, raised while any runs and put
    back when the last ends (calls that each put back the limit they found
    left it raised for good when they overlapped)."""

    def __init__(self) -> None:
        self.lock, self.running, self.limit = threading.Lock(), 0, 0

    def enter(self) -> None:
        with self.lock:
            if not self.running:
                self.limit = sys.getrecursionlimit()
                sys.setrecursionlimit(max(self.limit, MAX_PYTHON_FRAMES))
            self.running += 1

    def leave(self) -> None:
        with self.lock:
            self.running -= 1
            if not self.running:
                sys.setrecursionlimit(self.limit)


DEEP_CALLS = DeepCalls()


def run_deep(work: Any) -> Any:
    """Run `work()` on a thread with a big stack; deep recursion is an error."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except RecursionError:
            outcome["error"] = RecirError(
                "error: recursion too deep for the interpreter "
                f"(more than {MAX_PYTHON_FRAMES} Python frames)"
            )
        except BaseException as e:  # re-raised on the caller's thread
            outcome["error"] = e

    DEEP_CALLS.enter()
    try:
        with DEEP_CALLS.lock:  # (the stack size is the process's: for this thread alone)
            old_stack = threading.stack_size(STACK_BYTES)
            try:
                thread = threading.Thread(target=target, name="recir-interpreter")
                thread.start()
            finally:
                threading.stack_size(old_stack)
        thread.join()
    finally:
        DEEP_CALLS.leave()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
