"""invoke-mark-concurrent: mark invokes that may run at the same time as a later sibling.

The seed paper's parallelism: the children of a tree node (and the two calls
of fib) have no data dependence, so the first may run as a task while the
second runs inline. An invoke is marked `concurrent` when a later invoke of
the same block does not depend on its results, directly or through the ops
between them (ops with regions count as one op, by everything they use).
The marker is a promise to the backend, which may spawn the invoke as a task
and wait for it before the first use of its results; the code still means
the same when the marker is ignored. Invokes nested in `scf.if` branches are
marked within their own block.

No options.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from recir.dialects import invoke


def top_level(op: Operation, block: Block) -> Operation | None:
    """The op of `block` that is or contains `op`."""
    while op.parent_block() is not block:
        parent = op.parent_op()
        if parent is None:
            return None
        op = parent
    return op


def dependents(op: Operation, block: Block) -> set[Operation]:
    """Ops of `block` that use `op`'s results, transitively."""
    seen: set[Operation] = set()
    todo = [op]
    while todo:
        for result in todo.pop().results:
            for use in result.uses:
                user = top_level(use.operation, block)
                if user is not None and user not in seen:
                    seen.add(user)
                    todo.append(user)
    return seen


def mark_block(block: Block) -> None:
    calls = [op for op in block.ops if isinstance(op, invoke.InvokeOp)]
    for i, call in enumerate(calls):
        later = calls[i + 1:]
        if later and any(other not in dependents(call, block) for other in later):
            call.concurrent = UnitAttr()


@dataclass(frozen=True)
class InvokeMarkConcurrentPass(ModulePass):
    name = "invoke-mark-concurrent"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            for region in inner.regions:
                for block in region.blocks:
                    mark_block(block)
