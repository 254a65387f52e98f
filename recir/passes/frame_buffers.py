"""Which of a function's buffers stay on its stack frame, and heap buffers.

Buffers are static `llvm.alloca`s in the entry block (`loop_builder`). A
frame keeps at most FRAME_STACK_BYTES of them; the largest go to the heap
(`aligned_alloc` at entry, `free` before every return, error returns
included) until the rest fit. The bound: 1 GiB of deep stack
(`stack.DEEP_STACK_BYTES`) then holds 16,384 frames, more than the deepest
tree `validate_structure` lets through (10,000 levels), and a frame is 1/32
of the 2 MiB margin the stack check leaves below its limit. A heap buffer
costs an allocation and a free (~0.1 us; glibc maps those over 128 KiB, a
few us), small next to writing 64 KiB once (~3 us at ~20 GB/s). The stack
check compares the frame address minus `stack_bytes` (what stays on the
frame) with the limit.
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import IntegerAttr, IntegerType, ModuleOp, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.passes.convert_invoke_to_gomp import declare
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import DEEP_STACK_BYTES, MARGIN_BYTES

FRAME_STACK_BYTES = min(DEEP_STACK_BYTES // 16384, MARGIN_BYTES // 32)  # 64 KiB
ALLOC, FREE = "aligned_alloc", "free"  # (aligned as the alloca was: loops vectorize alike)


def element_bytes(typ: Attribute) -> int:
    if isinstance(typ, IntegerType):
        return max(1, typ.width.data // 8)
    return 8 if isinstance(typ, llvm.LLVMPointerType) else 4  # f32


def alignment(alloca: llvm.AllocaOp) -> int:
    return alloca.alignment.value.data if alloca.alignment is not None else 8


def buffer_bytes(alloca: llvm.AllocaOp) -> int:
    """The bytes an alloca of a constant count takes, rounded up to its
    alignment (as `aligned_alloc` needs)."""
    size = alloca.size.owner
    assert isinstance(size, arith.ConstantOp | llvm.ConstantOp), "a static buffer"
    assert isinstance(size.value, IntegerAttr)
    raw = size.value.value.data * element_bytes(alloca.elem_type)
    return -(-raw // alignment(alloca)) * alignment(alloca)


def heap_buffers(allocas: list[llvm.AllocaOp]) -> list[llvm.AllocaOp]:
    """The largest buffers, until the others take at most FRAME_STACK_BYTES."""
    total = stack_bytes(allocas)
    heap: list[llvm.AllocaOp] = []
    for alloca in sorted(allocas, key=buffer_bytes, reverse=True):
        if total <= FRAME_STACK_BYTES:
            break
        heap.append(alloca)
        total -= buffer_bytes(alloca)
    return heap


def stack_bytes(allocas: list[llvm.AllocaOp]) -> int:
    return sum(map(buffer_bytes, allocas))


def allocated(b: Emitter, pointer: SSAValue) -> SSAValue:
    """Whether `pointer` is not null (an allocation succeeded)."""
    return b.value(arith.CmpiOp(b.value(llvm.PtrToIntOp(pointer, i64)), b.i64(0), "ne"))


def move_to_heap(b: Emitter, buffers: list[llvm.AllocaOp], returns: list[Operation]
                 ) -> SSAValue | None:
    """Replaces each alloca with an allocation where `b` is (the entry) and
    frees them all before each of `returns`; returns whether all
    allocations succeeded (None where there are none)."""
    if not buffers:
        return None
    pointers, ok = [], None
    for alloca in buffers:
        call = b.op(llvm.CallOp(ALLOC, b.i64(alignment(alloca)), b.i64(buffer_bytes(alloca)),
                                return_type=PTR))
        pointer = call.results[0]
        alloca.res.replace_all_uses_with(pointer)
        size = alloca.size.owner
        Rewriter.erase_op(alloca)
        if isinstance(size, Operation) and not size.results[0].uses:
            Rewriter.erase_op(size)
        pointers.append(pointer)
        got = allocated(b, pointer)
        ok = got if ok is None else b.value(arith.AndIOp(ok, got))
    for ret in returns:
        Rewriter.insert_op([llvm.CallOp(FREE, p) for p in pointers], InsertPoint.before(ret))
    return ok


def declare_heap(module: ModuleOp) -> None:
    """aligned_alloc and free, unless the module declares them already."""
    names = {op.sym_name.data for op in module.ops if isinstance(op, llvm.FuncOp)}
    module.body.blocks[0].add_ops(declare(*entry) for entry in (
        (ALLOC, [i64, i64], PTR), (FREE, [PTR], None)) if entry[0] not in names)
