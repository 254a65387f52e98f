"""A compiled function's arguments: checked, converted and packed.

Every call from Python goes through an entry point that takes its context
and arguments packed in 8-byte fields (`passes/entry_points.py`: `@f__packed`,
`@f__team`): f32 tensors are pointers to contiguous data; a structure array
(`tensor<?xi32>`) is a pointer to `{i64 length, ptr data}`, so generated
code can check every index read from it; scalars are their bits; tensor
results are written into arrays allocated here, a scalar result into a
slot whose address follows the arguments.
"""

from __future__ import annotations

import ctypes
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (Float32Type, FunctionType, IndexType, IntegerType, Signedness,
                                   TensorType, i32)
from xdsl.ir import Attribute, Operation

from recir.backend.array_address import data_address
from recir.diagnostics import RecirError, emit_error
from recir.dialects import adjoint
from recir.interpreter import coerce_argument, tensor_facts


class ArrayDescriptor(ctypes.Structure):
    _fields_ = [("length", ctypes.c_int64), ("data", ctypes.c_void_p)]


MOST_ELEMENTS = 1 << 60  # of a tensor: 8-byte elements still within a signed i64 of bytes
C_INTEGERS = {1: ctypes.c_bool, 8: ctypes.c_int8, 32: ctypes.c_int32, 64: ctypes.c_int64}


def c_scalar(typ: Attribute) -> type:
    if isinstance(typ, Float32Type):
        return ctypes.c_float
    if isinstance(typ, IntegerType) and typ.width.data in C_INTEGERS and (
            typ.signedness.data == Signedness.SIGNLESS):  # (LLVM has no ui32 or si32)
        return C_INTEGERS[typ.width.data]
    raise RecirError(f"error: the native backend cannot pass a value of type {typ}")


def check_native_signature(entry: func.FuncOp) -> None:
    """What `Arguments` can pass and return, checked before compiling
    (`recir-run --jit` takes any function): a private function has no entry
    point; tensors are read and written as f32 or i32 data (an i64 tensor
    read as i32 data, an i32 result read as f32 bits, were silently wrong);
    a result tensor is allocated here, so its shape must be static; an
    `adjoint.log_reserve`'s slot is the entry's f32 matrix its log is added
    into after the call."""
    if not entry.sym_name.data.isascii():  # (llvmlite looks symbols up as ASCII)
        raise emit_error(entry, f"@{entry.sym_name.data}: a native entry point's name is "
                         "ASCII: rename the function (or the model)")
    if entry.sym_visibility is not None and entry.sym_visibility.data == "private":
        raise emit_error(entry, f"@{entry.sym_name.data} is private: only a public "
                         "function gets a native entry point")
    signature = entry.function_type
    for what, types in (("argument", signature.inputs.data),
                        ("result", signature.outputs.data)):
        for i, typ in enumerate(types):
            problem = native_problem(typ, what == "result")
            if problem:
                raise emit_error(entry, f"{what} {i} ({typ}): {problem}")
    module = entry.parent_op()
    for op in module.walk() if module is not None else ():
        check_native_op(op, entry)


def check_native_op(op: Operation, entry: func.FuncOp) -> None:
    """What native code cannot lower or run of an op in the entry's module."""
    if isinstance(op, func.FuncOp) and not op.body.blocks:
        raise emit_error(op, f"@{op.sym_name.data} is declared without a body: native code "
                         "has none to call (define it in this module)")
    if any(isinstance(r.type, IndexType) for r in op.results):  # (LLVM took none)
        raise emit_error(op, "makes an index value, which the native backend does not "
                         "lower: use i64 (the interpreter takes it)")
    for r in op.results:  # (its byte offsets overflowed i64 while lowering, unlocated)
        if isinstance(r.type, TensorType) and math.prod(
                max(d, 0) for d in r.type.get_shape()) >= MOST_ELEMENTS:
            raise emit_error(op, f"makes a {r.type} of more elements than native code "
                             "can address")
    if isinstance(op, adjoint.LogReserveOp):  # the runtime adds each log into it
        slot, inputs = op.slot.value.data, entry.function_type.inputs.data
        typ = inputs[slot] if slot < len(inputs) else None
        if not (isinstance(typ, TensorType) and typ.element_type == Float32Type()
                and len(typ.get_shape()) == 2 and min(typ.get_shape()) >= 0):
            raise emit_error(op, f"slot {slot} names no static f32 matrix argument "
                             f"of the entry @{entry.sym_name.data}")


