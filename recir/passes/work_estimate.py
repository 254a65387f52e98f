"""A static estimate of the work of a call: multiply-adds, roughly.

Matrix products count by matrix size, every other tensor op by result size,
one per scalar op; both branches of an `scf.if` count. The policy
(`backend/policy.py`) multiplies a module's estimate by the input's size to
tell a team call from one too small for a second thread; `invoke-clone-serial`
weighs a function's own estimate against the cost of its budget checks.
`larger_share` tells the policy how unevenly a recursion splits its work.
"""

from __future__ import annotations

import math
from typing import Any

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IntegerAttr, TensorType
from xdsl.ir import Operation, SSAValue

from recir.dialects import invoke, tmath

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


def larger_share(module: Operation) -> float:
    """The share of a call's work its largest concurrent recursive call
    does: 1/2 (an even split) unless a function's self-invokes in one block
    each pass one of its integer arguments less a constant (fib: n-1 and
    n-2). Their call counts then grow as x^n, where x solves
    sum(x^-c) = 1 over the constants c, and the largest takes x^-min(c) of
    the work (fib: 1/golden ratio, 0.62). The most uneven function counts."""
    share = 0.5
    for function in module.walk():
        if isinstance(function, func.FuncOp | invoke.SubgraphOp) and function.body.blocks:
            for steps in decrements(function):
                share = max(share, largest_part(steps))
    return share


def decrements(function: func.FuncOp | invoke.SubgraphOp) -> list[list[int]]:
    """Per block with two or more self-invokes, the constants they subtract
    from one argument of `function` (closed or not), where every one of them does."""
    by_block: dict[object, list[invoke.InvokeOp]] = {}
    for op in function.walk():
        if isinstance(op, invoke.InvokeOp) and op.callee.string_value() == \
                function.sym_name.data:
            by_block.setdefault(op.parent_block(), []).append(op)
    found = []
    for calls in by_block.values():
        for k, argument in enumerate(function.body.blocks[0].args):
            steps = [step_below(call.args[k], argument) for call in calls
                     if len(call.args) > k]
            if len(calls) > 1 and len(steps) == len(calls) and None not in steps:
                found.append(steps)
    return found


def step_below(value: SSAValue, argument: SSAValue) -> int | None:
    """c where `value` is `argument - c` for a constant c > 0."""
    op = value.owner
    if not isinstance(op, arith.SubiOp) or op.lhs != argument:
        return None
    constant = op.rhs.owner
    if isinstance(constant, arith.ConstantOp) and isinstance(constant.value, IntegerAttr):
        step = constant.value.value.data
        return step if step > 0 else None
    return None


def largest_part(steps: list[int]) -> float:
    """x^-min(steps) for the x > 1 with sum(x^-c) = 1 (bisection)."""
    low, high = 1.0, float(len(steps))  # sum(x^-c) > 1 at low, <= 1 at high
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if sum(mid ** -c for c in steps) > 1 else (low, mid)
    return high ** -min(steps)
