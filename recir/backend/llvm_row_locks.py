"""`adjoint.lock_row` / `adjoint.unlock_row` as a spin lock, which xDSL's llvm
dialect cannot express: locks striped by row index in a module-wide table,
each on its own 64-byte line (`atomicrmw xchg` acquire, `store atomic`
release), translated straight to llvmlite (`llvm_convert.FIXES`)."""

from __future__ import annotations

import llvmlite.ir as ir
from xdsl.ir import SSAValue

from recir.dialects import adjoint

ValueMap = dict[SSAValue, ir.Value]
ROW_LOCKS = 256
LOCK_STRIDE = 16  # i32s per lock (a cache line)
I32, I64 = ir.IntType(32), ir.IntType(64)


def _row_lock(row: ir.Value, builder: ir.IRBuilder) -> ir.Value:
    """The lock word of `row` in the module's table (made at first use)."""
    module = builder.module
    table = module.globals.get("recir_row_locks")
    if table is None:
        typ = ir.ArrayType(I32, ROW_LOCKS * LOCK_STRIDE)
        table = ir.GlobalVariable(module, typ, "recir_row_locks")
        table.linkage = "internal"
        table.initializer = ir.Constant(typ, None)
        table.align = 64
    slot = builder.and_(row, ir.Constant(I64, ROW_LOCKS - 1))
    word = builder.mul(slot, ir.Constant(I64, LOCK_STRIDE))
    return builder.gep(table, [word], inbounds=True, source_etype=I32)


def _acquire_function(module: ir.Module) -> ir.Function:
    """`recir_acquire(lock)`: exchange 1 in until 0 comes out, reading (not
    writing) the word while another thread holds it."""
    found = module.globals.get("recir_acquire")
    if found is not None:
        return found
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()]),
                           "recir_acquire")
    function.linkage = "internal"
    lock = function.args[0]
    entry, take, wait, done = (function.append_basic_block(n)
                               for n in ("entry", "take", "wait", "done"))
    ir.IRBuilder(entry).branch(take)
    b = ir.IRBuilder(take)
    old = b.atomic_rmw("xchg", lock, ir.Constant(I32, 1), "acquire")
    b.cbranch(b.icmp_unsigned("==", old, ir.Constant(I32, 0)), done, wait)
    b = ir.IRBuilder(wait)
    held = b.load_atomic(lock, "monotonic", 4, typ=I32)
    b.cbranch(b.icmp_unsigned("==", held, ir.Constant(I32, 0)), take, wait)
    ir.IRBuilder(done).ret_void()
    return function


def lock_row(op: adjoint.LockRowOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    builder.call(_acquire_function(builder.module), [_row_lock(values[op.row], builder)])


def unlock_row(op: adjoint.UnlockRowOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    builder._insert(ir.instructions.StoreAtomicInstr(
        builder.block, ir.Constant(I32, 0), _row_lock(values[op.row], builder), "release", 4))
