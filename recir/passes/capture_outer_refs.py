"""capture-outer-refs: closure conversion of `invoke.subgraph` into `func.func`.

A subgraph may use values of the regions around it (the paper's outer
references: a model's weights, an input tree). Native code and autodiff want
closed functions, so each subgraph becomes a private top-level `func.func`
whose trailing arguments are the outer values it uses, and every invoke of it
passes them along. Because a subgraph passes its callees' captures at its own
invoke sites, captures are computed as a fixpoint over the invoke graph:
mutually recursive subgraphs end up with the union of their needs.

Outer constants (`arith.constant`, `tmath.constant`) are cloned into the new
function rather than passed: an argument costs more than a constant.

No options.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.ir import Operation, OpResult, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from recir.dialects import invoke, tmath

CONSTANTS = (arith.ConstantOp, tmath.ConstantOp)


def defined_inside(value: SSAValue, op: Operation) -> bool:
    """Whether `value` is defined in `op`'s regions (block args included)."""
    return value.owner is not op and op.is_ancestor(value.owner)


def is_constant(value: SSAValue) -> bool:
    return isinstance(value, OpResult) and isinstance(value.op, CONSTANTS)


def direct_captures(sub: invoke.SubgraphOp) -> list[SSAValue]:
    """Non-constant outer values used anywhere in `sub`, in walk order."""
    seen: dict[SSAValue, None] = {}
    for op in sub.body.walk():
        for value in op.operands:
            if not is_constant(value) and not defined_inside(value, sub):
                seen.setdefault(value, None)
    return list(seen)


def all_captures(subs: list[invoke.SubgraphOp]) -> dict[str, list[SSAValue]]:
    """Captures per subgraph name, closed over the invoke graph (a fixpoint)."""
    by_name = {s.sym_name.data: s for s in subs}
    captures = {name: direct_captures(s) for name, s in by_name.items()}
    callees = {name: [op.callee.root_reference.data for op in s.body.walk()
                      if isinstance(op, invoke.InvokeOp)
                      and op.callee.root_reference.data in by_name]
               for name, s in by_name.items()}
    changed = True
    while changed:
        changed = False
        for name, sub in by_name.items():
            for callee in callees[name]:
                for value in captures[callee]:
                    if value in captures[name] or defined_inside(value, sub):
                        continue
                    captures[name].append(value)
                    changed = True
    return captures


def clone_outer_constants(region: Region, owner: Operation) -> None:
    """Give `region` its own copy of each outer constant it uses."""
    block = region.blocks.first
    assert block is not None
    clones: dict[SSAValue, SSAValue] = {}
    for op in list(region.walk()):
        for i, value in enumerate(op.operands):
            if not is_constant(value) or defined_inside(value, owner):
                continue
            if value not in clones:
                assert isinstance(value, OpResult)
                clone = value.op.clone()
                block.insert_op_before(clone, block.first_op)
                clones[value] = clone.results[value.index]
            op.operands[i] = clones[value]


def to_function(sub: invoke.SubgraphOp, captured: list[SSAValue]) -> func.FuncOp:
    """Move `sub`'s body into a new function with `captured` as trailing args."""
    inputs = [*sub.function_type.inputs.data, *(v.type for v in captured)]
    outputs = sub.function_type.outputs.data
    region = sub.detach_region(sub.body)
    block = region.block
    for value in captured:
        arg = block.insert_arg(value.type, len(block.args))
        arg.name_hint = value.name_hint
        value.replace_uses_with_if(arg, lambda use: region.is_ancestor(use.operation))
    function = func.FuncOp(sub.sym_name.data, FunctionType.from_lists(inputs, outputs), region,
                           "private")
    function.location = sub.location  # errors about the function point at the subgraph
    return function


def replace_returns(fn: func.FuncOp) -> None:
    for op in list(fn.body.walk()):
        if isinstance(op, invoke.ReturnOp) and op.parent_op() is fn:
            Rewriter.replace_op(op, func.ReturnOp(*op.arguments))


@dataclass(frozen=True)
class CaptureOuterRefsPass(ModulePass):
    name = "capture-outer-refs"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        subs = [o for o in op.walk() if isinstance(o, invoke.SubgraphOp)]
        if not subs:
            return
        captures = all_captures(subs)
        for site in op.walk():
            if isinstance(site, invoke.InvokeOp):
                extra = captures.get(site.callee.root_reference.data, [])
                site.operands = [*site.operands, *extra]
        # Innermost first: an inner subgraph's uses leave its parent's body.
        for sub in reversed(subs):
            top = op.body.block.find_ancestor_op_in_block(sub)
            assert top is not None
            fn = to_function(sub, captures[sub.sym_name.data])
            replace_returns(fn)
            clone_outer_constants(fn.body, fn)
            Rewriter.erase_op(sub)
            op.body.block.insert_op_before(fn, top)