def native_problem(typ: Attribute, result: bool) -> str:
    """Why the native entry points cannot pass `typ` (empty if they can)."""
    if not isinstance(typ, TensorType):
        try:
            c_scalar(typ)
        except RecirError:
            return "the native backend passes scalars of types i1, i8, i32, i64 and f32"
        return ""
    shape = typ.get_shape()
    if result and (typ.element_type != Float32Type() or any(d < 0 for d in shape)):
        return "the native backend returns tensors of f32 with a static shape"
    if typ.element_type not in (Float32Type(), i32):
        return "the native backend passes tensors of f32 or i32"
    if any(d < 0 for d in shape[1:]):
        return "only the first dimension of a tensor argument may be dynamic"
    return ""


class Arguments:
    """How the inputs of `@name` (bound parameters last) become its entry
    points' fields, and its results come back. What calls share is read-only
    after `__init__` or a cache whose entries are immutable (`last`)."""

    def __init__(self, name: str, signature: FunctionType, params: Sequence[np.ndarray]):
        self.name = name
        self.inputs = list(signature.inputs)
        self.outputs = list(signature.outputs)
        self.params = [np.ascontiguousarray(p, dtype=np.float32) for p in params]
        self.shapes = [(tuple(t.get_shape()), np.dtype(np.int32 if isinstance(
            t.element_type, IntegerType) else np.float32)) if isinstance(t, TensorType) else None
            for t in self.inputs]
        # per argument: how `prepare` passes it; per output: its shape (a
        # tensor) or its ctype
        self.passing = [passing(sh, isinstance(t, IntegerType) and t.width.data == 32)
                        for sh, t in zip(self.shapes, self.inputs, strict=True)]
        self.sized_count = sum(kind == SIZED for kind, _, _ in self.passing)
        # per tensor argument, what a column of a batch's arrays is checked by
        # (`frontier_inputs.plain_column`, as `batch_fields` lays one out)
        self.facts = [tensor_facts(t) if isinstance(t, TensorType) else None
                      for t in self.inputs]
        public = self.public = len(self.inputs) - len(self.params)
        self.out_kinds = [tuple(t.get_shape()) if isinstance(t, TensorType) else c_scalar(t)
                          for t in self.outputs]
        scalars = [t for t in self.outputs if not isinstance(t, TensorType)]
        self.returns_one = len(scalars) == 1
        self.restype = c_scalar(scalars[0]) if self.returns_one else None
        # the order of the entry's result fields: every tensor result's buffer,
        # then (unless the entry returns the one scalar) each scalar's slot
        self.result_fields = [k for k, t in enumerate(self.outputs) if isinstance(t, TensorType)]
        if not self.returns_one:
            self.result_fields += [k for k, t in enumerate(self.outputs)
                                   if not isinstance(t, TensorType)]
        # the public scalar inputs `fields` packs, with their ctypes
        self.scalar_inputs = [(i, c_scalar(typ)) for i, typ in enumerate(self.inputs[:public])
                              if not isinstance(typ, TensorType)]
        # per argument: the last array of fixed shape passed, its shape, address and dtype
        self.last: list[tuple[np.ndarray, tuple[int, ...], int, np.dtype] | None] = [None] * len(
            self.inputs)
        self.param_keep: list[Any] = []
        self.param_args = [self.argument(public + j, p, self.inputs[public + j], self.param_keep)
                           for j, p in enumerate(self.params)]
        self.param_fields = [pack(a, None) for a in self.param_args]

    def prepare(self, inputs: Sequence[Any], keep: list[Any], outputs: bool = True
                ) -> tuple[list[Any], list[Any]]:
        """The native entry's arguments for `inputs` (bound parameters and
        result buffers added), and the results they will be written to.
        Arrays already in the right dtype, shape and layout pass by address
        (a call's Python cost is most of a small tree's native time); others
        go through `argument`'s checks.
        `inputs` must stay alive until the call returns."""
        public = self.public
        if len(inputs) != public:
            raise RecirError(f"error: @{self.name} takes {public} inputs, got {len(inputs)}")
        args: list[Any] = []
        descriptors = None
        used = 0
        last = self.last
        for i, value in enumerate(inputs):
            seen = last[i]
            if seen is not None and seen[0] is value and value.shape == seen[1] and (
                    value.dtype is seen[3]):  # the array of the last call: weights, gradients
                args.append(seen[2])
                continue
            kind, dtype, dims = self.passing[i]
            if type(value) is np.ndarray and (value.dtype is dtype or value.dtype == dtype) and (
                    value.flags.c_contiguous):
                if kind == FIXED and value.shape == dims:
                    address = data_address(value)
                    last[i] = (value, dims, address, value.dtype)
                    args.append(address)
                    continue
                if kind == SIZED and value.ndim and value.shape[1:] == dims:
                    if descriptors is None:
                        descriptors = (ctypes.c_int64 * (2 * self.sized_count))()
                        keep.append(descriptors)
                        base = ctypes.addressof(descriptors)
                    descriptors[used] = value.shape[0]
                    descriptors[used + 1] = data_address(value)
                    args.append(base + 8 * used)
                    used += 2
                    continue
            elif kind == SCALAR and type(value) is int and -(1 << 31) <= value < (1 << 31):
                args.append(value)
                continue
            args.append(self.argument(i, value, self.inputs[i], keep))
        args += self.param_args
        return args, self.result_buffers(args) if outputs else []  # (else `batch` adds them)

    def result_buffers(self, args: list[Any]) -> list[Any]:
        """A buffer per result (None: the entry returns it), their addresses
        added to `args` in the entry's order (`result_fields`)."""
        results: list[Any] = [None] * len(self.out_kinds)
        for k in self.result_fields:
            kind = self.out_kinds[k]
            if type(kind) is tuple:
                out = np.empty(kind, np.float32)
                args.append(data_address(out))
            else:
                out = kind()
                args.append(ctypes.addressof(out))
            results[k] = out
        return results

    @staticmethod
    def outputs_of(results: list[Any], returned: Any) -> tuple[Any, ...]:
        return tuple(returned if r is None else r if type(r) is np.ndarray else r.value
                     for r in results)

    def fields(self, args: list[Any]) -> list[int]:
        """The entry's arguments as its fields (`pack`): the bound parameters'
        fields made once, result buffers' addresses as they are."""
        fields = args[:self.public]
        for k, typ in self.scalar_inputs:
            fields[k] = pack(fields[k], typ)
        fields += self.param_fields
        fields += args[len(self.inputs):]
        return fields

    def result_slot(self) -> Any:
        """Where an entry stores the scalar result (in its own type; the
        `.value` of an unused slot is None)."""
        return self.restype() if self.restype is not None else NoResult()

    def argument(self, index: int, value: Any, typ: Attribute, keep: list[Any]) -> Any:
        """What the native entry takes for `value`, converted and checked
        (`prepare` passes arrays already in the right form without this)."""
        value = coerce_argument(index, value, typ)  # (an integer in its type's range)
        if not isinstance(typ, TensorType):
            return value
        keep.append(value)
        if all(size >= 0 for size in typ.get_shape()[:1]):  # (rank 0: no sizes)
            return value.ctypes.data
        descriptor = ArrayDescriptor(value.shape[0], value.ctypes.data)
        keep.append(descriptor)
        return ctypes.addressof(descriptor)


