"""What each lowering pass needs done before it, checked before it runs.

`recir.pipeline` always runs the passes in order; `recir-opt -p` lets a user
run them in any order, and a pass given IR an earlier pass should have
rewritten (or a later one already has) fails deep inside: xDSL's llvm
dialect rejecting a tensor type, a symbol lookup finding nothing, a rewriter
deleting a value still in use. Checking the one fact each pass relies on
turns that into an error at the first op that is not ready, saying which
pass to run first.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import func
from xdsl.dialects.builtin import IndexType, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation
from xdsl.traits import SymbolTable

from recir.diagnostics import RecirError, format_error, location_prefix
from recir.dialects.row_types import is_row_function
from recir.dialects.tape import FrameType


def is_subgraph(op: Operation) -> bool:
    return op.name == "invoke.subgraph"


def unlowered(typ: Attribute) -> bool:
    return isinstance(typ, TensorType | FrameType)


def has_tensor(op: Operation) -> bool:
    """A tmath op, a save into a frame or a load from one, a tensor or frame
    value, or a function whose signature alone still holds one (a `_bwd` that
    reads nothing of its frame): convert-tmath-to-loops lowers them to buffers
    and pointers (`tape.new` is left for later)."""
    if isinstance(op, func.FuncOp):
        typ = op.function_type
        return any(map(unlowered, (*typ.inputs, *typ.outputs))) and not any(
            has_tensor(inner) for inner in op.walk() if inner is not op)
    return op.name.startswith("tmath.") or op.name in ("tape.save", "tape.load") or (
        op.name != "tape.new" and any(unlowered(v.type) for v in (*op.operands, *op.results)))


def makes_index(op: Operation) -> bool:
    """An op that makes an `index` value, or a function taking or returning
    one: the native backend lowers none (`check_native_signature`)."""
    types = (*op.function_type.inputs, *op.function_type.outputs) if isinstance(
        op, func.FuncOp) else (r.type for r in op.results)
    return any(isinstance(t, IndexType) for t in types)


def invokes_rows(op: Operation) -> bool:
    """An invoke of a function over rows, which is lowered to take its
    rows' count and bounds beside each table: only a schedule calls one."""
    if op.name != "invoke.invoke":
        return False
    module = op.get_toplevel_object()
    callee = SymbolTable.lookup_symbol(module, op.callee) if isinstance(
        module, ModuleOp) else None
    return isinstance(callee, func.FuncOp) and is_row_function(callee)


def is_branch(op: Operation) -> bool:
    return op.name in ("cf.br", "cf.cond_br")


def is_scf(op: Operation) -> bool:
    return op.name.startswith("scf.")


CLOSE_FIRST = (is_subgraph, "run capture-outer-refs before {pass_}")
BRANCHES_LATER = (is_branch, "run {pass_} before convert-scf-to-cf (it reads scf.if)")
ONE_BLOCK = (is_branch, "run {pass_} before convert-scf-to-cf (it wraps each body, one "
                        "block, in an scf.if)")

# pass -> (an op the pass cannot handle, what to do about it)
PREREQUISITES: dict[str, list[tuple[Callable[[Operation], bool], str]]] = {
    "convert-scf-to-cf": [CLOSE_FIRST],
    "invoke-to-frontier": [CLOSE_FIRST, BRANCHES_LATER],
    "lower-invoke-to-call-return": [CLOSE_FIRST, BRANCHES_LATER,
                                    (lambda op: op.name == "frontier.schedule",
                                     "run {pass_} or invoke-to-frontier, not both ({pass_} "
                                     "rewrites the functions a schedule calls)")],
    "convert-tmath-to-loops": [CLOSE_FIRST, BRANCHES_LATER,
                               (invokes_rows, "its callee computes rows, which a "
                                              "frontier.schedule calls, not an invoke")],
    "invoke-clone-serial": [ONE_BLOCK],
    "convert-invoke-to-gomp": [CLOSE_FIRST,
                               (has_tensor, "run convert-tmath-to-loops before {pass_}"),
                               (is_scf, "run convert-scf-to-cf before {pass_} (a spawn "
                                        "may branch)")],
    # (a spawn left to convert-recir-to-llvm runs in place: code for one thread)
    "convert-recir-to-llvm": [CLOSE_FIRST, (has_tensor, "run convert-tmath-to-loops "
                                            "before {pass_}"),
                              (makes_index, "the native backend lowers no index value: "
                                            "use i64 (the interpreter takes it)")],
}


def located(op: Operation) -> Operation:
    """`op` or its nearest ancestor with a source location (ops made by
    earlier passes may have none)."""
    found: Operation | None = op
    while found is not None and not location_prefix(found):
        found = found.parent_op()
    return found if found is not None else op


def check_prerequisites(pass_name: str, module: ModuleOp) -> None:
    for unready, advice in PREREQUISITES.get(pass_name, []):
        for op in module.walk():
            if not unready(op):
                continue
            at = located(op)
            what = "is" if at is op else f"holds '{op.name}', which is"
            raise RecirError(format_error(at, f"{what} not handled by {pass_name}: "
                                          + advice.format(pass_=pass_name)))
