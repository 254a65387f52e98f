"""What `synthesize-gradients` needs to know before it builds anything.

*Passthrough* arguments are the ones every call site feeds with the caller's
own passthrough argument, down from the entry: parameters and structure
arrays. Their gradients are accumulated in place (one buffer per parameter,
shared by all invocations) instead of being returned and summed up the call
tree, and the backward receives them as arguments instead of saving them.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, Float64Type, ModuleOp, TensorType
from xdsl.ir import Attribute, BlockArgument, SSAValue

from recir.diagnostics import emit_error
from recir.dialects import invoke
from recir.dialects.row_types import is_f32_tensor as is_float_tensor
from recir.pass_order import located


def is_float(typ: Attribute) -> bool:
    """f32 scalars and f32 tensors carry gradients."""
    if isinstance(typ, TensorType):
        return isinstance(typ.element_type, Float32Type)
    return isinstance(typ, Float32Type)


def depends(typ: Attribute) -> bool:
    """Of either float type: an f64 carries no gradient, but what is made
    from it depends on what it was made from (`varied`)."""
    element = typ.element_type if isinstance(typ, TensorType) else typ
    return isinstance(element, Float32Type | Float64Type)


def functions_of(module: ModuleOp) -> dict[str, func.FuncOp]:
    for op in module.walk():
        if isinstance(op, invoke.SubgraphOp):
            raise emit_error(op, "must be closed first: run capture-outer-refs "
                             "before synthesize-gradients")
    return {f.sym_name.data: f for f in module.ops if isinstance(f, func.FuncOp)}


def invokes(function: func.FuncOp) -> list[invoke.InvokeOp]:
    return [op for op in function.walk() if isinstance(op, invoke.InvokeOp)]


def reachable(functions: dict[str, func.FuncOp], entry: str) -> list[str]:
    """Functions called from `entry`, transitively, in discovery order."""
    order, todo = [entry], [entry]
    while todo:
        function = functions[todo.pop()]
        structured(function)
        for op in invokes(function):
            name = op.callee.string_value()
            if name not in functions:
                raise emit_error(op, f"calls @{name}, which is not a function of the module")
            if functions[name].is_declaration:
                raise emit_error(op, f"calls @{name}, a declaration: it has no body to "
                                 "differentiate")
            if name not in order:
                order.append(name)
                todo.append(name)
    return order


def structured(function: func.FuncOp) -> None:
    """The rules differentiate scf.if's regions; a branch between blocks (IR
    after convert-scf-to-cf) has none to read."""
    for op in function.walk():
        if op.successors:
            at = located(op)  # convert-scf-to-cf's branches have no location
            what = "branches" if at is op else f"holds '{op.name}', which branches"
            raise emit_error(at, f"{what} between blocks: synthesize-gradients "
                             "differentiates structured control flow (scf.if); run it "
                             "before convert-scf-to-cf")


def passthrough(functions: dict[str, func.FuncOp], names: list[str]) -> dict[str, set[int]]:
    """Argument positions passed through unchanged from the entry (`names[0]`)."""
    entry = names[0]
    keep = {n: {i for i, a in enumerate(functions[n].args) if not isinstance(
        a.type, Float32Type)} for n in names}
    keep[entry] = set(range(len(functions[entry].args)))
    changed = True
    while changed:
        changed = False
        for caller in names:
            for op in invokes(functions[caller]):
                callee = op.callee.string_value()
                if callee == entry:
                    raise emit_error(op, f"calls the entry @{entry}: differentiate a "
                                     "function that wraps the recursion instead")
                for p in sorted(keep[callee]):
                    if not is_own_arg(op.args[p], functions[caller], keep[caller]):
                        keep[callee].discard(p)
                        changed = True
    return keep


def is_own_arg(value: SSAValue, function: func.FuncOp, positions: set[int]) -> bool:
    return (isinstance(value, BlockArgument) and value.owner is function.body.blocks[0]
            and value.index in positions)


def varied(function: func.FuncOp, passthrough_args: set[int]) -> set[SSAValue]:
    """Float values that depend on a differentiable argument or a call,
    through f64 ones too: an `arith.truncf` of an `arith.extf` of one then
    gets a cotangent, and its missing rule is an error, not a gradient
    silently dropped."""
    out = {a for i, a in enumerate(function.args) if is_float(a.type) and (
        i not in passthrough_args or is_float_tensor(a.type))}
    for op in function.walk():
        from_call = isinstance(op, invoke.InvokeOp) or op.regions
        if from_call or any(v in out for v in op.operands):
            out.update(r for r in op.results if depends(r.type))
    return out