def whole_number(value: Any) -> int | None:
    """`value` as an int where it is a whole number (NumPy's integers too,
    not a bool), else None: an option such as `threads` or `loss`."""
    if isinstance(value, bool | np.bool_):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


ITEMS = frozenset((tuple, list))  # `batch_items`' item types (subclasses take its loop)


def batch_items(batch: Any, name: str, count: int | None = None) -> Sequence[Sequence[Any]]:
    """`batch` once it is a list or tuple of input lists or tuples (of
    `count` inputs each, where given): what every `.batch` indexes and
    measures before its calls check each input (a generator would be used
    up by the first look)."""
    if not isinstance(batch, list | tuple):
        raise RecirError(f"error: a batch of @{name} is a list or tuple of input tuples, "
                         f"got {type(batch).__name__}")
    if ITEMS.issuperset(map(type, batch)) and (count is None or {count}.issuperset(
            map(len, batch))):
        return batch  # (each item checked at C speed: the loop below names the bad one)
    for k, item in enumerate(batch):
        if not isinstance(item, list | tuple):
            raise RecirError(f"error: batch element {k} of @{name} is a list or tuple of "
                             f"inputs, got {type(item).__name__}")
        if count is not None and len(item) != count:
            raise RecirError(f"error: @{name} takes {count} inputs, got {len(item)} "
                             f"(batch element {k})")
    return batch


