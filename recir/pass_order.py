"""What each lowering pass needs done before it, checked before it runs.

`recir.pipeline` always runs the passes in order; `recir-opt -p` lets a user
run them in any order, and a pass given IR an earlier pass should have
rewritten fails deep inside (xDSL's llvm dialect rejecting a tensor type, a
symbol lookup finding nothing). Checking the one fact each pass relies on
turns that into an error at the first op that is not ready, naming the pass
to run first.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation

from recir.diagnostics import RecirError, format_error, location_prefix


def is_subgraph(op: Operation) -> bool:
    return op.name == "invoke.subgraph"


def has_tensor(op: Operation) -> bool:
    return op.name.startswith("tmath.") or any(
        isinstance(v.type, TensorType) for v in (*op.operands, *op.results))


# pass -> (an op the pass cannot handle, the pass that rewrites such ops)
PREREQUISITES: dict[str, list[tuple[Callable[[Operation], bool], str]]] = {
    "convert-scf-to-cf": [(is_subgraph, "capture-outer-refs")],
    "convert-tmath-to-loops": [(is_subgraph, "capture-outer-refs")],
    "tmath-fuse-elementwise": [],
    "convert-recir-to-llvm": [(is_subgraph, "capture-outer-refs"),
                              (has_tensor, "convert-tmath-to-loops")],
}


def located(op: Operation) -> Operation:
    """`op` or its nearest ancestor with a source location (ops made by
    earlier passes may have none)."""
    found: Operation | None = op
    while found is not None and not location_prefix(found):
        found = found.parent_op()
    return found if found is not None else op


def check_prerequisites(pass_name: str, module: ModuleOp) -> None:
    for unready, earlier in PREREQUISITES.get(pass_name, []):
        for op in module.walk():
            if unready(op):
                raise RecirError(format_error(
                    located(op), f"must be rewritten by {earlier} before {pass_name}"))
