"""Split a closed recursive function at its invokes: the frontier plan.

The analysis behind the `invoke-to-frontier` pass.

The input is a module after `capture-outer-refs`: an entry function that
invokes one self-recursive function `@f`. Every op of `@f` is put in one of
two segments:

- *expand*: what the invoke arguments and the predicates of the `scf.if`s
  holding invokes depend on (reading children, the branch test, TD-TreeLSTM's
  LSTM step). It runs top down, one frontier per depth, while the call tree
  is expanded; its values that later ops read are stored per invocation.
- *post*: everything else, including whole branches without invokes (a
  leaf's cell). It runs bottom up, one frontier per height, once the
  invocations' children are done.

Each value also gets a *kind*: `U` (uniform: parameters, constants, ops on
them; one array for the whole frontier), `B` (batched: a leading frontier
dimension) or `R` (per root: an input of the entry that `@f` passes along
unchanged, e.g. a tree's structure arrays; read by root index). An argument
that depends on an invoke's result (Ackermann's nested call) cannot be
expanded ahead of time: that is an error naming the op.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from recir.diagnostics import RecirError, emit_error
from recir.dialects import invoke, tmath

CONSTANTS = (arith.ConstantOp, tmath.ConstantOp)


@dataclass
class Plan:
    """What `invoke-to-frontier` needs of a closed recursive function."""

    entry: func.FuncOp
    rec: func.FuncOp
    passthrough: list[bool]  # per argument of @f: every recursive call passes it along
    kinds: dict[SSAValue, str]  # U / B / R for values of the entry and of @f
    expand: set[Operation]  # ops of @f run while expanding
    structural: set[scf.IfOp]  # ifs of @f that hold invokes
    sites: dict[invoke.InvokeOp, int]  # the recursive invokes, numbered
    stored: list[SSAValue]  # B values of the expansion (and args) read after it
    paths: dict[SSAValue, tuple[tuple[scf.IfOp, int], ...]]  # where a stored value lives

    def runs(self, op: Operation, phase: str) -> bool:
        if phase == "expand":
            return op in self.expand or op in self.structural or op in self.sites
        return op not in self.expand


def functions(module: ModuleOp) -> dict[str, func.FuncOp]:
    return {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}


def callees(fn: func.FuncOp) -> list[invoke.InvokeOp]:
    return [op for op in fn.walk() if isinstance(op, invoke.InvokeOp)]


def find_recursive(module: ModuleOp, entry_name: str) -> tuple[func.FuncOp, func.FuncOp]:
    funcs = functions(module)
    if entry_name not in funcs:
        raise RecirError(f"error: no function @{entry_name} in the module")
    entry = funcs[entry_name]
    calls = callees(entry)
    names = {c.callee.string_value() for c in calls}
    if len(names) != 1:
        found = ", ".join(f"@{n}" for n in sorted(names)) or "none"
        raise emit_error(calls[0] if calls else entry,
                         "frontier batching needs an entry that invokes one subgraph, the "
                         f"recursion; it invokes {found} (a helper subgraph: call it as a "
                         "plain Python function instead)")
    rec = funcs[names.pop()]
    if not callees(rec):
        raise emit_error(calls[0], f"@{rec.sym_name.data} never invokes itself: frontier "
                         "batching batches a recursion, and this call has none")
    for call in callees(rec):
        if call.callee.string_value() != rec.sym_name.data:
            raise emit_error(call, "frontier batching supports self-recursion only: "
                             f"@{rec.sym_name.data} invokes @{call.callee.string_value()} "
                             "(a helper subgraph: call it as a plain Python function instead)")
    for op in rec.walk():
        if isinstance(op, tmath.FusedOp):
            raise emit_error(op, "frontier batching runs before fusion: got a fused op")
    return entry, rec


def passthrough_args(rec: func.FuncOp) -> list[bool]:
    args = rec.body.block.args
    flags = [True] * len(args)
    for call in callees(rec):
        for j, operand in enumerate(call.args):
            flags[j] = flags[j] and operand is args[j]
    return flags


def propagate(block: Block, kinds: dict[SSAValue, str]) -> None:
    """Kinds of the values defined in `block` (nested regions included)."""
    for op in block.ops:
        for region in op.regions:
            for inner in region.blocks:
                propagate(inner, kinds)
        uniform = all(kinds.get(v) == "U" for v in op.operands)
        if isinstance(op, invoke.InvokeOp):
            uniform = False
        if isinstance(op, scf.IfOp):
            yields = [y for r in op.regions for y in r.block.last_op.operands]  # type: ignore[union-attr]
            uniform = uniform and all(kinds.get(v) == "U" for v in yields)
        for r in op.results:
            kinds[r] = "U" if uniform else "B"


def holds_invoke(op: Operation) -> bool:
    return any(isinstance(inner, invoke.InvokeOp) for inner in op.walk())


def expansion_ops(rec: func.FuncOp, structural: set[scf.IfOp]) -> set[Operation]:
    """The backward slice of invoke arguments and structural predicates."""
    expand: set[Operation] = set()
    work: list[SSAValue] = []
    for op in rec.walk():
        if isinstance(op, invoke.InvokeOp):
            work.extend(op.operands)
        if op in structural:
            work.append(op.cond)  # type: ignore[attr-defined]
    while work:
        value = work.pop()
        owner = value.owner
        if isinstance(value, BlockArgument) or owner in expand:
            continue
        assert isinstance(owner, Operation)
        if isinstance(owner, invoke.InvokeOp) or owner in structural:
            raise emit_error(owner, "cannot be batched by frontiers: an invoke argument or "
                             "branch predicate depends on this op's recursive result")
        members = list(owner.walk()) if owner.regions else [owner]
        for member in members:
            expand.add(member)
            work.extend(member.operands)
    return expand


def make_plan(module: ModuleOp, entry_name: str, input_kinds: list[str]) -> Plan:
    """`input_kinds`: one of U/B/R per entry argument (inputs B or R, params U)."""
    entry, rec = find_recursive(module, entry_name)
    kinds: dict[SSAValue, str] = dict(zip(entry.body.block.args, input_kinds, strict=True))
    propagate(entry.body.block, kinds)
    passthrough = passthrough_args(rec)
    rec_args = rec.body.block.args
    for call in callees(entry):
        for j, operand in enumerate(call.args):
            kind = ("B" if not passthrough[j] else
                    "U" if kinds[operand] == "U" else "R")
            if kinds.get(rec_args[j], kind) != kind:
                raise emit_error(call, f"argument {j} has a different kind at another call")
            kinds[rec_args[j]] = kind
    propagate(rec.body.block, kinds)
    structural = {op for op in rec.walk() if isinstance(op, scf.IfOp) and holds_invoke(op)}
    expand = expansion_ops(rec, structural)
    sites = {op: k for k, op in enumerate(callees(rec))}
    plan = Plan(entry, rec, passthrough, kinds, expand, structural, sites, [], {})
    stored_values(plan)
    return plan


def stored_values(plan: Plan) -> None:
    """B values made while expanding that the post segment reads."""
    defined_early = {r for op in plan.expand for r in op.results} | set(
        plan.rec.body.block.args)
    stored: dict[SSAValue, None] = {}
    for op in plan.rec.walk():
        if op is plan.rec or op in plan.expand:
            continue
        reads = [op.cond] if op in plan.structural else (  # type: ignore[attr-defined]
            [] if op in plan.sites else list(op.operands))
        for v in reads:
            if v in defined_early and plan.kinds[v] == "B":
                stored[v] = None
    plan.stored = list(stored)
    for v in plan.stored:
        plan.paths[v] = path_of(v, plan.rec)


def path_of(value: SSAValue, rec: func.FuncOp) -> tuple[tuple[scf.IfOp, int], ...]:
    """The (if, region) nest from @f's body down to where `value` is defined."""
    block = value.block if isinstance(value, BlockArgument) else value.owner.parent_block()  # type: ignore[union-attr]
    path: list[tuple[scf.IfOp, int]] = []
    while block is not None and block is not rec.body.block:
        region = block.parent
        op = region.parent if region is not None else None
        if not isinstance(op, scf.IfOp):
            raise emit_error(op, "frontier batching supports scf.if regions only")
        path.append((op, list(op.regions).index(region)))
        block = op.parent_block()
    return tuple(reversed(path))


def entry_kinds(entry: func.FuncOp, num_inputs: int) -> list[str]:
    """Inputs: B for a static shape (stacked per tree), R for a dynamic one
    (structure arrays, ragged); parameters: U."""
    kinds = []
    for k, arg in enumerate(entry.body.block.args):
        typ = arg.type
        dynamic = isinstance(typ, TensorType) and any(d < 0 for d in typ.get_shape())
        kinds.append("U" if k >= num_inputs else "R" if dynamic else "B")
    return kinds
