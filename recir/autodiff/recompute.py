"""Which forward values the backward recomputes instead of reading from the tape.

The cost model, applied per function before its frames are laid out: a value
is recomputed in the backward when

- its op is cheap: elementwise (the `Elementwise` trait), a slice, a
  concatenation, a fill, or a row gather from a table: one pass over its
  result, O(n), where the products that read it (matvec, outer product) are
  O(n^2). Matrix products, reductions, calls and `scf.if` results are never
  recomputed; and
- each operand is at hand in the backward without saving anything new: an
  argument the backward is given (parameters, structure arrays), a constant,
  a value the backward reads anyway (so it is saved), or a value recomputed
  in turn.

A value so recomputed is either one the backward reads (its bytes leave the
frame, and the forward's copy into it goes too) or one it does not read; so
the frames never grow. TreeLSTM, for one: `h = o * tanh(c)` and `c` itself
come back from the gates and the children's cells, which the backward reads
anyway, and a leaf's embedding from the table and the word.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from recir.dialects import tmath

CHEAP = (tmath.SliceOp, tmath.ConcatOp, tmath.FillOp, tmath.GatherOp)


def is_cheap(op: Operation) -> bool:
    """One pass over a tensor result, no more (see the module docstring)."""
    if len(op.results) != 1 or not isinstance(op.results[0].type, TensorType):
        return False
    return isinstance(op, CHEAP) or op.has_trait(tmath.Elementwise)


def plan(function: func.FuncOp, read: Iterable[SSAValue],
         given: Iterable[SSAValue]) -> set[SSAValue]:
    """The values of `function` to recompute, given those the backward `read`
    and those it is `given`. In program order, so an op's operands are
    decided before it."""
    at_hand = {*read, *given}
    recompute: set[SSAValue] = set()
    for op in function.walk():
        if isinstance(op, arith.ConstantOp | tmath.ConstantOp):
            at_hand.update(op.results)
            continue
        if not is_cheap(op) or not all(v in at_hand for v in op.operands):
            continue
        recompute.add(op.results[0])
        at_hand.add(op.results[0])
    return recompute
