"""A recursive batch's arrays checked and described natively, read in place.

A recursive team's batch (`backend/batch_fields.py`) passes each call's
structure arrays as descriptors (`{i64 length, ptr data}`), its arrays of
fixed shape by address. Python checked each array (its type, dtype, rank,
fixed sizes, C order) and read its length and data address: half a
microsecond an array warm, several times that on the caches a batch's
native work leaves cold, all of it on the calling thread while the team
waits (`bench/batch_layout.py`).

`recir_array_columns(plan)` reads those facts from each array object where
CPython and NumPy keep them (`OFFSETS`, probed against NumPy's own answers
before first use: `array_offsets`). An object passes where its type is
`numpy.ndarray` itself, its dtype the expected one's object (NumPy's
built-in dtypes are one object each), its rank and every fixed dimension
as expected and its flags C-contiguous: its length (first dimension; 1 at
rank 0) and data address go to the plan's table. Nothing of an object but
its type is read before the type is found to be ndarray, nor its
dimensions before its rank. The plan names the first object that does not
pass; its caller then takes the checking path, whose messages say what is
wrong (an equal dtype of another object passes there).

It runs with the GIL held (`ctypes.PYFUNCTYPE`): no Python thread changes
an array while its fields are read.

Plan, 8-byte fields: the objects' count, their addresses (i64 each), the
ndarray type's address, the dtype object's, the rank, the expected
dimensions (i64 each, -1: any), the table ({length, data} an object), and,
written back, the first object that does not pass (-1: none).
"""

from __future__ import annotations

import ctypes
import sys
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ModuleOp, i1, i8, i32, i64
from xdsl.ir import SSAValue

from recir.backend.array_address import data_address
from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter

ENTRY = "recir_array_columns"
COUNT, OBJECTS, TYPE, DTYPE, RANK, DIMS, TABLE, FAILED = range(8)
# byte offsets in an array object (NumPy's `PyArrayObject_fields` after
# CPython's object header), and its C-contiguous flag
OFFSETS = {"type": 8, "data": 16, "nd": 24, "dimensions": 32, "descr": 56, "flags": 64}
C_CONTIGUOUS = 0x0001


