"""The reduction of a gradient's thread copies at the end of a team call.

At threads > 1 each thread of a team adds gradients into its own zeroed
copy of each weight-gradient buffer (`adjoint.thread_copy`); after the
call, the team adds the copies into the caller's buffers. Those loops are
internal functions that the team entry (`entry_points.team_function`) calls, so
that LLVM optimises them once per module. A frontier team's height loop
(`schedule_loops`) sums its copied inputs the same way, by one function.
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import f32, i32, i64
from xdsl.ir import SSAValue

from recir.passes.entry_points import SUM_COPIES, Copies, byte_offset
from recir.passes.frame_buffers import allocated
from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import ACC_COPIES, CONTEXT_BYTES, field

SUM_COPY = "__sum_copy"  # its loop over one copied buffer, shared by the buffers
SUM_ROW_COPIES = "recir_heights.sum_copies"  # a frontier team loop's, per copied input


def sum_copies_function(name: str, copies: Copies) -> list[llvm.FuncOp]:
    """`@name__sum_copies(contexts, thread)`: after a barrier (every task
    done), each thread adds its share of the elements of every other
    thread's copy of each buffer into the caller's (thread 0's table) and
    zeroes it for the next call: a gradient call's copies summed on the
    team, not after it in Python. The team, batch and serial batch wrappers
    call it, and it calls `@name__sum_copy` (`sum_copy_function`) for each
    buffer: one copy of the loops, not one per wrapper and buffer. Nothing
    to add where thread 0 has no table (a team of one). Returns both; each
    is internal and `noinline` (code that several callers share, so that
    LLVM optimises its loops once)."""
    function, b, (contexts, thread) = new_function(f"{name}{SUM_COPIES}", [PTR, i32],
                                                   inline=False)
    b.op(llvm.CallOp("GOMP_barrier"))
    own = b.load(field(b, contexts, ACC_COPIES), 0, PTR)

    def add(e: Emitter) -> None:
        count = e.value(arith.ExtSIOp(e.value(llvm.CallOp("omp_get_num_threads",
                                                          return_type=i32)), i64))
        me = e.value(arith.ExtSIOp(thread, i64))
        for slot, elements in copies:
            e.op(llvm.CallOp(f"{name}{SUM_COPY}", contexts, own, me, count, e.i64(8 * slot),
                             e.i64(elements)))

    b.when(allocated(b, own), add)
    b.op(llvm.ReturnOp())
    return [sum_copy_function(name), lower_to_llvm(function)]


def sum_copy_function(name: str) -> llvm.FuncOp:
    """`@name__sum_copy(contexts, own, me, count, slot, elements)`: thread
    `me` of `count` adds elements [me * elements / count, (me + 1) *
    elements / count) of the other threads' copies of the buffer at byte
    `slot` of their copy tables into `own`'s (thread 0's table), zeroing
    the copies."""
    function, b, args = new_function(f"{name}{SUM_COPY}", [PTR, PTR, i64, i64, i64, i64],
                                     inline=False)
    contexts, own, me, count, slot, elements = args
    lo = b.value(arith.DivSIOp(b.mul(me, elements), count))
    hi = b.value(arith.DivSIOp(b.mul(b.add(me, 1), elements), count))
    target = b.load(byte_offset(b, own, slot), 0, PTR)

    def each_thread(w: Emitter, other: SSAValue) -> None:
        ctx = byte_offset(w, contexts, w.mul(other, CONTEXT_BYTES))
        table = w.load(field(w, ctx, ACC_COPIES), 0, PTR)
        copy = w.load(byte_offset(w, table, slot), 0, PTR)

        def each_element(e: Emitter, i: SSAValue) -> None:
            total = e.value(llvm.FAddOp(e.load(target, i), e.load(copy, i)))
            e.store(total, target, i)
            e.store(e.const(0.0, f32), copy, i)

        w.each(hi, each_element, start=lo)

    b.each(count, each_thread, start=1)
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)


def sum_row_copies_function() -> llvm.FuncOp:
    """`SUM_ROW_COPIES(buffers, thread, threads, elements)`: thread `thread` of
    `threads` adds its block of the elements of the copies at `buffers`[1..]
    (threads 1 on) into `buffers`[0] (the caller's), zeroing them: after a
    frontier team's heights (`schedule_loops`), one function for every
    copied input of the module's loops, so that LLVM optimises the loops
    once (internal and `noinline`)."""
    function, b, (buffers, thread, threads, elements) = new_function(
        SUM_ROW_COPIES, [PTR, i64, i64, i64], inline=False)
    lo = b.value(arith.DivSIOp(b.mul(thread, elements), threads))
    hi = b.value(arith.DivSIOp(b.mul(b.add(thread, 1), elements), threads))
    target = b.offset(b.load(buffers, 0, PTR), lo)

    def each_copy(e: Emitter, t: SSAValue) -> None:
        copy = e.offset(e.load(buffers, e.add(t, 1), PTR), lo)

        def each(inner: Emitter, i: SSAValue) -> None:
            inner.store(inner.value(llvm.FAddOp(inner.load(target, i),
                                                inner.load(copy, i))), target, i)
            inner.store(inner.const(0.0, f32), copy, i)

        e.each(e.sub(hi, lo), each)

    b.each(b.sub(threads, 1), each_copy)
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function, arith_cf=False)  # `llvm_convert.ARITH`
