"""The expand segment as one native loop, where it is integer work only.

Expanding a batch's call tree through the generic interpreter costs one
frontier evaluation per depth level,
though for the structure-driven models (TreeRNN, RNTN, TreeLSTM) the segment
is a handful of scalar ops: read a child index from a per-tree array, test
it, invoke. Here that segment is compiled to LLVM IR (one function per
model): a loop over the invocations in id order evaluates the segment for
one invocation at a time and appends each child it invokes (ids grow
breadth first, so a child's id is above its parent's, as `heights.py`
needs). It fills the same tables the interpreter does: each invocation's
root, its children per call site (-1: none) and the stored values the post
segment reads.

Segments with anything else (TD-TreeLSTM's LSTM step computes floats) keep
the interpreter, and so does a batch with an index out of a structure
array's bounds: the interpreter then raises its located error. More
invocations than `schedule.MAX_INVOCATIONS` (a cycle in a tree) is that
error here.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from recir.batching import schedule as limits
from recir.batching.kernels import PerRoot
from recir.passes.frontier_segments import CONSTANTS, TERMINATORS, Plan
from recir.dialects import invoke, tmath

BINARY = {arith.AddiOp: "add", arith.SubiOp: "sub", arith.MuliOp: "mul", arith.AndIOp: "and",
          arith.OrIOp: "or", arith.XOrIOp: "xor"}
CMPI = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
FIRST_CAPACITY = 4096  # invocations; the tables double until a batch fits
GROW, FAILED = -1, -2  # the function's results other than the invocation count


class Unsupported(Exception):
    """The segment has something the native loop does not handle."""


def scalar(v: SSAValue) -> str:
    """The LLVM type of an i1 or i32 value (the interpreter's dtypes)."""
    typ = v.type
    if isinstance(typ, IntegerType) and typ.width.data in (1, 32):
        return f"i{typ.width.data}"
    raise Unsupported(f"a value of type {typ}")


class Emitter:
    """LLVM IR for the expand segment of one invocation `%k`.

    The table `%tab` holds pointers: roots (i64), the error cell, each moving
    argument's array, each site's children (i64), each stored value's array
    (i8 or i32), then flat/offsets/lengths of each structure array read."""

    def __init__(self, plan: Plan):
        self.plan = plan
        args = plan.rec.body.block.args
        self.moving = [a for a, through in zip(args, plan.passthrough, strict=True)
                       if not through]
        self.stored = [v for v in plan.stored if not isinstance(v, BlockArgument)]
        self.arrays: list[BlockArgument] = [
            a for a, through in zip(args, plan.passthrough, strict=True)
            if through and plan.kinds[a] == "R"]
        self.lines: list[str] = []
        self.names: dict[SSAValue, str] = {}
        self.count = 0
        self.label = "body"

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def slot(self, k: int) -> str:
        """The table's pointer k, loaded once in the entry block."""
        return f"%t{k}"

    @property
    def slots(self) -> int:
        return 2 + len(self.moving) + len(self.plan.sites) + len(self.stored) + 3 * len(
            self.arrays)

    def emit(self, line: str) -> None:
        self.lines.append(f"  {line}")

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.label = label

    def value(self, v: SSAValue) -> str:
        found = self.names.get(v)
        if found is not None:
            return found
        if isinstance(v.owner, arith.ConstantOp):
            data = v.owner.value
            number = int(data.value.data if hasattr(data, "value") else data.data)
            return ("true" if number else "false") if scalar(v) == "i1" else str(number)
        raise Unsupported("a value the expand segment does not compute")

    # -- ops ------------------------------------------------------------------
    def block(self, block: Block, phase: str) -> list[SSAValue]:
        """Emit the ops `phase` runs; the yielded values."""
        for op in self.plan.block_ops(block, phase):
            if isinstance(op, CONSTANTS):
                continue
            if isinstance(op, TERMINATORS):
                return list(op.operands)
            self.op(op, phase)
            for r in op.results:
                if r in self.stored:
                    self.store(r)
        return []

    def op(self, op: Operation, phase: str) -> None:
        name = self.fresh("%v")
        if isinstance(op, tmath.ExtractOp):
            self.extract(op, name)
        elif isinstance(op, tmath.SizeOp):
            lengths = self.array(op.operands[0])[2]
            self.emit(f"{name}.p = getelementptr i64, ptr {lengths}, i64 %root")
            self.emit(f"{name}.n = load i64, ptr {name}.p")
            self.emit(f"{name} = trunc i64 {name}.n to i32")
        elif isinstance(op, arith.CmpiOp):
            a, b = op.operands
            self.emit(f"{name} = icmp {CMPI[op.predicate.value.data]} {scalar(a)} "
                      f"{self.value(a)}, {self.value(b)}")
        elif type(op) in BINARY:
            a, b = op.operands
            self.emit(f"{name} = {BINARY[type(op)]} {scalar(a)} {self.value(a)}, "
                      f"{self.value(b)}")
        elif isinstance(op, scf.IfOp):
            self.branch(op, phase, name)
            return
        elif isinstance(op, invoke.InvokeOp):
            self.invoke(op)
            return
        else:
            raise Unsupported(f"'{op.name}'")
        self.names[op.results[0]] = name

    def array(self, v: SSAValue) -> tuple[str, str, str]:
        if v not in self.arrays:
            raise Unsupported("an array that is not a per-tree structure array")
        base = 2 + len(self.moving) + len(self.plan.sites) + len(self.stored) + 3 * \
            self.arrays.index(v)  # type: ignore[arg-type]
        return self.slot(base), self.slot(base + 1), self.slot(base + 2)

    def extract(self, op: Operation, name: str) -> None:
        array, index = op.operands
        if scalar(index) != "i32" or scalar(op.results[0]) != "i32":
            raise Unsupported("an extract that is not i32")
        flat, offsets, lengths = self.array(array)
        ok = self.fresh("read")
        self.emit(f"{name}.lp = getelementptr i64, ptr {lengths}, i64 %root")
        self.emit(f"{name}.len = load i64, ptr {name}.lp")
        self.emit(f"{name}.j = sext i32 {self.value(index)} to i64")
        self.emit(f"{name}.ok = icmp ult i64 {name}.j, {name}.len")
        self.emit(f"br i1 {name}.ok, label %{ok}, label %bad")
        self.start(ok)
        self.emit(f"{name}.op = getelementptr i64, ptr {offsets}, i64 %root")
        self.emit(f"{name}.off = load i64, ptr {name}.op")
        self.emit(f"{name}.at = add i64 {name}.off, {name}.j")
        self.emit(f"{name}.fp = getelementptr i32, ptr {flat}, i64 {name}.at")
        self.emit(f"{name} = load i32, ptr {name}.fp")

    def branch(self, op: scf.IfOp, phase: str, name: str) -> None:
        whole = op in self.plan.expand
        inner = "all" if whole else phase
        labels = [self.fresh("then"), self.fresh("else")]
        join = self.fresh("join")
        self.emit(f"br i1 {self.value(op.cond)}, label %{labels[0]}, label %{labels[1]}")
        ends = []
        for region, label in zip(op.regions, labels, strict=True):
            self.start(label)
            yields = self.block(region.block, inner)
            ends.append((self.label, yields))
            self.emit(f"br label %{join}")
        self.start(join)
        if not whole:
            return
        for k, r in enumerate(op.results):
            incoming = ", ".join(f"[ {self.value(y[k])}, %{label} ]" for label, y in ends)
            self.names[r] = f"{name}.{k}"
            self.emit(f"{name}.{k} = phi {scalar(r)} {incoming}")
            if r in self.stored:
                self.store(r)

    def invoke(self, op: invoke.InvokeOp) -> None:
        site = self.plan.sites[op]  # type: ignore[index]
        name = self.fresh("%c")
        room = self.fresh("room")
        self.emit(f"{name}.id = load i64, ptr %total")
        self.emit(f"{name}.full = icmp sge i64 {name}.id, %cap")
        self.emit(f"br i1 {name}.full, label %grow, label %{room}")
        self.start(room)
        self.emit(f"{name}.next = add i64 {name}.id, 1")
        self.emit(f"store i64 {name}.next, ptr %total")
        self.emit(f"{name}.cp = getelementptr i64, ptr {self.slot(2 + len(self.moving) + site)}"
                  ", i64 %k")
        self.emit(f"store i64 {name}.id, ptr {name}.cp")
        self.emit(f"{name}.rp = getelementptr i64, ptr {self.slot(0)}, i64 {name}.id")
        self.emit(f"store i64 %root, ptr {name}.rp")
        for j, (v, _) in enumerate(self.plan.moving_args(op)):
            t = scalar(v)
            self.emit(f"{name}.m{j} = getelementptr {t}, ptr {self.slot(2 + j)}, i64 {name}.id")
            self.emit(f"store {t} {self.value(v)}, ptr {name}.m{j}")

    def store(self, v: SSAValue) -> None:
        """Keep a stored value's row (i1 as a byte, NumPy's bool)."""
        name = self.fresh("%s")
        slot = self.slot(2 + len(self.moving) + len(self.plan.sites) + self.stored.index(v))
        x = self.value(v)
        if scalar(v) == "i1":
            self.emit(f"{name}.b = zext i1 {x} to i8")
            x, t = f"{name}.b", "i8"
        else:
            t = "i32"
        self.emit(f"{name}.p = getelementptr {t}, ptr {slot}, i64 %k")
        self.emit(f"store {t} {x}, ptr {name}.p")

    # -- the function -----------------------------------------------------------
    def function(self) -> str:
        """`i64 @recir_expand(ptr %tab, i64 %n0, i64 %cap)`: the invocation
        count, GROW (more than `cap`) or FAILED (the error cell is set)."""
        self.names.update((a, f"%a{j}") for j, a in enumerate(self.moving))
        self.start("body")
        for j, a in enumerate(self.moving):
            t = scalar(a)
            self.emit(f"%a{j}.p = getelementptr {t}, ptr {self.slot(2 + j)}, i64 %k")
            self.emit(f"%a{j} = load {t}, ptr %a{j}.p")
        for site in range(len(self.plan.sites)):
            base = self.slot(2 + len(self.moving) + site)
            self.emit(f"%none{site} = getelementptr i64, ptr {base}, i64 %k")
            self.emit(f"store i64 -1, ptr %none{site}")
        self.block(self.plan.rec.body.block, "expand")
        self.emit("br label %next")
        body = "\n".join(self.lines)
        loads = "\n".join(f"  %t{k}.a = getelementptr ptr, ptr %tab, i64 {k}\n"
                          f"  %t{k} = load ptr, ptr %t{k}.a" for k in range(self.slots))
        return f"""define i64 @recir_expand(ptr %tab, i64 %n0, i64 %cap) {{
entry:
{loads}
  %total = alloca i64
  store i64 %n0, ptr %total
  br label %head
head:
  %k = phi i64 [ 0, %entry ], [ %k1, %next ]
  %count = load i64, ptr %total
  %more = icmp slt i64 %k, %count
  br i1 %more, label %open, label %done
open:
  %rootp = getelementptr i64, ptr %t0, i64 %k
  %root = load i64, ptr %rootp
  br label %body
{body}
next:
  %k1 = add i64 %k, 1
  br label %head
done:
  ret i64 %count
grow:
  ret i64 {GROW}
bad:
  store i64 1, ptr %t1
  ret i64 {FAILED}
}}
"""


def is_int_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == np.int32 and x.flags.c_contiguous


class NativeExpand:
    """The compiled expand segment of one plan; `ok` is False where it does not
    apply (the interpreter expands)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.capacity = FIRST_CAPACITY
        self.function: Any = None
        try:
            self.layout = Emitter(plan)
            text = self.layout.function()
        except Unsupported:
            self.ok = False
            return
        from recir.backend.engine import text_function

        p = ctypes.c_void_p
        self.function = text_function(text, "recir_expand", ctypes.CFUNCTYPE(
            ctypes.c_int64, p, ctypes.c_int64, ctypes.c_int64))
        self.ok = True

    def run(self, schedule: Any, moving: list[Any], roots: np.ndarray) -> bool:
        """Expand into `schedule`'s tables; False: the interpreter must (a
        failed check, inputs of other dtypes)."""
        layout, runner = self.layout, schedule.runner
        arrays = []
        for a in layout.arrays:
            x = schedule.fixed.get(runner.slot[a])
            if not isinstance(x, PerRoot) or not is_int_array(x.flat):
                return False
            arrays += [x.flat, x.offsets, x.lengths]
        n0, most = len(roots), limits.MAX_INVOCATIONS
        cap = min(max(self.capacity, n0), most)
        while True:
            if n0 > cap:
                raise limits.too_big(self.plan, f"{most} invocations")
            tables = self.tables(cap, moving, roots)
            err = np.zeros(1, np.int64)
            words = [tables[0], err, *tables[1:]] + arrays
            tab = np.array([w.ctypes.data for w in words], np.uint64)
            total = self.function(tab.ctypes.data, n0, cap)
            if total != GROW:
                break
            if cap == most:
                raise limits.too_big(self.plan, f"{most} invocations")
            cap = min(2 * cap, most)
        self.capacity = max(FIRST_CAPACITY, 2 * total)  # room for a batch like this one
        if total == FAILED:
            return False
        self.fill(schedule, tables, total, n0)
        return True

    def tables(self, cap: int, moving: list[Any], roots: np.ndarray) -> list[np.ndarray]:
        """Roots, moving arguments, children per site, stored values: `cap` rows."""
        n0 = len(roots)
        layout = self.layout
        out = [np.empty(cap, np.int64)]
        out[0][:n0] = roots
        for a, x in zip(layout.moving, moving, strict=True):
            column = np.empty(cap, np.bool_ if scalar(a) == "i1" else np.int32)
            column[:n0] = x
            out.append(column)
        out += [np.empty(cap, np.int64) for _ in self.plan.sites]
        out += [np.zeros(cap, np.bool_ if scalar(v) == "i1" else np.int32)
                for v in layout.stored]
        return out

    def fill(self, schedule: Any, tables: list[np.ndarray], total: int, n0: int) -> None:
        """The interpreter's tables, as one chunk each."""
        layout = self.layout
        nmoving, nsites = len(layout.moving), len(self.plan.sites)
        columns = dict(zip(layout.moving, tables[1:1 + nmoving], strict=True))
        columns.update(zip(layout.stored, tables[1 + nmoving + nsites:], strict=True))
        schedule.root_chunks = [tables[0][:total]]
        schedule.child_chunks = [[c[:total]] for c in tables[1 + nmoving:1 + nmoving + nsites]]
        schedule.stored_chunks = {v: [columns[v][:total]] for v in self.plan.stored}
        schedule.levels = [(0, n0, None)]
        schedule.total = total
