"""invoke-clone-serial: a spawn budget per spawning function, serial clones where they pay.

A task costs about 0.1-0.4 µs in libgomp; fib's body costs 2 ns, a TreeLSTM
node about 10 µs. So a function with `concurrent` invokes gets a leading
`budget` argument, and spawning stops `budget` levels down the call tree
(2^budget tasks for a binary recursion), below which calls cost what they
cost without threads. Callers pass `budget - 1` on; callers outside the
spawning functions pass `invoke.spawn_budget`: the budget the runtime chose
for the call (`backend/policy.py`; negative for a call that spawns nothing),
else the option `budget` (default 12; the pipeline passes
`policy.max_budget(threads)`, 4 on 2 threads).

How a function stops spawning depends on its own work (`work_estimate.py`):
- a cheap one (fib) gets a clone `@f_serial` without markers (calling serial
  clones), and `@f` runs its body while budget is left, else calls
  `@f_serial`: a check at each spawn would cost more than 1% of its call;
- a costly one (a tree node's matrix products) keeps one body, marked
  `invoke.budget_guards`: convert-recir-to-llvm spawns each of its
  `concurrent` invokes only while budget is left and calls it in place
  otherwise. A clone would double its compile time to save under 1%.
A public function that spawns keeps its signature: its body becomes a
private `@f_spawning` that `@f` calls.

Options: `budget`.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i32,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from recir.dialects import invoke
from recir.passes.pass_options import I32_MAX, at_least
from recir.passes.work_estimate import work

# the attribute of a function whose spawns check its budget (one body, no clone)
BUDGET_GUARDS = "invoke.budget_guards"
# A budget check is about one scalar op at a spawn and one at its join; a
# function whose own work is at least this many times its checks pays under
# 1% for them, and gets no serial clone.
CHECK_SHARE = 100


def is_spawn(op: Operation) -> bool:
    return isinstance(op, invoke.InvokeOp) and op.concurrent is not None


def calls_to(root: Operation | Block, names: Container[str]) -> list[invoke.InvokeOp]:
    """The invokes in `root` of the functions named in `names`."""
    return [op for op in root.walk()
            if isinstance(op, invoke.InvokeOp) and op.callee.string_value() in names]


def guarded(function: func.FuncOp) -> bool:
    """Whether `function`'s checks cost under 1% of its own work."""
    return work(function) >= CHECK_SHARE * 2 * sum(map(is_spawn, function.walk()))


def spawning(module: ModuleOp) -> dict[str, func.FuncOp]:
    return {f.sym_name.data: f for f in module.ops
            if isinstance(f, func.FuncOp) and any(map(is_spawn, f.walk()))}


def serial_clone(function: func.FuncOp, serial: dict[str, str], guards: set[str]
                 ) -> func.FuncOp:
    """`function`'s private serial version (`serial`: name to name) without
    markers or joins, calling the serial version of every function it calls
    that has one, and those with budget guards with no budget."""
    clone = function.clone()
    clone.sym_name = StringAttr(serial[function.sym_name.data])
    clone.sym_visibility = StringAttr("private")
    for op in list(clone.walk()):
        if isinstance(op, invoke.JoinOp):
            for old, new in zip(op.joined, op.spawned):
                old.replace_all_uses_with(new)
            Rewriter.erase_op(op)
        elif isinstance(op, invoke.InvokeOp):
            op.concurrent = None
            callee = op.callee.string_value()
            if callee in serial:
                op.callee = invoke.SymbolRefAttr(serial[callee])
            elif callee in guards:
                none = arith.ConstantOp(IntegerAttr(0, i32))
                Rewriter.insert_op(none, InsertPoint.before(op))
                op.operands = [none.result, *op.operands]
    return clone


def add_budget_argument(function: func.FuncOp, block: Block, names: Container[str]
                        ) -> SSAValue:
    """A new leading `budget` argument of `function`, returned; `budget - 1`,
    computed at `block`'s start, goes to the spawning functions (`names`)
    that `block` invokes."""
    typ = function.function_type
    function.function_type = FunctionType.from_lists([i32, *typ.inputs.data], typ.outputs.data)
    budget = function.body.blocks[0].insert_arg(i32, 0)
    one = arith.ConstantOp(IntegerAttr(1, i32))
    less = arith.SubiOp(budget, one)
    block.insert_ops_before([one, less], block.first_op)
    for op in calls_to(block, names):
        op.operands = [less.result, *op.operands]
    return budget


def add_budget(function: func.FuncOp, names: Container[str]) -> None:
    """`@f(budget, args)`: the body if budget > 0, else `@f_serial(args)`."""
    entry = function.body.blocks[0]
    args = list(entry.args)
    ret = entry.last_op
    assert isinstance(ret, func.ReturnOp)
    types = [v.type for v in ret.arguments]
    work, fallback = Block(), Block()
    for op in list(entry.ops):
        op.detach()
        work.add_op(op)
    Rewriter.replace_op(ret, scf.YieldOp(*ret.arguments))
    budget = add_budget_argument(function, work, names)
    serial = invoke.InvokeOp(f"{function.sym_name.data}_serial", args, types)
    fallback.add_ops([serial, scf.YieldOp(*serial.results)])
    zero = arith.ConstantOp(IntegerAttr(0, i32))
    left = arith.CmpiOp(budget, zero, "sgt")
    branch = scf.IfOp(left, types, Region(work), Region(fallback))
    entry.add_ops([zero, left, branch, func.ReturnOp(*branch.results)])


def outline_public(module: ModuleOp) -> None:
    """A public function that spawns keeps its signature, which its callers
    (the runtime among them) call without a budget: its body moves to a
    private `@f_spawning`, which every call of `@f` in the module now
    invokes, and `@f` calls it (and so starts with the budget)."""
    for f in list(spawning(module).values()):
        if f.sym_visibility == StringAttr("private"):
            continue
        name, inner = f.sym_name.data, f"{f.sym_name.data}_spawning"
        for call in calls_to(module, {name}):
            call.callee = invoke.SymbolRefAttr(inner)
        f.sym_name, f.sym_visibility = StringAttr(inner), StringAttr("private")
        typ = f.function_type
        block = Block(arg_types=typ.inputs.data)
        call = invoke.InvokeOp(inner, block.args, typ.outputs.data)
        block.add_ops([call, func.ReturnOp(*call.results)])
        module.body.blocks[0].insert_op_before(func.FuncOp(name, typ, Region(block)), f)


@dataclass(frozen=True)
class InvokeCloneSerialPass(ModulePass):
    name = "invoke-clone-serial"

    budget: int = 12

    def __post_init__(self) -> None:
        at_least(self, budget=(0, I32_MAX))  # an i32 argument

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        outline_public(op)
        names = spawning(op)
        outside = [f for f in op.ops if isinstance(f, func.FuncOp)
                   and f.sym_name.data not in names]
        guards = {name for name, f in names.items() if guarded(f)}
        serial = {name: f"{name}_serial" for name in names if name not in guards}
        clones = [serial_clone(names[name], serial, guards) for name in serial]
        for name, f in names.items():
            if name in guards:  # one body, passing `budget - 1` on to the functions it spawns
                add_budget_argument(f, f.body.blocks[0], names)
                f.attributes[BUDGET_GUARDS] = UnitAttr()
            else:
                add_budget(f, names)
        for call in (call for f in outside for call in calls_to(f, names)):
            start = invoke.SpawnBudgetOp(self.budget)
            Rewriter.insert_op(start, InsertPoint.before(call))
            call.operands = [start.budget, *call.operands]
        op.body.blocks[0].add_ops(clones)
