"""The entry points Python calls: every public function's `@f__packed`, and
in code with tasks its `@f__team`, both taking their arguments packed in
8-byte fields. `@f__packed` is one call on the calling thread (and can start
on a switched stack: `makecontext` passes a few integers); `@f__team` is one
call or a batch of calls on a libgomp team, each thread setting up its own
context first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import i8, i32, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint

from recir.passes.convert_invoke_to_gomp import byte_offset, call_task, declare
from recir.passes.llvm_functions import lower_to_llvm, new_function
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import (
    CONTEXT_BYTES,
    ERROR_OFFSET,
    MARGIN_BYTES,
    SPAWN_BUDGET,
    STACK_OWNER,
    field,
)

# A public function's entry points besides itself: every call from Python
# goes through one of them, with its arguments packed in 8-byte fields.
PACKED_ENTRY = "__packed"  # one call on the calling thread
TEAM_ENTRY = "__team"  # one call or a batch of calls on a team


def thread_context(b: Emitter, contexts: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(the thread's number in its team, its context in the array `contexts`)."""
    thread = b.value(llvm.CallOp("omp_get_thread_num", return_type=i32))
    return thread, byte_offset(b, contexts, b.mul(b.value(arith.ExtSIOp(thread, i64)),
                                                  CONTEXT_BYTES))


def entry_function(name: str, region: Region, linkage: str = "external") -> llvm.FuncOp:
    """`@name(data)` with the body `region`, its arith ops lowered."""
    return lower_to_llvm(llvm.FuncOp(name, llvm.LLVMFunctionType([PTR], None),
                                     llvm.LinkageAttr(linkage), body=region))


TEAM_DECLARATIONS = (("GOMP_parallel", [PTR, PTR, i32, i32], None),
                     ("GOMP_single_start", [], i8), ("GOMP_barrier", [], None),
                     ("omp_get_num_threads", [], i32), ("pthread_self", [], i64),
                     ("pthread_getattr_np", [i64, PTR], i32),
                     ("pthread_attr_getstack", [PTR, PTR, PTR], i32),
                     ("pthread_attr_destroy", [PTR], i32))


def team_declarations() -> list[Operation]:
    return [declare(*entry) for entry in TEAM_DECLARATIONS]


Build = Callable[[Emitter, SSAValue], None]  # (the thread running the call(s), data)
Copies = Sequence[tuple[int, int]]  # (entry argument, f32 elements) of each copied buffer


def call_entry(name: str, function: llvm.FuncOp, task: bool = False) -> llvm.FuncOp:
    """`@name(data)`: one call of `function`, its context and arguments
    packed in 8-byte fields of `data` ({context, args..., result slot if it
    returns a scalar}). `@f__packed` (`packed_entry`) is one: every call
    from Python without a team comes there, in one calling convention, and
    a call with any number of arguments can start on a switched stack
    (`makecontext` passes a few integers). A `task` (`@f__item`, a call of a
    team's batch) has the team's context array in the first field instead,
    and takes the context of the thread that runs it."""
    block = Block(arg_types=[PTR])
    data = block.args[0]
    b = Emitter(InsertPoint.at_end(block), InsertPoint.at_start(block))
    ctx = b.load(data, 0, PTR)
    if task:
        ctx = thread_context(b, ctx)[1]
    inputs, output = signature(function)
    args = [b.load(byte_offset(b, data, 8 * k), 0, t) for k, t in enumerate(inputs, 1)]
    result = llvm.CallOp(function.sym_name.data, ctx, *args, return_type=output)
    b.op(result)
    if output is not None:
        slot = b.load(byte_offset(b, data, 8 * (len(inputs) + 1)), 0, PTR)
        b.store(result.results[0], slot, 0)
    b.op(llvm.ReturnOp())
    return entry_function(name, Region(block), "internal" if task else "external")


def packed_entry(function: llvm.FuncOp) -> llvm.FuncOp:
    """`@f__packed(data)`: one call of `@f` on the calling thread (`call_entry`)."""
    return call_entry(f"{function.sym_name.data}{PACKED_ENTRY}", function)


