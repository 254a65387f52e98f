"""The reduction of a gradient's thread copies at the end of a team call.

At threads > 1 each thread of a team adds gradients into its own zeroed
copy of each weight-gradient buffer (`adjoint.thread_copy`); after the
call, the team adds the copies into the caller's buffers. Those loops are
internal functions that the team entry (`entry_points.team_function`) calls, so
that LLVM optimises them once per module.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import ArrayAttr, StringAttr, f32, i32, i64
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.passes.arith_to_llvm import convert_arith
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import ACC_COPIES, CONTEXT_BYTES, field
from recir.passes.entry_points import SUM_COPIES, Copies, byte_offset, counted_loop

SUM_COPY = "__sum_copy"  # its loop over one copied buffer, shared by the buffers


def internal_function(name: str, inputs: Sequence[Attribute], blocks: list[Block]
                      ) -> llvm.FuncOp:
    """An internal, `noinline` function of `blocks` (arith converted): code
    that several callers share, so that LLVM optimises its loops once."""
    region = Region(blocks)
    for op in list(region.walk()):
        if (ops := convert_arith(op)) is not None:
            Rewriter.replace_op(op, ops)
    function = llvm.FuncOp(name, llvm.LLVMFunctionType(inputs, None),
                           llvm.LinkageAttr("internal"), body=region)
    function.attributes["passthrough"] = ArrayAttr([StringAttr("noinline")])
    return function


def sum_copies_function(name: str, copies: Copies) -> list[llvm.FuncOp]:
    """`@name__sum_copies(contexts, thread)`: after a barrier (every task
    done), each thread adds its share of the elements of every other
    thread's copy of each buffer into the caller's (thread 0's table) and
    zeroes it for the next call: a gradient call's copies summed on the
    team, not after it in Python. The team, batch and serial batch wrappers
    call it, and it calls `@name__sum_copy` (`sum_copy_function`) for each
    buffer: one copy of the loops, not one per wrapper and buffer. Nothing
    to add where thread 0 has no table (a team of one). Returns both."""
    block = Block(arg_types=[PTR, i32])
    contexts, thread = block.args
    b = Emitter(InsertPoint.at_end(block), InsertPoint.at_start(block))
    b.op(llvm.CallOp("GOMP_barrier"))
    own = b.load(field(b, contexts, ACC_COPIES), 0, PTR)
    add, finish = Block(), Block([llvm.ReturnOp()])
    none = b.value(arith.CmpiOp(b.value(llvm.PtrToIntOp(own, i64)), b.i64(0), "eq"))
    b.op(llvm.CondBrOp(none, finish, (), add, ()))
    b = b.at(InsertPoint.at_end(add))
    count = b.value(arith.ExtSIOp(b.value(llvm.CallOp("omp_get_num_threads",
                                                      return_type=i32)), i64))
    me = b.value(arith.ExtSIOp(thread, i64))
    for slot, elements in copies:
        b.op(llvm.CallOp(f"{name}{SUM_COPY}", contexts, own, me, count, b.i64(8 * slot),
                         b.i64(elements)))
    b.op(llvm.BrOp(finish))
    return [sum_copy_function(name),
            internal_function(f"{name}{SUM_COPIES}", [PTR, i32], [block, add, finish])]


def sum_copy_function(name: str) -> llvm.FuncOp:
    """`@name__sum_copy(contexts, own, me, count, slot, elements)`: thread
    `me` of `count` adds elements [me * elements / count, (me + 1) *
    elements / count) of the other threads' copies of the buffer at byte
    `slot` of their copy tables into `own`'s (thread 0's table), zeroing
    the copies."""
    block = Block(arg_types=[PTR, PTR, i64, i64, i64, i64])
    contexts, own, me, count, slot, elements = block.args
    b = Emitter(InsertPoint.at_end(block), InsertPoint.at_start(block))
    blocks: list[Block] = []
    lo = b.value(arith.DivSIOp(b.mul(me, elements), count))
    hi = b.value(arith.DivSIOp(b.mul(b.add(me, 1), elements), count))
    target = b.load(byte_offset(b, own, slot), 0, PTR)

    def each_thread(w: Emitter, other: SSAValue) -> Emitter:
        ctx = byte_offset(w, contexts, w.mul(other, CONTEXT_BYTES))
        table = w.load(field(w, ctx, ACC_COPIES), 0, PTR)
        copy = w.load(byte_offset(w, table, slot), 0, PTR)

        def each_element(e: Emitter, i: SSAValue) -> Emitter:
            total = e.value(llvm.FAddOp(e.load(target, i), e.load(copy, i)))
            e.store(total, target, i)
            e.store(e.const(0.0, f32), copy, i)
            return e

        return counted_loop(w, lo, hi, blocks, each_element)

    counted_loop(b, b.i64(1), count, blocks, each_thread).op(llvm.ReturnOp())
    return internal_function(f"{name}{SUM_COPY}", [PTR, PTR, i64, i64, i64, i64],
                             [block, *blocks])
