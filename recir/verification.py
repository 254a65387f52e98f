"""Verification of parsed or built IR, op by op, each failure one located
`RecirError` line (`verify_located`): what xDSL's own verifiers leave out
(attributes an op's definition declares, unique symbols, dominance within
and across regions, scf.if's yields, comparison predicates, float casts'
types) before each op's own verifier, so that no unverified op reaches a pass or an engine.
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import StringAttr, f32, f64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.irdl import IRDLOperation, OptAttributeDef, OptPropertyDef
from xdsl.irdl.constraints import VerificationContext
from xdsl.parser.core import ForwardDeclaredValue
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import VerifyException

from recir.diagnostics import RecirError, format_error, location_prefix


def verify_if_yields(op: scf.IfOp) -> None:
    """Each region of an `scf.if` with results yields values of those types
    (xDSL checks this for `scf.for` only; a missing `scf.yield` reaches
    LLVM as a malformed phi)."""
    types = list(op.output.types)
    if types and not op.false_region.blocks:
        raise VerifyException(f"has {len(types)} results but no else region")
    for side, region in (("then", op.true_region), ("else", op.false_region)):
        for block in region.blocks:
            last = block.last_op
            if not isinstance(last, scf.YieldOp):
                continue
            yielded = [v.type for v in last.arguments]
            if yielded != types:
                raise VerifyException(
                    f"{side} region yields ({', '.join(map(str, yielded))}) but the op "
                    f"has results ({', '.join(map(str, types))})")


def verify_func_body(op: func.FuncOp) -> None:
    """No block of a body is empty: xDSL accepts `{}`, which then ran as an
    external function (natively an AssertionError)."""
    if any(block.first_op is None for block in op.body.blocks):
        raise VerifyException(f"@{op.sym_name.data} has an empty block: a block ends "
                              "with a terminator such as 'func.return'")


def verify_unique_symbols(table: Operation) -> None:
    """A second definition of a symbol is an error at that definition (xDSL
    reports it at the enclosing module, without a position)."""
    first: dict[str, Operation] = {}
    for region in table.regions:
        for block in region.blocks:
            for op in block.ops:
                name = op.get_attr_or_prop("sym_name")
                if not isinstance(name, StringAttr):
                    continue
                if name.data in first:
                    where = location_prefix(first[name.data]).removesuffix(": ")
                    raise RecirError(format_error(
                        op, f"redefines symbol @{name.data}"
                        + (f" (first defined at {where})" if where else "")))
                first[name.data] = op


def verify_own_attributes(op: Operation) -> None:
    """The properties and attributes `op`'s definition declares, present and
    of their kinds. Checked for every op before any verifier runs: one op's
    verifier reads another's (an invoke its subgraph's `function_type`, a
    dataflow call its callee's `sym_name`), and generic syntax can leave
    them out or give them any value."""
    if not isinstance(op, IRDLOperation):
        return
    definition = op.get_irdl_definition()
    context = VerificationContext()
    for kind, declared, given, optional in (
            ("property", definition.properties, op.properties, OptPropertyDef),
            ("attribute", definition.attributes, op.attributes, OptAttributeDef)):
        for name, attr_def in declared.items():
            if name in given:
                try:
                    attr_def.constr.verify(given[name], context)
                except VerifyException as e:
                    raise VerifyException(f"{kind} '{name}': {e}") from None
            elif not isinstance(attr_def, optional):
                raise VerifyException(f"{kind} '{name}' expected")


# arith comparisons: the predicates each may name. xDSL checks neither the
# predicate (printing an unknown one fails; -1 silently printed as the last
# one) nor that the operands have one type.
COMPARISONS = {arith.CmpiOp: arith.CMPI_COMPARISON_OPERATIONS,
               arith.CmpfOp: arith.CMPF_COMPARISON_OPERATIONS}


def verify_comparison(op: arith.CmpiOp | arith.CmpfOp) -> None:
    predicate = op.predicate.value.data
    if not 0 <= predicate < len(COMPARISONS[type(op)]):
        raise VerifyException(f"unknown predicate {predicate} (known: 0 to "
                              f"{len(COMPARISONS[type(op)]) - 1})")
    if op.lhs.type != op.rhs.type:
        raise VerifyException(f"compares operands of different types: {op.lhs.type} "
                              f"and {op.rhs.type}")


# extf / truncf: the one conversion each between recir's float types (xDSL
# checks neither direction nor width: f32 to f32 "extended" verified)
FLOAT_CASTS = {arith.ExtFOp: (f32, f64), arith.TruncFOp: (f64, f32)}


def verify_float_cast(op: arith.ExtFOp | arith.TruncFOp) -> None:
    source, target = FLOAT_CASTS[type(op)]
    if (op.input.type, op.result.type) != (source, target):
        raise VerifyException(f"converts {source} to {target} only (recir's float types "
                              f"are f32 and f64), got {op.input.type} to {op.result.type}")


GRAPH_REGIONS = frozenset(("dataflow.graph",))  # their ops' operands may come later


def verify_defined_before_use(op: Operation) -> None:
    """In each block of `op`'s regions, a value is used after the op that
    defines it; inside a subgraph's body, before each invoke of it in that
    block (its body runs there). xDSL checks no dominance: such a use was a
    KeyError in both engines."""
    if op.name in GRAPH_REGIONS:
        return
    for block in (b for region in op.regions for b in region.blocks):
        at = {o: k for k, o in enumerate(block.ops)}
        for k, top in enumerate(block.ops):
            for inner in top.walk():
                for value in inner.operands:
                    j = at.get(value.owner, -1)  # (a block argument: -1)
                    if j >= k and not (j > k and invoked_after(top, block, at, j)):
                        raise RecirError(format_error(inner, f"uses %{value.name_hint or j} "
                                                      "before the op that defines it"))


def verify_visible(op: Operation) -> None:
    """Each operand of `op` is defined in a region that encloses it: not in
    a sibling branch, nor inside `op`'s own regions (xDSL checks neither;
    the engines failed with a KeyError, or silently ran where the branch
    holding the use was not taken)."""
    for value in op.operands:
        if not encloses(defining_region(value), op):
            raise RecirError(format_error(op, f"uses %{value.name_hint or '?'}, defined in "
                                          "a region that does not enclose this op"))


def defining_region(value: SSAValue) -> Region | None:
    """None for the parser's placeholder of a name defined only in a region
    nested deeper than its use (it has no owner)."""
    if isinstance(value, ForwardDeclaredValue):
        return None
    owner = value.owner
    return owner.parent if isinstance(owner, Block) else owner.parent_region()


def encloses(region: Region | None, op: Operation) -> bool:
    at = op.parent_region()
    while at is not None and at is not region:
        parent = at.parent_op()
        at = parent.parent_region() if parent is not None else None
    return region is not None and at is region


def invoked_after(sub: Operation, block: Any, at: dict[Operation, int], j: int) -> bool:
    """Whether `sub` is a subgraph whose every invoke in `block`, outside
    its own body, comes after position `j`."""
    if sub.name != "invoke.subgraph":
        return False
    name = sub.get_attr_or_prop("sym_name")
    for other in block.walk():
        callee = other.get_attr_or_prop("callee") if other.name == "invoke.invoke" else None
        if callee is not None and callee.root_reference == name:
            top = block.find_ancestor_op_in_block(other)
            if top is not sub and at[top] <= j:
                return False
    return True


def verify_located(module: Operation) -> None:
    """Verify op by op; the first failure becomes a located `RecirError`."""
    ops = list(module.walk())
    for op in ops:
        try:
            verify_own_attributes(op)
        except VerifyException as e:
            raise RecirError(format_error(op, str(e.args[0]))) from None
        verify_visible(op)  # (before any check that asks an operand for its owner)
    for op in ops:
        if op.has_trait(SymbolTable):
            verify_unique_symbols(op)
        verify_defined_before_use(op)
        try:
            op.verify(verify_nested_ops=False)
            if isinstance(op, scf.IfOp):
                verify_if_yields(op)
            elif type(op) in COMPARISONS:
                verify_comparison(op)
            elif type(op) in FLOAT_CASTS:
                verify_float_cast(op)
            elif isinstance(op, func.FuncOp):
                verify_func_body(op)
        except VerifyException as e:
            raise RecirError(format_error(op, str(e.args[0]))) from None