def team_entry(function: llvm.FuncOp, copies: Copies = ()
               ) -> tuple[llvm.FuncOp, llvm.FuncOp]:
    """`@f__team(data)`: `count` calls of `@f` on a libgomp team. `data` is
    {contexts, stack limit of thread 0, count, records...}; a record is
    {contexts, args..., result slot if `@f` returns a scalar}, as
    `@f__packed` takes them but for the contexts array. One thread runs a
    lone call itself, or spawns a task per call, so that the calls of a
    batch (the trees of a training step) share the team's threads with the
    tasks they spawn themselves; the others run the tasks. Calls spawn as
    deep as the contexts' `spawn_budget` says: not at all where it is
    negative (batches of like-sized calls balance the team by themselves).
    Returns the entry and the call's task function (`@f__item`)."""
    inputs, output = signature(function)
    name = function.sym_name.data
    item = call_entry(f"{name}__item", function, task=True)
    stride = 8 * (1 + len(inputs) + (1 if output else 0))

    def run_all(b: Emitter, data: SSAValue) -> None:
        def spawn(w: Emitter, index: SSAValue) -> None:
            record = byte_offset(w, data, w.add(24, w.mul(index, stride)))
            call_task(w, item.sym_name.data, record, stride)

        count = b.load(byte_offset(b, data, 16), 0, i64)
        b.when(b.value(arith.CmpiOp(count, b.i64(1), "eq")),
               lambda here: here.op(llvm.CallOp(item.sym_name.data, byte_offset(here, data, 24))),
               lambda w: w.each(count, spawn))

    return team_function(f"{name}{TEAM_ENTRY}", run_all, summer(function, copies)), item


SUM_COPIES = "__sum_copies"  # `thread_copies.sum_copies_function`


def signature(function: llvm.FuncOp) -> tuple[list[Attribute], Attribute | None]:
    """The inputs after the context, and the scalar result (None if void)."""
    typ = function.function_type
    output = typ.output if not isinstance(typ.output, llvm.LLVMVoidType) else None
    return list(typ.inputs.data)[1:], output


def summer(function: llvm.FuncOp, copies: Copies) -> str | None:
    """The name of `function`'s `thread_copies.sum_copies_function` if it has copies."""
    return f"{function.sym_name.data}{SUM_COPIES}" if copies else None


def team_function(name: str, build: Build, sums: str | None = None) -> llvm.FuncOp:
    """`@name(data)`, run by every thread of a libgomp team: sets this
    thread's context, and the thread that wins `single` runs `build`'s code.
    Thread 0 is the caller, whose stack limit Python knows (glibc's
    pthread_getattr_np reads /proc for the main thread: slow); the others
    ask pthread_getattr_np. No Python runs inside the team. With `sums`
    (the `thread_copies.sum_copies_function` of gradient buffers each
    thread adds into its own copy of), every thread then calls it to add
    them up."""
    function, b, (data,) = new_function(name, [PTR], private=False)
    contexts = b.load(data, 0, PTR)
    thread, ctx = thread_context(b, contexts)
    b.store(b.i64(0), field(b, ctx, ERROR_OFFSET), 0)  # error and site: contexts are reused
    # the call's spawn budget, which Python sets in thread 0's context only
    b.store(b.load(field(b, contexts, SPAWN_BUDGET), 0, i64), field(b, ctx, SPAWN_BUDGET), 0)

    def look_up(e: Emitter, me: SSAValue) -> None:
        attr = e.alloca(16, i64)  # pthread_attr_t: 56 bytes on glibc
        low, size = e.alloca(1, PTR), e.alloca(1, i64)
        e.op(llvm.CallOp("pthread_getattr_np", me, attr, return_type=i32))
        e.op(llvm.CallOp("pthread_attr_getstack", attr, low, size, return_type=i32))
        e.op(llvm.CallOp("pthread_attr_destroy", attr, return_type=i32))
        bottom = e.value(llvm.PtrToIntOp(e.load(low, 0, PTR), i64))
        e.store(e.add(bottom, MARGIN_BYTES), ctx, 0)
        e.store(me, field(e, ctx, STACK_OWNER), 0)

    def worker(e: Emitter) -> None:
        # a kept context remembers its thread's limit (pthread_getattr_np costs
        # a malloc and a system call on the worker's way to its first task)
        me = e.value(llvm.CallOp("pthread_self", return_type=i64))
        owner = e.value(arith.CmpiOp(e.load(field(e, ctx, STACK_OWNER), 0, i64), me, "eq"))
        intact = e.value(arith.CmpiOp(e.load(ctx, 0, i64), e.i64(-1), "ne"))  # no error raised it
        e.when(e.value(arith.AndIOp(owner, intact)), lambda kept: None,
               lambda lost: look_up(lost, me))

    b.when(b.value(arith.CmpiOp(thread, b.const(0, i32), "eq")),
           lambda first: first.store(first.load(byte_offset(first, data, 8), 0, i64), ctx, 0),
           worker)
    single = b.value(llvm.CallOp("GOMP_single_start", return_type=i8))
    b.when(b.value(arith.CmpiOp(single, b.const(0, i8), "ne")), lambda e: build(e, data))
    if sums is not None:
        b.op(llvm.CallOp(sums, contexts, thread))
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function)
