"""The per-call arena that activation frames (`tape.new`) come from.

`@recir_tape_alloc(ctx, bytes)` bumps `tape_next` in the context; when the
chunk is full it mallocs a new one (at least CHUNK_BYTES, linked through its
first word into `tape_chunks` so the runtime can free them after the call).
A backward pass thus costs one malloc per megabyte of saved activations, not
one per invocation. Out of memory records an error and returns null.
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint

from recir.passes.convert_invoke_to_gomp import byte_offset, declare
from recir.passes.frame_buffers import allocated
from recir.passes.llvm_functions import lower_to_llvm
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import (
    ERROR_MEMORY,
    TAPE_BYTES,
    TAPE_CHUNKS,
    TAPE_END,
    TAPE_NEXT,
    field,
    record_error,
)

ALLOC = "recir_tape_alloc"
CHUNK_BYTES = 1 << 20
HEADER_BYTES = 64  # the link to the previous chunk, padded to keep frames aligned


def arena_functions() -> list[Operation]:
    return [declare("malloc", [i64], PTR), alloc_function()]


def alloc_function() -> llvm.FuncOp:
    entry, fast, grow, link, oom = (Block() for _ in range(5))
    ctx, size = entry.insert_arg(PTR, 0), entry.insert_arg(i64, 1)

    def at(block: Block) -> Emitter:
        return Emitter(InsertPoint.at_end(block), InsertPoint.at_end(entry))

    b = at(entry)
    rounded = b.value(arith.AndIOp(b.add(size, 63), b.i64(-64)))
    start = b.load(field(b, ctx, TAPE_NEXT), 0, PTR)
    after = byte_offset(b, start, rounded)
    end = b.load(field(b, ctx, TAPE_END), 0, PTR)
    fits = b.value(arith.CmpiOp(to_int(b, after), to_int(b, end), "ule"))
    b.op(llvm.CondBrOp(fits, fast, (), grow, ()))

    b = at(fast)
    bump(b, ctx, after, rounded)
    b.op(llvm.ReturnOp(start))

    b = at(grow)
    total = b.value(arith.MaxUIOp(b.add(rounded, HEADER_BYTES), b.i64(CHUNK_BYTES)))
    chunk = b.op(llvm.CallOp("malloc", total, return_type=PTR)).results[0]
    b.op(llvm.CondBrOp(allocated(b, chunk), link, (), oom, ()))

    b = at(link)
    chunks = field(b, ctx, TAPE_CHUNKS)
    b.store(b.load(chunks, 0, PTR), chunk, 0)
    b.store(chunk, chunks, 0)
    data = byte_offset(b, chunk, b.i64(HEADER_BYTES))
    b.store(byte_offset(b, chunk, total), field(b, ctx, TAPE_END), 0)
    bump(b, ctx, byte_offset(b, data, rounded), rounded)
    b.op(llvm.ReturnOp(data))

    b = at(oom)
    record_error(b, ctx, ERROR_MEMORY)
    b.op(llvm.ReturnOp(b.value(llvm.ZeroOp.create(result_types=[PTR]))))

    return lower_to_llvm(llvm.FuncOp(ALLOC, llvm.LLVMFunctionType([PTR, i64], PTR),
                                     llvm.LinkageAttr("internal"),
                                     body=Region([entry, fast, grow, link, oom])))


def bump(b: Emitter, ctx: SSAValue, after: SSAValue, rounded: SSAValue) -> None:
    b.store(after, field(b, ctx, TAPE_NEXT), 0)
    used = field(b, ctx, TAPE_BYTES)
    b.store(b.value(arith.AddiOp(b.load(used, 0, i64), rounded)), used, 0)


def to_int(b: Emitter, ptr: SSAValue) -> SSAValue:
    return b.value(llvm.PtrToIntOp(ptr, i64))