def array_offsets() -> bool:
    """Whether array objects here have their fields at `OFFSETS` (a 64-bit
    CPython and NumPy's struct), probed on arrays whose answers are known."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False  # (elsewhere `id` is no object's address)
    probe = np.zeros((3, 5), np.int32)
    at = id(probe)

    def read(name: str, kind: Any = ctypes.c_int64) -> int:
        return kind.from_address(at + OFFSETS[name]).value or 0

    dims = ctypes.cast(read("dimensions"), ctypes.POINTER(ctypes.c_int64))
    strided = probe[:, ::2]
    return (read("type") == id(np.ndarray) and read("data") == probe.ctypes.data
            and read("nd", ctypes.c_int32) == 2 and (dims[0], dims[1]) == (3, 5)
            and read("descr") == id(probe.dtype) and read("flags", ctypes.c_int32) & 1 == 1
            and ctypes.c_int32.from_address(id(strided) + OFFSETS["flags"]).value & 1 == 0)


def field(b: Emitter, obj: SSAValue, name: str, kind: Any = i64) -> SSAValue:
    """Field `name` of the object at `obj`."""
    return b.load(b.offset(obj, OFFSETS[name], i8), 0, kind)


def passes_checks(b: Emitter, obj: SSAValue, plan: SSAValue, rank: SSAValue) -> SSAValue:
    """Whether the object at `obj`, an ndarray, has the plan's dtype, rank,
    dimensions and C order."""
    flags = field(b, obj, "flags", i32)
    contiguous = b.compare("ne", b.value(arith.AndIOp(flags, b.const(C_CONTIGUOUS, i32))),
                           b.const(0, i32))
    same = b.value(arith.AndIOp(b.compare("eq", field(b, obj, "descr"),
                                          b.load(plan, DTYPE, i64)), contiguous))
    ranked = b.compare("eq", b.value(arith.ExtSIOp(field(b, obj, "nd", i32), i64)), rank)
    slot = b.alloca(1, i8)
    b.store(b.const(0, i8), slot, 0)

    def sizes(e: Emitter) -> None:  # (read only once its rank is the plan's)
        dims, wanted = field(e, obj, "dimensions", PTR), e.load(plan, DIMS, PTR)

        def each(f: Emitter, k: SSAValue, ok: Any) -> list[SSAValue]:
            want = f.load(wanted, k, i64)
            fits = f.value(arith.OrIOp(f.compare("slt", want, 0),
                                       f.compare("eq", f.load(dims, k, i64), want)))
            return [f.value(arith.AndIOp(ok[0], fits))]

        ok = e.loop(rank, each, [e.const(1, i1)])[0]
        e.store(e.value(arith.ExtUIOp(ok, i8)), slot, 0)

    b.when(b.value(arith.AndIOp(same, ranked)), sizes)
    return b.compare("ne", b.load(slot, 0, i8), b.const(0, i8))


def check_function() -> llvm.FuncOp:
    function, b, (plan,) = new_function(ENTRY, [PTR], private=False)
    count, objects, table = b.load(plan, COUNT, i64), b.load(plan, OBJECTS, PTR), \
        b.load(plan, TABLE, PTR)
    rank, kind = b.load(plan, RANK, i64), b.load(plan, TYPE, i64)

    def each(e: Emitter, i: SSAValue, failed: Any) -> list[SSAValue]:
        obj = e.load(objects, i, PTR)
        slot = e.alloca(2, i64)  # the length (-1: the object does not pass), the data
        e.store(e.i64(-1), slot, 0)
        e.store(e.i64(0), slot, 1)

        def array(f: Emitter) -> None:
            def passes(g: Emitter) -> None:  # (a rank-0 array: one row)
                g.store(g.i64(1), slot, 0)
                g.when(g.compare("sgt", rank, 0), lambda h: h.store(
                    h.load(field(h, obj, "dimensions", PTR), 0, i64), slot, 0))
                g.store(field(g, obj, "data"), slot, 1)

            f.when(passes_checks(f, obj, plan, rank), passes)

        e.when(e.compare("eq", field(e, obj, "type"), kind), array)
        length = e.load(slot, 0, i64)
        e.store(length, table, e.mul(i, 2))
        e.store(e.load(slot, 1, i64), table, e.add(e.mul(i, 2), 1))
        first = e.value(arith.AndIOp(e.compare("slt", length, 0), e.compare("slt", failed[0], 0)))
        return [e.value(arith.SelectOp(first, i, failed[0]))]

    b.store(b.loop(count, each, [b.i64(-1)])[0], plan, FAILED)
    b.op(llvm.ReturnOp())
    return function


@cache
def column_kernel(folder: Path | None = None) -> Any:
    """`recir_array_columns` as a ctypes function of a plan's address, called
    with the GIL held; None where array objects here are not laid out as
    `OFFSETS` says. `folder`: the calling function's cache folder."""
    if not array_offsets():
        return None
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir

    compiled = cached_engine("array_columns", ENTRY, lambda: to_llvm_ir(ModuleOp([
        lower_to_llvm(check_function())])), cache_dir=folder)
    check = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(compiled.address(ENTRY))
    check.engine = compiled  # the engine owns the code
    return check


def described(columns: list[tuple[Any, ...]], dtype: np.dtype, dims: tuple[int, ...],
              folder: Path | None = None) -> np.ndarray | None:
    """Each array of `columns` (equal lengths) as {length, data}: a table
    [column][call][2] of i64; None where one is not an ndarray of `dtype`,
    rank `len(dims)`, dimensions `dims` (-1: any) and C order, or where
    array objects here are not read in place (`column_kernel`)."""
    check = column_kernel(folder)
    if check is None:
        return None
    count = len(columns[0])
    objects = np.fromiter(map(id, chain.from_iterable(columns)), np.int64, len(columns) * count)
    wanted = np.array(dims, np.int64)
    table = np.empty((len(columns), count, 2), np.int64)
    plan = np.array([objects.size, data_address(objects), id(np.ndarray), id(dtype), len(dims),
                     data_address(wanted), data_address(table), 0], np.int64)
    check(data_address(plan))
    return table if plan[FAILED] < 0 else None

