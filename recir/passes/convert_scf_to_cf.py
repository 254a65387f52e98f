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
from xdsl.dialects import builtin, scf
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.transforms.convert_scf_to_cf import ForLowering, IfLowering, SwitchLowering


def lower_scf(root: Operation) -> None:
    """Each scf op nested in `root` as cf branches (in place)."""
    lowerings: dict[type, RewritePattern] = {
        scf.ForOp: ForLowering(), scf.IfOp: IfLowering(), scf.IndexSwitchOp: SwitchLowering()}
    for op in list(root.walk()):
        pattern = lowerings.get(type(op))
        if pattern is not None:
            pattern.match_and_rewrite(op, PatternRewriter(op))


@dataclass(frozen=True)
class ConvertScfToCfPass(ModulePass):
    name = "convert-scf-to-cf"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        lower_scf(op)
