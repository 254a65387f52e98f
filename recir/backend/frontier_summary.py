"""A frontier function's batched IR, as much of it as its runtime reads.

The runtime (`frontier_compile.FrontierFunction`, the interpreter's
`Schedule` and `Backward` it runs) reads the batched entry (its schedule,
what feeds it and what it returns), the other functions' signatures and each
compiled function's `RowFacts` (what `NativeRowFunction` and `height_spec`
read of its body; its scratch a row is the object's metadata). A
summary keeps just that, in a cache entry of its own keyed by what the IR is
made from, so a warm compile rebuilds it (its types parsed at once) instead
of running `invoke-to-frontier` and `synthesize-gradients`. In the rebuilt
module every function but the batched entry is a declaration, and the
entry's ops before its schedule become one call of `@<entry>__before` (the
function `split_entry` makes of them). Where an object the functions need is
not in the cache the declarations cannot be compiled: `NotCached`, and the
caller builds the IR.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from xdsl.dialects import func
from xdsl.dialects.builtin import FileLineColLoc, FunctionType, IntAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from recir.backend.cache import ObjectCache, cache_key, stored_function_type
from recir.diagnostics import RecirError, emit_error
from recir.dialects import adjoint, frontier, tmath
from recir.dialects.row_types import is_rows

T = TypeVar("T")
FIELDS = {"types": list[str], "functions": list, "entry": dict, "facts": dict, "details": dict}
BATCHED, BEFORE = "__frontier", "__before"  # `invoke-to-frontier`'s and `split_entry`'s names


@dataclass(frozen=True)
class RowFacts:
    """`accumulates`: whether the function adds into its arguments (a call cut
    short must not be repeated); `row_work`: multiply-adds of a row's
    products; `row_only`: the arguments only ever added into by rows
    (`adjoint.accumulate_row`'s target), which a team shares under row
    locks; `outer_only`: those only ever added into by outer products of
    rows (`adjoint.accumulate_outer`'s target), which a team adds from its
    threads' logs (`passes/team_logs.py`)."""

    accumulates: bool
    row_work: int
    row_only: tuple[int, ...]
    outer_only: tuple[int, ...] = ()

    def as_json(self) -> list[Any]:
        return [self.accumulates, self.row_work, list(self.row_only), list(self.outer_only)]

    @staticmethod
    def from_json(value: Any) -> RowFacts | None:
        """The facts `as_json` wrote, None where `value` is not such a record."""
        if not (isinstance(value, list) and len(value) == 4):
            return None
        accumulates, work, *numbered = value
        if not (isinstance(accumulates, bool) and plain_int(work) and all(
                isinstance(ks, list) and all(plain_int(k) for k in ks) for ks in numbered)):
            return None
        return RowFacts(accumulates, work, *(tuple(ks) for ks in numbered))


def plain_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def row_facts(function: func.FuncOp) -> RowFacts:
    """The facts of `function`, which must have its body."""
    if not function.body.blocks:
        raise emit_error(function, "a declaration's row facts come from the cache entry")
    args = function.body.blocks[0].args

    def only(kind: type[Operation], of_rows: bool = False) -> tuple[int, ...]:
        """The arguments every use of which is `kind`'s target (`of_rows`:
        its other operands rows, which the row kernels log)."""
        return tuple(k for k, arg in enumerate(args) if all(
            isinstance(use.operation, kind) and use.index == 0 and (not of_rows or all(
                is_rows(o) for o in use.operation.operands[1:])) for use in arg.uses))

    return RowFacts(any(op.name.startswith("adjoint.accumulate") for op in function.walk()),
                    row_work(function), only(adjoint.AccumulateRowOp),
                    only(adjoint.AccumulateOuterOp, of_rows=True))


# a bilinear form and its gradients over rows: each a product of V's size (operand 0)
BILINEAR = (tmath.BilinearOp | adjoint.BilinearLhsOp | adjoint.BilinearRhsOp
            | adjoint.AccumulateBilinearOp)


def row_work(function: func.FuncOp) -> int:
    """Multiply-adds per row of the function's products over rows (a
    `_bwd`'s: dY W and dY^T X; a bilinear form's V's rows times y, and its
    left, right and V's gradients: one of V's size each), a branch's (the
    rows of one side of a `frontier.partition`) counted for its cheaper
    side: a height's rows may all take that one (a leaf's height takes only
    the leaf's product)."""
    sides: dict[SSAValue, frozenset[tuple[Operation, int]]] = {}
    totals: dict[frozenset[tuple[Operation, int]], int] = defaultdict(int)
    partitions: list[Operation] = []
    for op in function.walk():
        if isinstance(op, frontier.PartitionOp):
            partitions.append(op)
            sides.update((r, frozenset({(op, j)})) for j, r in enumerate(op.results))
            continue
        under = frozenset[tuple[Operation, int]]() if isinstance(op, frontier.MergeOp) \
            else frozenset().union(*(sides.get(v, frozenset()) for v in op.operands))
        sides.update((r, under) for r in op.results)
        if isinstance(op, tmath.MatvecOp | adjoint.AccumulateOuterOp | BILINEAR):
            totals[under] += math.prod(tmath.shape_of(op.operands[0]))
        elif isinstance(op, adjoint.VecmatOp):
            totals[under] += math.prod(tmath.shape_of(op.operands[1]))
    work = totals[frozenset()]
    for p in partitions:
        work += min(sum(w for key, w in totals.items() if (p, j) in key) for j in (0, 1))
    return work


class NotCached(Exception):
    """An object of a summary's functions is missing from the cache."""


def known_facts(function: func.FuncOp, facts: dict[str, RowFacts] | None) -> RowFacts:
    """`function`'s `RowFacts`: found in its body, or given (a summary's)."""
    if facts is None:
        return row_facts(function)
    if function.sym_name.data not in facts:
        raise NotCached(function.sym_name.data)
    return facts[function.sym_name.data]


def through_summary(cache_dir: Path | str | None, made_of: str, entry: str,
                    build: Callable[[], tuple[ModuleOp, dict[str, Any]]],
                    make: Callable[[ModuleOp, dict[str, RowFacts] | None, dict[str, Any]], T]
                    ) -> T:
    """`make(module, facts, details)` on the cached summary's module where
    there is one and its objects are cached, else on the IR `build` gives
    (with no facts: they are found in it), whose summary is then stored.
    `made_of`: what determines the IR (and so the summary); `details`: what
    `build` found out beside the IR, kept with the summary."""
    key = cache_key(made_of, f"frontier summary {entry}")
    cache = ObjectCache(cache_dir)
    hit = cache.load(key, FIELDS)
    rebuilt = None if hit is None else skeleton(hit[1], entry)
    if rebuilt is not None:
        try:
            return make(*rebuilt)
        except (NotCached, RecirError):  # the IR says what is wrong, if anything
            pass
    module, details = build()
    made = make(module, None, details)
    cache.store(key, b"", summary(module, entry, made.row_facts, details))  # type: ignore
    return made


def summary(module: ModuleOp, entry: str, facts: dict[str, RowFacts],
            details: dict[str, Any]) -> dict[str, Any]:
    """The metadata `skeleton` rebuilds the module from."""
    types: dict[str, int] = {}

    def index(typ: Attribute) -> int:
        return types.setdefault(str(typ), len(types))

    functions, batched = [], None
    for op in module.ops:
        if not isinstance(op, func.FuncOp):
            continue
        if op.sym_name.data == entry + BATCHED:
            batched = op
            continue
        signature = op.function_type
        functions.append([op.sym_name.data, [index(t) for t in signature.inputs.data],
                          [index(t) for t in signature.outputs.data]])
    assert batched is not None
    block = batched.body.blocks[0]
    ops = list(block.ops)
    schedule = next(op for op in ops if isinstance(op, frontier.ScheduleOp))
    args, operands = list(block.args), list(schedule.operands)
    places: dict[SSAValue, int] = {v: k for k, v in enumerate(args)}
    before = ops.index(schedule) > 0
    if before:
        places.update((v, len(args) + j) for j, v in enumerate(operands))
    places.update((v, len(args) + len(operands) + j) for j, v in enumerate(schedule.outputs))
    loc = schedule.location
    return {"types": list(types), "functions": functions, "facts": {
        name: f.as_json() for name, f in facts.items()}, "details": details, "entry": {
        "args": [index(a.type) for a in args], "before": before,
        "operands": [places[v] for v in operands], "moving": len(schedule.moving),
        "operand_types": [index(v.type) for v in operands],
        "calls": [schedule.expand.root_reference.data, schedule.post.root_reference.data],
        "sites": schedule.sites.value.data,
        "outputs": [index(r.type) for r in schedule.outputs],
        "returned": [places[v] for v in ops[-1].operands],
        "loc": [loc.filename.data, loc.line.data, loc.column.data]
        if isinstance(loc, FileLineColLoc) else None}}


def skeleton(meta: dict[str, Any], entry: str
             ) -> tuple[ModuleOp, dict[str, RowFacts], dict[str, Any]] | None:
    """The module, facts and details `summary` describes; None where the
    metadata does not describe them (the IR is built again)."""
    try:
        parsed = stored_function_type(f"({', '.join(meta['types'])}) -> ()")
        assert parsed is not None and len(parsed.inputs.data) == len(meta["types"])
        types = list(parsed.inputs.data)
        functions = [func.FuncOp.external(name, [types[k] for k in inputs],
                                          [types[k] for k in outputs])
                     for name, inputs, outputs in meta["functions"]]
        functions.append(batched_entry(meta["entry"], types, entry))
        facts = {name: RowFacts.from_json(f) for name, f in meta["facts"].items()}
        details = meta["details"]
        if any(f is None for f in facts.values()) or not all(
                isinstance(v, str) or isinstance(v, list) and all(isinstance(x, str) for x in v)
                for v in details.values()):
            return None
        return ModuleOp(functions), facts, details  # type: ignore[return-value]
    except Exception:  # whatever the metadata holds, the IR is built again
        return None


def batched_entry(described: dict[str, Any], types: list[Attribute], entry: str
                  ) -> func.FuncOp:
    """The batched entry: its schedule fed by its arguments or by a call of
    `@<entry>__frontier__before` standing for the ops before it."""
    block = Block(arg_types=[types[k] for k in described["args"]])
    values: list[SSAValue] = list(block.args)
    if described["before"]:
        call = func.CallOp(entry + BATCHED + BEFORE, values,
                           [types[k] for k in described["operand_types"]])
        block.add_op(call)
        operands = list(call.results)
    else:
        operands = [values[k] for k in described["operands"]]
    values += operands  # where `summary` numbers them, as `Flow` does
    moving = described["moving"]
    expand, post = described["calls"]
    schedule = frontier.ScheduleOp(expand, post, described["sites"], operands[:moving],
                                   operands[moving:], [types[k] for k in described["outputs"]])
    if described["loc"] is not None:
        filename, line, column = described["loc"]
        schedule.location = FileLineColLoc(StringAttr(filename), IntAttr(line), IntAttr(column))
    block.add_op(schedule)
    values += list(schedule.results)
    returned = [values[k] for k in described["returned"]]
    block.add_op(func.ReturnOp(*returned))
    signature = FunctionType.from_lists(list(block.arg_types), [v.type for v in returned])
    return func.FuncOp(entry + BATCHED, signature, Region(block))
