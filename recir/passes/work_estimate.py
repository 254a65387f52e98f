"""A static estimate of the work of a call: multiply-adds, roughly.

Matrix products count by matrix size, every other tensor op by result size,
one per scalar op; both branches of an `scf.if` count. The policy
(`backend/policy.py`) multiplies a module's estimate by the input's size to
tell a team call from one too small for a second thread; `invoke-clone-serial`
weighs a function's own estimate against the cost of its budget checks.
"""

from __future__ import annotations

import math
from typing import Any

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

from recir.dialects import tmath

MATRIX_OPS = ("tmath.matvec", "adjoint.vecmat", "adjoint.accumulate_outer")


def elements(value: Any) -> int:
    """A tensor's elements (a dynamic dimension counts as 1); 1 for a scalar."""
    if not isinstance(value.type, TensorType):
        return 1
    return math.prod(max(d, 1) for d in tmath.shape_of(value))


def work(root: Operation) -> int:
    """The estimated work of the ops nested in `root` (a function or a module)."""
    total = 0
    for op in root.walk():
        if op.name in MATRIX_OPS:
            total += max(elements(v) for v in op.operands)
        elif op.results:
            total += sum(elements(r) for r in op.results)
    return total
