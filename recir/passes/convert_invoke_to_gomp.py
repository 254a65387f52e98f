"""convert-invoke-to-gomp: `concurrent` invokes as OpenMP tasks (the GOMP ABI), `invoke.join` as a taskwait.

Runs after convert-scf-to-cf (a spawn may branch) and before
convert-recir-to-llvm. A spawn packs the team's context array, the
arguments and pointers to result slots into 8-byte fields of a buffer that
GOMP_task copies; the outlined task function unpacks them, picks its
thread's context (`omp_get_thread_num`) and calls the callee. Tensor results
need no slot: the caller allocated their buffers and the task writes
through the pointers it was given. The join waits (GOMP_taskwait) and loads
the scalar results from their slots. In a function with budget guards
(`invoke.budget_guards`, from invoke-clone-serial) a spawn happens only
while its budget is above 0, and the callee is called in place otherwise;
the join then waits only where it spawned. A function that spawns is marked
`invoke.spawns`: its error return waits for its tasks first (they write
into its frame), and the module's public functions get team entries
(`entry_points.py`).

No options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, cf, func, llvm
from xdsl.dialects.builtin import ModuleOp, UnitAttr, i8, i32, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from recir.dialects import invoke
from recir.passes.invoke_clone_serial import BUDGET_GUARDS, is_spawn
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import CONTEXTS, field

SPAWNS = "invoke.spawns"  # the attribute of a function that spawns tasks
TASK = "invoke.task"  # the attribute of an outlined task function


def declare(name: str, inputs: Sequence[Attribute], output: Attribute | None) -> Operation:
    return llvm.FuncOp(name, llvm.LLVMFunctionType(inputs, output),
                       llvm.LinkageAttr("external"))


def declarations() -> list[Operation]:
    return [declare("GOMP_task", [PTR, PTR, PTR, i64, i64, i8, i32, PTR, i32, PTR], None),
            declare("GOMP_taskwait", [], None),
            declare("omp_get_thread_num", [], i32)]


def byte_offset(b: Emitter, ptr: SSAValue, count: SSAValue | int) -> SSAValue:
    return b.value(llvm.GEPOp.from_mixed_indices(ptr, [b.i64(count)], i8))


def call_task(b: Emitter, function: str, data: SSAValue, data_bytes: SSAValue | int) -> None:
    """GOMP_task: `@function(copy)` as a deferred task, on its own copy of
    the `data_bytes` (8-byte aligned) at `data`."""
    address = b.value(llvm.AddressOfOp(function, PTR))
    null = b.value(llvm.ZeroOp.create(result_types=[PTR]))
    b.op(llvm.CallOp("GOMP_task", address, data, null, b.i64(data_bytes), b.i64(8),
                     b.const(1, i8), b.const(0, i32), null, b.const(0, i32), null))


def task_function(name: str, op: invoke.InvokeOp) -> func.FuncOp:
    """`@name(data)`, marked `invoke.task`: `op`'s call with its arguments
    loaded from 8-byte fields of `data` after the first (the team's context
    array), its scalar results stored through the pointers after them. The
    call's context is the thread that runs the task's: convert-recir-to-llvm
    finds it in that array."""
    block = Block(arg_types=[PTR])
    data = block.args[0]
    b = Emitter(InsertPoint.at_end(block), InsertPoint.at_end(block))
    args = [b.load(byte_offset(b, data, 8 * (k + 1)), 0, a.type) for k, a in enumerate(op.args)]
    slots = [b.load(byte_offset(b, data, 8 * (1 + len(args) + k)), 0, PTR)
             for k in range(len(op.res))]
    call = b.op(invoke.InvokeOp(op.callee, args, [r.type for r in op.res]))
    for result, slot in zip(call.results, slots):
        b.store(result, slot, 0)
    b.op(func.ReturnOp())
    task = func.FuncOp(name, ([PTR], []), Region(block), visibility="private")
    task.attributes[TASK] = UnitAttr()
    return task


class Spawner:
    """Lowers one function's spawns and joins; collects the task functions.
    With a `budget` (the function's, `invoke.budget_guards`), each spawn
    happens only where it is above 0, and the callee is called in place
    otherwise; its join then waits only where it spawned."""

    def __init__(self, ctx: SSAValue, prefix: str, tasks: list[func.FuncOp],
                 budget: SSAValue | None, allocas: InsertPoint):
        """`allocas`: where the buffers of the spawns go (the entry block:
        a fixed part of the frame)."""
        self.ctx, self.prefix, self.tasks, self.budget = ctx, prefix, tasks, budget
        self.allocas = allocas
        self.slots: dict[SSAValue, SSAValue] = {}
        self.spawns: dict[SSAValue, SSAValue] = {}  # placeholder -> whether it spawned

    def spawn(self, op: invoke.InvokeOp) -> None:
        b = Emitter(InsertPoint.before(op), self.allocas)
        args, types = list(op.args), [r.type for r in op.res]
        slots = [b.alloca(1, t) for t in types]
        spawns = None
        if self.budget is not None:
            spawns = b.value(arith.CmpiOp(self.budget, b.const(0, i32), "sgt"))
            b = self.in_place_unless(op, spawns, slots)
        count = 1 + len(args) + len(types)
        data = b.alloca(count, i64)
        b.store(b.load(field(b, self.ctx, CONTEXTS), 0, PTR), data, 0)
        for k, value in enumerate([*args, *slots], 1):  # after the contexts
            b.store(value, byte_offset(b, data, 8 * k), 0)
        name = f"{self.prefix}_task{len(self.tasks)}"
        self.tasks.append(task_function(name, op))
        call_task(b, name, data, 8 * count)
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        for result, slot in zip(op.res, slots):
            placeholder = b.value(llvm.ZeroOp.create(result_types=[result.type]))
            self.slots[placeholder] = slot
            if spawns is not None:
                self.spawns[placeholder] = spawns
            result.replace_all_uses_with(placeholder)
        Rewriter.erase_op(op)

    def in_place_unless(self, op: invoke.InvokeOp, spawns: SSAValue,
                        slots: list[SSAValue]) -> Emitter:
        """Ends `op`'s block with a branch on `spawns`: to a block that calls
        the callee in place (its results into `slots`), or to one for the
        spawn, returned; both go on to the rest of the block, from `op` on."""
        block = op.parent_block()
        assert block is not None
        rest = block.split_before(op)
        spawn, here = Block(), Block()
        region = rest.parent
        assert region is not None
        region.insert_block_before(spawn, rest)
        region.insert_block_before(here, rest)
        block.add_op(cf.ConditionalBranchOp(spawns, spawn, (), here, ()))
        h = Emitter(InsertPoint.at_end(here), InsertPoint.at_end(here))
        call = h.op(invoke.InvokeOp(op.callee, op.args, [r.type for r in op.res]))
        for result, slot in zip(call.results, slots):
            h.store(result, slot, 0)
        h.op(cf.BranchOp(rest))
        spawn.add_op(cf.BranchOp(rest))
        return Emitter(InsertPoint.before(spawn.last_op), self.allocas)

    def join(self, op: invoke.JoinOp) -> None:
        spawns = next((self.spawns[v] for v in op.spawned if v in self.spawns), None)
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        if self.budget is not None:
            b = self.wait_if(op, spawns)
        else:
            b.op(llvm.CallOp("GOMP_taskwait"))
        for old, spawned in zip(op.joined, op.spawned):
            old.replace_all_uses_with(b.load(self.slots[spawned], 0, old.type))
        placeholders = [v.owner for v in op.spawned]
        Rewriter.erase_op(op)
        for placeholder in placeholders:
            Rewriter.erase_op(placeholder)

    def wait_if(self, op: invoke.JoinOp, spawns: SSAValue | None) -> Emitter:
        """GOMP_taskwait where the spawn happened, in a block of its own."""
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        if spawns is None:  # a join of tensors only (written through pointers)
            assert self.budget is not None
            spawns = b.value(arith.CmpiOp(self.budget, b.const(0, i32), "sgt"))
        block = op.parent_block()
        assert block is not None and block.parent is not None
        rest = block.split_before(op)
        wait = Block()
        block.parent.insert_block_before(wait, rest)
        block.add_op(cf.ConditionalBranchOp(spawns, wait, (), rest, ()))
        wait.add_ops([llvm.CallOp("GOMP_taskwait"), cf.BranchOp(rest)])
        return Emitter(InsertPoint.before(op), InsertPoint.before(op))


@dataclass(frozen=True)
class ConvertInvokeToGompPass(ModulePass):
    name = "convert-invoke-to-gomp"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        tasks: list[func.FuncOp] = []
        for function in list(op.ops):
            if not isinstance(function, func.FuncOp) or not any(map(is_spawn, function.walk())):
                continue
            entry = function.body.blocks[0]
            context = invoke.ContextOp()
            entry.insert_op_before(context, entry.first_op)
            budget = entry.args[0] if BUDGET_GUARDS in function.attributes else None
            spawner = Spawner(context.ctx, function.sym_name.data, tasks, budget,
                              InsertPoint.at_start(entry))
            for inner in list(function.walk()):
                if is_spawn(inner):
                    spawner.spawn(inner)
                elif isinstance(inner, invoke.JoinOp):
                    spawner.join(inner)
            function.attributes[SPAWNS] = UnitAttr()
        if tasks:
            op.body.blocks[0].add_ops([*declarations(), *tasks])
