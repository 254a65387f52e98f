"""What the frontier schedule's native loops are built from (`passes/schedule_loops.py`).

A spec gives each operand of a batched function its role in the loop (a
slice of a table per height, a whole table, rows a `_fwd` saved, a static
tensor or scalar), read off the schedule and the function's signature in
the interpreter's order (`Schedule.post`, `Backward.post_backward`), and
the costs a height loop's team is chosen by; `native_schedule.py` runs them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

from recir.backend.frontier_schedule import FORWARD
from recir.backend.policy import Costs, team_min_work
from recir.backend.frontier_summary import RowFacts, row_facts
from recir.diagnostics import RecirError
from recir.dialects import frontier, tape
from recir.dialects.row_types import is_rows
from recir.interpreter.frontier_grad import is_float_tensor
from recir.passes.expansion_loop import expansion_loop
from recir.passes.rows import element_bytes, row_width
from recir.passes.plan_functions import (
    CLEARED,
    COPIED,
    SAVED,
    SCALAR,
    SLICE,
    STATIC,
    TABLE,
    WHOLE,
    Operand,
)
from recir.passes.schedule_loops import height_loop

BACKWARD = "_bwd"


@dataclass(frozen=True)
class HeightSpec:
    """A function's height loop: its operands' roles, and its direction."""

    inputs: list[Operand]
    outputs: list[Operand]
    reverse: bool
    threads: int = 1  # > 1: the heights' rows split across a team of these
    row_work: int = 0  # multiply-adds of a row's products (`team_size`)
    costs: Costs | None = None  # the machine's (`policy.costs`)

    def build(self, function: llvm.FuncOp, sites: list[str]) -> list[Operation]:
        return height_loop(function, self.inputs, self.outputs, self.reverse, sites,
                           team=self.threads > 1)

    @cached_property
    def copied_elements(self) -> int:
        """`copied_elements`, found once (a team's size is weighed every call)."""
        return sum(o.row_bytes // 4 for o in self.inputs if o.kind == COPIED)


@dataclass(frozen=True)
class ExpansionSpec:
    """`@expand`'s depth loop: its inputs (the first `moving` move down the
    tree), its invoke sites and its stored values."""

    inputs: list[Operand]
    moving: int
    sites: int
    stored: list[Operand]

    def build(self, function: llvm.FuncOp, sites: list[str]) -> list[Operation]:
        return expansion_loop(function, self.inputs, self.moving, self.sites, self.stored,
                              sites)


Spec = HeightSpec | ExpansionSpec


def expansion_spec(op: frontier.ScheduleOp, expand: func.FuncOp) -> ExpansionSpec:
    moving, sites = 1 + len(op.moving), op.sites.value.data
    types = expand.function_type
    stored = types.outputs.data[sites * (1 + moving):]
    return ExpansionSpec([operand(t) for t in types.inputs.data], moving, sites,
                         [operand(t) for t in stored])


def operand(typ: Any, kind: str = WHOLE) -> Operand:
    """A value of type `typ` in the loop: rows as `kind`, the rest as they are."""
    if isinstance(typ, TensorType) and is_rows(typ):
        return Operand(kind, row_width(typ) * element_bytes(typ.element_type))
    if isinstance(typ, TensorType | tape.FrameType):
        return Operand(STATIC)  # a frame: the `_bwd`'s, which reads none
    return Operand(SCALAR, scalar=typ)


def height_spec(op: frontier.ScheduleOp, post: func.FuncOp, function: func.FuncOp,
                threads: int = 1, costs: Costs | None = None,
                facts: RowFacts | None = None) -> HeightSpec:
    """The height loop of `function`: the schedule's `@post`, its `_fwd` or
    its `_bwd`, each height's rows split across a team of `threads`. A
    `_bwd`'s rows of a height add into the same parameter gradients: each
    thread into its own copy of a dense one (`COPIED`); a table that only
    takes rows (`adjoint.accumulate_row`: embeddings) is shared, its rows
    added under row locks, which `adjoint_row_kernels` takes only where the
    function's row loops are lowered for a team: so `_fwd` and `_bwd` split
    their heights only there. `facts`: `function`'s (`row_facts`), given
    where it is a declaration (a cache hit's)."""
    facts = facts or row_facts(function)
    types = post.function_type
    ntables = len(types.outputs.data)
    nstored = len(types.inputs.data) - op.sites.value.data - ntables - len(op.shared)
    nsliced = nstored + op.sites.value.data
    kinds = [SLICE if k < nsliced else WHOLE for k in range(len(types.inputs.data))]
    outputs = list(function.function_type.outputs.data)
    lowered_for_team = costs is not None and team_min_work(threads, costs, warm=True) >= 0
    if not function.sym_name.data.endswith(BACKWARD):
        outs = [operand(t, TABLE if k < ntables else SAVED) for k, t in enumerate(outputs)]
        team = threads if len(outputs) == ntables or lowered_for_team else 1
        return HeightSpec([operand(t, k) for t, k in zip(types.inputs.data, kinds)], outs,
                          False, team, facts.row_work, costs)
    team = threads if lowered_for_team else 1
    forward = forward_outputs(function)
    gradients = [k for k, t in enumerate(types.inputs.data)
                 if is_float_tensor(t) and not nstored <= k < nsliced]
    accumulated = [SLICE if k < nstored else WHOLE for k in gradients]
    floats = sum(1 for t in types.outputs.data if is_float_tensor(t))
    kinds = [*[SAVED] * (forward - ntables), STATIC, *[CLEARED] * floats, *kinds, *accumulated]
    inputs = function.function_type.inputs.data
    if len(kinds) != len(inputs) or outputs:
        raise RecirError(f"error: @{function.sym_name.data} does not take what a "
                         "schedule's backward passes it")
    roles = [operand(t, k) for t, k in zip(inputs, kinds)]
    first = len(inputs) - len(gradients)
    for j, k in enumerate(gradients):  # the shared values' gradients, on a team
        if team > 1 and k >= nsliced + ntables and roles[first + j].kind == STATIC and (
                first + j not in facts.row_only):
            roles[first + j] = Operand(COPIED, math.prod(inputs[first + j].get_shape()) * 4,
                                       outer_only=first + j in facts.outer_only)
    return HeightSpec(roles, [], True, team, facts.row_work, costs)


def copied_elements(spec: HeightSpec) -> int:
    """The elements of one thread's copies (`COPIED`), which a team adds up."""
    return spec.copied_elements


def forward_outputs(backward: func.FuncOp) -> int:
    """How many values the `_fwd` beside `backward` returns (its results,
    then its saved rows): the `_bwd` takes the saved rows and a frame first."""
    parent = backward.parent_op()
    name = backward.sym_name.data[:-len(BACKWARD)] + FORWARD
    for op in parent.walk() if parent is not None else ():
        if isinstance(op, func.FuncOp) and op.sym_name.data == name:
            return len(op.function_type.outputs.data)
    raise RecirError(f"error: no @{name} beside @{backward.sym_name.data}")