@contextmanager
def batch_element(k: int) -> Iterator[None]:
    """A `RecirError` raised meanwhile, on a batch's element `k` alone, names it."""
    try:
        yield
    except RecirError as error:
        raise RecirError(f"{error} (batch element {k})") from None


def named_element(error: RecirError, items: Sequence[Sequence[Any]],
                  alone: Callable[[Sequence[Any]], Any]) -> RecirError:
    """A batch's error (a native check's, which a team or the frontier
    raise for the batch) named by the first element that fails alone:
    `alone(inputs)` calls it on its own, with no lasting effect. `error`
    itself where it names one already, no element fails alone, or the batch
    has one element (a single call's: nothing to tell apart)."""
    if "(batch element " not in str(error) and len(items) > 1:
        for k, inputs in enumerate(items):
            try:
                alone(inputs)
            except RecirError as found:
                return RecirError(f"{found} (batch element {k})")
    return error


# how `prepare` passes an input: an i32 scalar as it is, an array of fixed
# shape by its data address, one with a leading dynamic dimension (a
# structure array) by a descriptor's address; anything else is checked
SCALAR, FIXED, SIZED, OTHER = range(4)


def passing(shape: tuple[tuple[int, ...], np.dtype] | None, i32: bool
            ) -> tuple[int, np.dtype | None, tuple[int, ...]]:
    """(kind, dtype, the dimensions `prepare` compares: all of a fixed
    shape's, a sized array's after the first)."""
    if shape is None:
        return (SCALAR if i32 else OTHER), None, ()
    dims, dtype = shape
    if all(d >= 0 for d in dims):
        return FIXED, dtype, dims
    if dims[0] < 0 and all(d >= 0 for d in dims[1:]):
        return SIZED, dtype, dims[1:]
    return OTHER, dtype, dims


def pack(value: Any, typ: Any) -> int:
    """An argument as the 8-byte field an entry point loads it from."""
    if typ is ctypes.c_float:
        return ctypes.c_uint32.from_buffer(ctypes.c_float(value)).value
    return (value or 0) & 0xFFFFFFFFFFFFFFFF


class NoResult(ctypes.Structure):
    """The slot of a call without a scalar result (never written)."""

    _fields_ = [("unused", ctypes.c_uint64)]
    value = None


def rows_of(buffer: Any, count: int) -> tuple[int, int]:
    """(address, bytes from one call's row to the next) of a batch's buffer
    of `count` results: a NumPy array's rows, a ctypes array's items."""
    if type(buffer) is np.ndarray:
        return data_address(buffer), buffer.nbytes // count
    return ctypes.addressof(buffer), ctypes.sizeof(buffer) // count
