"""convert-recir-to-llvm: func, invoke, cf, arith and math to xDSL's `llvm` dialect.

Runs after convert-tmath-to-loops, convert-scf-to-cf and, in code with
concurrent invokes, convert-invoke-to-gomp. Every function gets a leading
`!llvm.ptr` context (`native_context.py`; `invoke.context` becomes it), which
is how native code reports an error instead of crashing:

- a failed `cf.assert` (bounds and divisor checks) sets `error = 2` and `site`,
  the index of its message in the module's `recir.error_sites` attribute;
- the prologue (`prologue.py`) compares the frame address, less the bytes
  of the buffers the frame keeps, with `stack_limit`: a recursion deeper
  than the stack allows sets `error = 1`. The runtime stops a running call
  (Ctrl-C, timeout) by setting its `error` and raising its `stack_limit`.

`adjoint.thread_copy` becomes a load from the context's table of this
thread's gradient buffers (`acc_copies`); `adjoint.log_reserve` a call of
`recir_log_reserve` (`outer_log.py`), null an error return, and the module
lists the logged arguments in `recir.outer_logs`. `invoke.spawn_budget`
reads the context's `spawn_budget`, its default where that is 0. Without
convert-invoke-to-gomp (one thread), a `concurrent` invoke is a call in place
and its `invoke.join` passes the results on.

Only the first error is recorded, and recording one raises `stack_limit` to
the top of the address space, so every later prologue fails at once: each
frame finishes its straight-line code and the stack unwinds. One compare per
call and no check after calls (they stay in tail position, which LLVM's
accumulator tail-recursion elimination needs; only max_depth's restore and
heap buffers' frees come after them). The error return of a function that
spawns tasks (`invoke.spawns`) waits for them first: they write into its frame.

A function with one result returns it; with several it writes them through
trailing pointer arguments. Private functions get internal linkage.

Each public function `@f` gets the entry points Python calls, both taking
their arguments packed in 8-byte fields (`entry_points.py`): `@f__packed`, one call
on the calling thread, and in code with tasks `@f__team`, one call or a
batch of calls on a team.

Options: `max_depth` (default 0: none): prologues count the calls a thread is
nested in and fail beyond it (`error = 5`, a site of its own naming the
function: `prologue.prologue_sites`); `entries` (default true): false
gives no entry points (code called by address, as the frontier's row kernels);
`arith-cf` (default true): false leaves the arith ops and cf branches, which
the translation to LLVM IR takes as they are (`llvm_convert.ARITH`: the
frontier's lowering).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, cf, func, llvm, math
from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from recir.dialects import adjoint, invoke, tape
from recir.passes import math_expansions
from recir.passes.arith_to_llvm import GUARDED, guard
from recir.passes.convert_invoke_to_gomp import SPAWNS, TASK
from recir.passes.entry_points import (
    packed_entry,
    signature,
    team_declarations,
    team_entry,
    thread_context,
)
from recir.passes.frame_buffers import allocated, declare_heap
from recir.passes.llvm_functions import convert_arith_cf
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import (
    ACC_COPIES,
    ERROR_CHECK,
    INDEX_OUT_OF_RANGE,
    SPAWN_BUDGET,
    field,
    record_error,
)
from recir.passes.outer_log import RESERVE, log_functions
from recir.passes.pass_options import U64_MAX, at_least
from recir.passes.prologue import emit_prologue, prologue_sites
from recir.passes.tape_arena import ALLOC, arena_functions
from recir.passes.thread_copies import sum_copies_function

CONVERTED = (cf.AssertOp, invoke.InvokeOp, func.ReturnOp, tape.NewOp, adjoint.ThreadCopyOp,
             adjoint.LogReserveOp, invoke.SpawnBudgetOp, invoke.ContextOp,
             invoke.JoinOp)  # `convert`'s


def constant(value: int, typ: IntegerType = i64) -> llvm.ConstantOp:
    return llvm.ConstantOp(IntegerAttr(value, typ), typ)


def zero_of(typ: Attribute) -> Operation:
    if isinstance(typ, IntegerType):
        return constant(0, typ)
    if isinstance(typ, AnyFloat):
        return llvm.ConstantOp(FloatAttr(0.0, typ), typ)
    return llvm.ZeroOp.create(result_types=[typ])


def expand_math(op: Operation) -> None:
    b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
    if isinstance(op, math.ExpOp):
        result = math_expansions.exp(b, op.operand)
    elif isinstance(op, math.TanhOp):
        result = math_expansions.tanh(b, op.operand)
    else:
        result = b.value(llvm.FLogOp(op.operands[0]))
    op.results[0].replace_all_uses_with(result)
    Rewriter.erase_op(op)


def task_context(entry: Block) -> SSAValue:
    """The context of the thread running a task: its own in the team's
    array, whose address is the first field of the task's data."""
    b = Emitter(InsertPoint.at_start(entry), InsertPoint.at_start(entry))
    return thread_context(b, b.load(entry.args[0], 0, PTR))[1]


