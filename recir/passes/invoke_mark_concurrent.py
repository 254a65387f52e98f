"""invoke-mark-concurrent: mark invokes that may run at the same time as a later sibling.

The seed paper's parallelism: the children of a tree node (and the two calls
of fib) have no data dependence, so the first may run as a task while the
second runs inline. Invokes are paired in program order: an invoke is marked
`concurrent` when the next invoke of its block and every op between them do
not depend on its results (ops with regions count as one op, by everything
they use), or those that do can move after the next invoke: pure ops, and
`tape.save`s into a frame the next invoke is not given (a gradient
function's forward saves a child's results right after calling it); they
move. The marker is a promise to the backend: it may spawn the marked
invoke as a task and wait for it right after the next invoke, which is not
marked; an `invoke.join` after that invoke waits for the task and passes its
results on to their later uses. The code means the same when the markers are
ignored. Invokes nested in `scf.if` branches are paired within their own
block. An invoke marked already keeps its pair and join (the pass may run
on IR it wrote). Calls that add into gradient buffers may be marked too: in code with
concurrent invokes, convert-tmath-to-loops gives each thread its own copies of
the dense buffers and adds embedding rows under a row lock.

No options.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from recir.dialects import invoke, tape


def dependents(op: Operation, block: Block) -> set[Operation]:
    """Ops of `block` that use `op`'s results, transitively."""
    seen: set[Operation] = set()
    todo = [op]
    while todo:
        for result in todo.pop().results:
            for use in result.uses:
                user = block.find_ancestor_op_in_block(use.operation)
                if user is not None and user not in seen:
                    seen.add(user)
                    todo.append(user)
    return seen


def movable(op: Operation, second: Operation) -> bool:
    """Whether `op` may move past `second` unseen: pure, or a `tape.save`
    into a frame that `second` is not given (a gradient function's forward
    saves each child's results in its node's frame right after the call)."""
    if isinstance(op, tape.SaveOp):
        return op.frame not in second.operands
    return not op.regions and is_side_effect_free(op)


def mark_block(block: Block) -> None:
    calls = [op for op in block.ops if isinstance(op, invoke.InvokeOp)]
    k = 0
    while k + 1 < len(calls):
        first, second = calls[k], calls[k + 1]
        if first.concurrent is not None:  # marked and joined already (hand-written IR)
            k += 2
            continue
        between = []
        op = first.next_op
        while op is not second:
            between.append(op)
            op = op.next_op
        later = dependents(first, block)
        moving = [op for op in between if op in later]
        if second not in later and all(movable(op, second) for op in moving):
            for op in reversed(moving):  # after `second`, in their order
                op.detach()
                Rewriter.insert_op(op, InsertPoint.after(second))
            spawn(first, second)
            k += 2
        else:
            k += 1


def spawn(first: invoke.InvokeOp, second: Operation) -> None:
    """Marks `first` and joins it right after `second`."""
    first.concurrent = UnitAttr()
    join = invoke.JoinOp(list(first.results))
    Rewriter.insert_op(join, InsertPoint.after(second))
    for old, new in zip(first.results, join.results):
        old.replace_uses_with_if(new, lambda use: use.operation is not join)


@dataclass(frozen=True)
class InvokeMarkConcurrentPass(ModulePass):
    name = "invoke-mark-concurrent"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        blocks = [b for inner in op.walk() for r in inner.regions for b in r.blocks]
        for block in blocks:
            mark_block(block)
