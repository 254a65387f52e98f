"""The logs that deferred outer products (`adjoint.log_reserve`) go to.

`@recir_log_reserve(ctx, slot, bytes)` returns room for one record at the
end of this thread's log for `slot` (descriptor `slot` of the context's
`outer_logs` table: `{data, used, capacity}`), growing it with realloc
(doubling, at least GROW_BYTES) when full. Out of memory, or a context
without a table, records an error and returns null. The runtime adds each
log with one matrix product after the call and frees it (`backend/outer_logs.py`).
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i64
from xdsl.ir import Block, Operation, Region
from xdsl.rewriter import InsertPoint

from recir.passes.convert_invoke_to_gomp import byte_offset, declare
from recir.passes.frame_buffers import allocated
from recir.passes.llvm_functions import lower_to_llvm
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import ERROR_MEMORY, LOG_BYTES, OUTER_LOGS, field, record_error

RESERVE = "recir_log_reserve"
GROW_BYTES = 1 << 20
USED, CAPACITY = 8, 16  # descriptor fields after `data`


def log_functions() -> list[Operation]:
    return [declare("realloc", [PTR, i64], PTR), reserve_function()]


def reserve_function() -> llvm.FuncOp:
    entry, look, fast, grow, grown, fail = (Block() for _ in range(6))
    ctx, slot, size = entry.insert_arg(PTR, 0), entry.insert_arg(i64, 1), entry.insert_arg(i64, 2)

    def at(block: Block) -> Emitter:
        return Emitter(InsertPoint.at_end(block), InsertPoint.at_end(entry))

    b = at(entry)
    table = b.load(field(b, ctx, OUTER_LOGS), 0, PTR)
    b.op(llvm.CondBrOp(allocated(b, table), look, (), fail, ()))

    b = at(look)
    desc = byte_offset(b, table, b.mul(slot, LOG_BYTES))
    used = b.load(byte_offset(b, desc, b.i64(USED)), 0, i64)
    capacity = b.load(byte_offset(b, desc, b.i64(CAPACITY)), 0, i64)
    need = b.add(used, size)
    fits = b.value(arith.CmpiOp(need, capacity, "ule"))
    b.op(llvm.CondBrOp(fits, fast, (), grow, ()))

    b = at(fast)
    b.store(need, byte_offset(b, desc, b.i64(USED)), 0)
    b.op(llvm.ReturnOp(byte_offset(b, b.load(desc, 0, PTR), used)))

    b = at(grow)
    doubled = b.value(arith.MaxUIOp(b.mul(capacity, 2), b.i64(GROW_BYTES)))
    new_capacity = b.value(arith.MaxUIOp(doubled, need))
    data = b.op(llvm.CallOp("realloc", b.load(desc, 0, PTR), new_capacity,
                            return_type=PTR)).results[0]
    b.op(llvm.CondBrOp(allocated(b, data), grown, (), fail, ()))

    b = at(grown)
    b.store(data, desc, 0)
    b.store(new_capacity, byte_offset(b, desc, b.i64(CAPACITY)), 0)
    b.store(need, byte_offset(b, desc, b.i64(USED)), 0)
    b.op(llvm.ReturnOp(byte_offset(b, data, used)))

    b = at(fail)
    record_error(b, ctx, ERROR_MEMORY)
    b.op(llvm.ReturnOp(b.value(llvm.ZeroOp.create(result_types=[PTR]))))

    return lower_to_llvm(llvm.FuncOp(RESERVE, llvm.LLVMFunctionType([PTR, i64, i64], PTR),
                                     llvm.LinkageAttr("internal"),
                                     body=Region([entry, look, fast, grow, grown, fail])))