class FunctionConversion:
    """Converts one func.func; `sites` collects assert messages module-wide."""

    def __init__(self, function: func.FuncOp, sites: list[str], max_depth: int = 0,
                 arith_cf: bool = True):
        self.function, self.max_depth, self.arith_cf = function, max_depth, arith_cf
        self.uses_heap = False
        self.sites = sites
        signature = function.function_type
        self.results = list(signature.outputs)
        self.returns_one = len(self.results) == 1
        output = self.results[0] if self.returns_one else None
        out_params = [] if self.returns_one else [PTR] * len(self.results)
        # a task takes its data alone, as GOMP_task calls it (`convert-invoke-to-gomp`)
        self.task = TASK in function.attributes
        context = [] if self.task else [PTR]
        self.type = llvm.LLVMFunctionType([*context, *signature.inputs, *out_params], output)

    def run(self) -> llvm.FuncOp:
        body = self.function.detach_region(self.function.body)
        entry = body.blocks[0]
        self.ctx = task_context(entry) if self.task else entry.insert_arg(PTR, 0)
        self.out_params = [] if self.returns_one else [
            entry.insert_arg(PTR, len(entry.args)) for _ in self.results]
        self.fail = self.failure_block(body)
        self.check_block: Block | None = None  # `failed_check`'s
        for op in list(body.walk()):
            if isinstance(op, CONVERTED):  # one check for the many ops that are not
                self.convert(op)
        if SPAWNS in self.function.attributes:  # a failed check may come between spawn and join:
            # the tasks must not outlive the buffers and slots they write
            Rewriter.insert_op(llvm.CallOp("GOMP_taskwait"), InsertPoint.at_start(self.fail))
        if self.task:  # a trampoline: its callee has the prologue
            return self.converted(body)
        # the prologue's failures name this function and where it was written
        site = len(self.sites)
        self.sites += prologue_sites(self.function, self.max_depth)
        self.uses_heap = emit_prologue(entry, self.ctx, self.fail, self.set_error, site,
                                       self.max_depth)
        return self.converted(body)

    def converted(self, body: Region) -> llvm.FuncOp:
        if self.arith_cf:  # its arith ops and cf branches
            convert_arith_cf(body)
        private = self.function.sym_visibility == StringAttr("private")
        linkage = llvm.LinkageAttr("internal" if private else "external")
        return llvm.FuncOp(self.function.sym_name, self.type, linkage, body=body)

    def failure_block(self, body) -> Block:
        block = Block()
        if self.returns_one:
            zero = zero_of(self.results[0])
            block.add_ops([zero, llvm.ReturnOp(zero.results[0])])
        else:
            block.add_op(llvm.ReturnOp())
        body.add_block(block)
        return block

    def set_error(self, at: InsertPoint, code: int | SSAValue, site: int | SSAValue = 0,
                  *found: SSAValue) -> None:
        record_error(Emitter(at, at), self.ctx, code, site, *found)

    def branch_unless(self, op: Operation, ok: SSAValue, failure: Block,
                      *args: SSAValue) -> None:
        """Ends `op`'s block after `op`: continue if `ok`, else go to
        `failure` with `args`."""
        block = op.parent_block()
        assert block is not None and op.next_op is not None
        rest = block.split_before(op.next_op)
        block.add_op(llvm.CondBrOp(ok, rest, (), failure, args))

    def convert(self, op: Operation) -> None:
        if isinstance(op, cf.AssertOp):
            self.convert_assert(op)
        elif isinstance(op, invoke.InvokeOp):
            self.convert_invoke(op)
        elif isinstance(op, func.ReturnOp):
            self.convert_return(op)
        elif isinstance(op, tape.NewOp):  # a frame from the arena
            self.allocate(op, op.frame, ALLOC, op.bytes.value.data)
        elif isinstance(op, adjoint.ThreadCopyOp):
            self.convert_thread_copy(op)
        elif isinstance(op, adjoint.LogReserveOp):  # room in this thread's log
            self.allocate(op, op.result, RESERVE, op.slot.value.data, op.bytes.value.data)
        elif isinstance(op, invoke.SpawnBudgetOp):
            self.convert_spawn_budget(op)
        elif isinstance(op, invoke.ContextOp | invoke.JoinOp):
            self.pass_on(op)

    def pass_on(self, op: invoke.ContextOp | invoke.JoinOp) -> None:
        """`invoke.context` becomes the function's context; an `invoke.join`
        left without tasks passes its values on (its invoke ran in place)."""
        values = [self.ctx] if isinstance(op, invoke.ContextOp) else op.operands
        for result, value in zip(op.results, values, strict=True):
            result.replace_all_uses_with(value)
        Rewriter.erase_op(op)

    def convert_assert(self, op: cf.AssertOp) -> None:
        """A branch to the function's one failed-check block, passing the
        site and, for an index check (`index ult length`), both values
        (one block rather than one per check: a batched function holds
        hundreds of checks)."""
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        site, compare = b.const(len(self.sites), i32), op.arg.owner
        found = (compare.lhs, compare.rhs) if INDEX_OUT_OF_RANGE in op.msg.data and isinstance(
            compare, arith.CmpiOp) and compare.lhs.type == compare.rhs.type == i64 else (
            b.i64(0), b.i64(-1))  # (no length: nothing compared to report)
        self.sites.append(op.msg.data)
        self.branch_unless(op, op.arg, self.failed_check(), site, *found)
        Rewriter.erase_op(op)

    def failed_check(self) -> Block:
        """The block that records a failed check (its site and found values
        the block's arguments) and returns the error."""
        if self.check_block is None:
            self.check_block = Block(arg_types=[i32, i64, i64])
            self.set_error(InsertPoint.at_end(self.check_block), ERROR_CHECK,
                           *self.check_block.args)
            self.check_block.add_op(llvm.BrOp(self.fail))
            self.fail.parent.insert_block_before(self.check_block, self.fail)
        return self.check_block

    def convert_invoke(self, op: invoke.InvokeOp) -> None:
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        name = op.callee.root_reference.data
        types = [r.type for r in op.res]
        slots = [] if len(types) == 1 else [b.alloca(1, t) for t in types]
        call = llvm.CallOp(name, self.ctx, *op.args, *slots,
                           return_type=types[0] if len(types) == 1 else None)
        b.op(call)
        results = [call.returned] if len(types) == 1 else [
            b.load(slot, 0, t) for slot, t in zip(slots, types)]
        for old, new in zip(op.res, results):
            old.replace_all_uses_with(new)
        Rewriter.erase_op(op)

    def allocate(self, op: Operation, result: SSAValue, callee: str, *sizes: int) -> None:
        """`op`'s `result` as `callee(ctx, *sizes)`'s pointer; out of memory
        (a null one) is an error return."""
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        call = b.op(llvm.CallOp(callee, self.ctx, *map(b.i64, sizes), return_type=PTR))
        ok = allocated(b, call.results[0])
        result.replace_all_uses_with(call.results[0])
        self.branch_unless(ok.owner, ok, self.fail)
        Rewriter.erase_op(op)

    def convert_thread_copy(self, op: adjoint.ThreadCopyOp) -> None:
        """`copies[slot]` from the context's table, or the buffer itself where
        the context has no table."""
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        table = b.load(field(b, self.ctx, ACC_COPIES), 0, PTR)
        missing = b.value(arith.CmpiOp(b.value(llvm.PtrToIntOp(table, i64)), b.i64(0), "eq"))
        holder = b.alloca(1, PTR)
        b.store(op.buffer, holder, 0)
        entry = b.offset(table, 8 * op.slot.value.data, i8)
        where = b.value(arith.SelectOp(missing, holder, entry))
        op.result.replace_all_uses_with(b.load(where, 0, PTR))
        Rewriter.erase_op(op)

    def convert_spawn_budget(self, op: invoke.SpawnBudgetOp) -> None:
        """The context's budget, or the compiled default where it is 0."""
        b = Emitter(InsertPoint.before(op), InsertPoint.before(op))
        chosen = b.value(arith.TruncIOp(b.load(field(b, self.ctx, SPAWN_BUDGET), 0, i64), i32))
        unset = b.value(arith.CmpiOp(chosen, b.const(0, i32), "eq"))
        budget = b.value(arith.SelectOp(unset, b.const(op.default.value.data, i32), chosen))
        op.budget.replace_all_uses_with(budget)
        Rewriter.erase_op(op)

    def convert_return(self, op: func.ReturnOp) -> None:
        if self.returns_one:
            Rewriter.replace_op(op, llvm.ReturnOp(op.arguments[0]))
            return
        stores = [llvm.StoreOp(v, p) for v, p in zip(op.arguments, self.out_params)]
        Rewriter.replace_op(op, [*stores, llvm.ReturnOp()])



