"""convert-scf-to-cf: xDSL's lowerings of `scf.for`, `scf.if` and
`scf.index_switch`, each applied once to each such op.

xDSL's pass runs them through a greedy worklist that visits every op of the
module, and tries the patterns and a dead-code check on each, until nothing
changes; most of its time goes there, not into the rewrites. A lowering
only moves the op's regions into its parent and leaves nested scf ops in
place as they were, so one walk that lowers each scf op in turn gives the
same control flow (the LLVM IR of recir's models comes out byte-identical).
Unused ops stay, as the worklist would not have left them: LLVM drops them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, builtin, cf, scf
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.transforms.convert_scf_to_cf import ForLowering, IfLowering, SwitchLowering

from recir.diagnostics import format_error, location_prefix


def guard_step(op: scf.ForOp) -> None:
    """A step that is not positive is undefined in MLIR: native code looped
    (until the index wrapped) where the interpreter ran no iteration. Checked
    where the IR was written with the loop (an op with a source location; the
    loops of recir's kernels have none, and constant steps)."""
    step = op.step
    if not location_prefix(op) or (isinstance(step.owner, arith.ConstantOp) and isinstance(
            step.owner.value, IntegerAttr) and step.owner.value.value.data > 0):
        return
    zero = arith.ConstantOp(IntegerAttr(0, step.type))
    positive = arith.CmpiOp(step, zero, "sgt")
    check = cf.AssertOp(positive, format_error(op, "step must be positive"))
    Rewriter.insert_op([zero, positive, check], InsertPoint.before(op))


def lower_scf(root: Operation) -> None:
    """Each scf op nested in `root` as cf branches (in place)."""
    lowerings: dict[type, RewritePattern] = {
        scf.ForOp: ForLowering(), scf.IfOp: IfLowering(), scf.IndexSwitchOp: SwitchLowering()}
    for op in list(root.walk()):
        if isinstance(op, scf.ForOp):
            guard_step(op)
        pattern = lowerings.get(type(op))
        if pattern is not None:
            pattern.match_and_rewrite(op, PatternRewriter(op))


@dataclass(frozen=True)
class ConvertScfToCfPass(ModulePass):
    name = "convert-scf-to-cf"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        lower_scf(op)