@dataclass(frozen=True)
class ConvertRecirToLlvmPass(ModulePass):
    name = "convert-recir-to-llvm"
    max_depth: int = 0  # > 0: prologues count the depth and fail beyond it
    entries: bool = True  # each public function's `@f__packed` (and `@f__team`)
    arith_cf: bool = True  # false: arith and cf ops left for the translation to LLVM IR

    def __post_init__(self) -> None:
        at_least(self, max_depth=(0, U64_MAX))  # an unsigned i64 compare

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        needs_arena, needs_tasks, elements, logged_slots = survey(op)
        copied, logged = sorted(elements), sorted(logged_slots)
        sites: list[str] = []
        uses_heap = False
        for function in list(op.ops):
            if isinstance(function, func.FuncOp) and function.body.blocks:
                conversion = FunctionConversion(function, sites, self.max_depth,
                                                self.arith_cf)
                Rewriter.replace_op(function, conversion.run())
                uses_heap |= conversion.uses_heap
            elif isinstance(function, llvm.FuncOp) and self.arith_cf:
                convert_arith_cf(function)  # an earlier pass's (`row_products.rows_functions`)
        op.body.blocks[0].add_ops(self.entries_of(op, needs_tasks, elements))
        if needs_arena:
            op.body.blocks[0].add_ops(arena_functions())
        if logged:
            op.body.blocks[0].add_ops(log_functions())
            op.attributes["recir.outer_logs"] = ArrayAttr([IntegerAttr(k, 64) for k in logged])
        if uses_heap:
            declare_heap(op)
        op.attributes["recir.error_sites"] = ArrayAttr([StringAttr(s) for s in sites])
        if copied:
            op.attributes["recir.thread_copies"] = ArrayAttr([IntegerAttr(k, 64) for k in copied])

    def entries_of(self, op: ModuleOp, needs_tasks: bool, elements: dict[int, int]
                   ) -> list[Operation]:
        """Each public function's packed entry and, with tasks, its team
        entry and the functions that add up its thread copies."""
        public = [f for f in op.ops if isinstance(f, llvm.FuncOp)
                  and f.linkage.linkage.data == "external" and f.body.blocks]
        entries: list[Operation] = [packed_entry(f) for f in public] if self.entries else []
        if needs_tasks:
            copied = sorted(elements)
            copies = {f.sym_name.data: [(k, elements[k]) for k in copied
                                        if k < len(signature(f)[0])] for f in public}
            teams = [g for f in public for g in team_entry(f, copies[f.sym_name.data])]
            sums = [g for f in public if copies[f.sym_name.data]
                    for g in sum_copies_function(f.sym_name.data, copies[f.sym_name.data])]
            entries += [*team_declarations(), *sums, *teams]
        return entries


def survey(op: ModuleOp) -> tuple[bool, bool, dict[int, int], set[int]]:
    """One walk of the module (it is large; an earlier pass's llvm.func is
    lowered already, bar its arith and cf ops: `row_products.rows_functions`):
    divisions, shifts and float-to-integer conversions guarded (`guard`) and
    math expanded on the way, and whether it makes tapes, whether it spawns,
    each copied slot's f32 elements, the logged slots."""
    needs_arena = needs_tasks = False
    elements: dict[int, int] = {}
    logged_slots: set[int] = set()
    for inner in [o for f in op.ops if not isinstance(f, llvm.FuncOp) for o in f.walk()]:
        if isinstance(inner, GUARDED):
            guard(inner)
        elif isinstance(inner, (math.ExpOp, math.TanhOp, math.LogOp)):
            expand_math(inner)
        elif isinstance(inner, tape.NewOp):
            needs_arena = True
        elif isinstance(inner, adjoint.ThreadCopyOp):
            elements[inner.slot.value.data] = inner.elements.value.data
        elif isinstance(inner, adjoint.LogReserveOp):
            logged_slots.add(inner.slot.value.data)
        elif isinstance(inner, func.FuncOp) and SPAWNS in inner.attributes:
            needs_tasks = True
    return needs_arena, needs_tasks, elements, logged_slots
