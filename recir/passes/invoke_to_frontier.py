"""invoke-to-frontier: a closed recursive function's frontier-batched form, in IR.

As JAX's `vmap` turns a function of one example into one of a batch, this
pass turns a self-recursive `@f` (after `capture-outer-refs`) and the entry
that invokes it into functions over *rows*, one row per invocation
(`dialects/row_types.py`: `tensor<8xf32>` becomes `tensor<?x8xf32>`, `f32`
`tensor<?xf32>`, `i32` `tensor<?xi32>`; uniform values, the parameters and
what only they compute, keep their types and are shared by every row). The
split of `@f` is `frontier_segments.py`'s; the op rules are
`frontier_rows.py`'s. Added beside the originals:

- `@f__expand(tree, moving..., shared...)`: the ops that the invoke
  arguments and the predicates of branches holding invokes depend on, run
  top down on one depth's invocations. Results: per invoke site, the rows
  (of this depth) that reach it, then the children's tree and moving
  arguments, one row per child; then the stored values the bottom-up part
  reads (each row's tree first), one row per invocation (zero where a
  branch did not define it).
- `@f__post(stored..., children..., results..., shared...)`: the rest, run
  bottom up on one height's invocations. An invoke is a `frontier.take` of
  the children's rows of the results so far; a branch is a
  `frontier.partition` of the rows, each side on its rows, and a
  `frontier.merge` of the results.
- `@entry__frontier`: the entry over a batch (one row per batch element);
  its invoke becomes `frontier.schedule @f__expand, @f__post`, which the
  runtime runs (`interpreter/frontier.py` is the reference).

`moving` are the arguments an invoke changes; `shared` those it passes
along: uniform ones as they are, a per-tree input of fixed shape as one row
per tree, a per-tree array of dynamic shape (a tree's structure) as the
trees' arrays one after another and the offsets where each starts
(`frontier.extract_ragged`).

Options: `entry` (the function that invokes `@f`; default the one public
function with an invoke) and `inputs` (how many leading arguments of the
entry vary per batch element, the rest being parameters; default: up to
the last scalar or dynamically shaped argument).

A function the frontiers cannot run (an invoke argument that depends on
another invoke's result, as in Ackermann's function) is an error naming
the op.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, i32
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.passes import ModulePass

from recir.diagnostics import RecirError, emit_error
from recir.dialects import frontier, invoke
from recir.dialects.row_types import rows_type
from recir.passes.frontier_rows import RowBuilder, Rows
from recir.passes.frontier_segments import (
    Plan,
    callees,
    entry_kinds,
    find_recursive,
    functions,
    make_plan,
)
from recir.passes.pass_options import at_least

INDEX_ROWS = rows_type(i32)


def is_ragged(typ: Attribute) -> bool:
    return isinstance(typ, TensorType) and any(d < 0 for d in typ.get_shape())


@dataclass
class Layout:
    """Which arguments of `@f` move and how the shared ones are passed."""

    plan: Plan

    @property
    def args(self) -> list[SSAValue]:
        return list(self.plan.rec.body.block.args)

    @property
    def moving(self) -> list[int]:
        return [j for j, through in enumerate(self.plan.passthrough) if not through]

    @property
    def shared(self) -> list[int]:
        return [j for j, through in enumerate(self.plan.passthrough) if through]

    def shared_args(self) -> list[tuple[SSAValue, str]]:
        return [(self.args[j], self.plan.kinds[self.args[j]]) for j in self.shared]

    def bind_shared(self, builder: RowBuilder, values: list[SSAValue]) -> None:
        """Map `@f`'s shared arguments to a new function's `values`."""
        builder.per_tree.update(bind(builder, self.shared_args(), values))


def passed_as(args: list[tuple[SSAValue, str]]) -> tuple[list[Attribute], list[str | None]]:
    """The types and names a batched function takes arguments of these
    kinds as: a uniform one as it is, a per-tree array of dynamic shape as
    the trees' arrays and their offsets, any other as rows."""
    types: list[Attribute] = []
    names: list[str | None] = []
    for arg, kind in args:
        hint = arg.name_hint
        if kind == "U":
            types.append(arg.type)
            names.append(hint)
        elif is_ragged(arg.type):
            types += [arg.type, INDEX_ROWS]
            names += [hint, hint and f"{hint}_offsets"]
        else:
            types.append(rows_type(arg.type))
            names.append(hint)
    return types, names


def bind(builder: RowBuilder, args: list[tuple[SSAValue, str]], values: list[SSAValue]
         ) -> dict[SSAValue, SSAValue]:
    """Map arguments of these kinds to a batched function's `values` (as
    `passed_as`); returns those passed as rows."""
    values, rows = list(values), {}
    for arg, kind in args:
        if kind == "U":
            builder.uniform[arg] = values.pop(0)
        elif is_ragged(arg.type):
            builder.ragged[arg] = (values.pop(0), values.pop(0))
        else:
            rows[arg] = values.pop(0)
    return rows


def new_function(name: str, block: Block, outputs: list[SSAValue],
                 visibility: str | None = "private") -> func.FuncOp:
    block.add_op(func.ReturnOp(*outputs))
    types = ([a.type for a in block.args], [v.type for v in outputs])
    return func.FuncOp(name, types, Region(block), visibility=visibility)


def name_args(block: Block, names: list[str | None]) -> None:
    """Readable IR: the new arguments keep the old names (`%left`)."""
    for arg, name in zip(block.args, names, strict=True):
        arg.name_hint = name


def top_rows(builder: RowBuilder, tree: SSAValue) -> Rows:
    top = builder.top = Rows(None, None, None, tree)
    builder.tree = tree
    top.local[tree] = tree
    return top


def build_expand(plan: Plan, layout: Layout, name: str) -> func.FuncOp:
    moving = [layout.args[j] for j in layout.moving]
    shared_types, shared_names = passed_as(layout.shared_args())
    block = Block(arg_types=[INDEX_ROWS, *(rows_type(a.type) for a in moving), *shared_types])
    sites: dict[int, list[SSAValue]] = {}

    def record(at: Rows, op: invoke.InvokeOp) -> None:
        if at.top is None:
            raise emit_error(op, "runs on every invocation, outside any branch: the "
                             "recursion never ends")
        assert builder.tree is not None
        children = [builder.rows_of(at, op.args[j]) for j in layout.moving]
        sites[plan.sites[op]] = [at.top, builder.get(at, builder.tree), *children]

    builder = RowBuilder(block, plan.kinds, lambda op: plan.runs(op, "expand"),
                         lambda op: op not in plan.structural, record)
    name_args(block, ["tree", *(a.name_hint for a in moving), *shared_names])
    top = top_rows(builder, block.args[0])
    top.local.update(zip(moving, block.args[1:1 + len(moving)], strict=True))
    layout.bind_shared(builder, list(block.args[1 + len(moving):]))
    for value in plan.stored:
        for if_op, region in plan.paths[value]:
            builder.lifted.setdefault(if_op, []).append((value, region))
    builder.run_block(top, plan.rec.body.block)
    outputs = [v for k in range(len(plan.sites)) for v in sites[k]]
    outputs += [block.args[0], *(builder.get(top, v) for v in plan.stored)]
    return new_function(name, block, outputs)


def build_post(plan: Plan, layout: Layout, name: str) -> func.FuncOp:
    rec_outputs = list(plan.rec.function_type.outputs.data)
    nsites = len(plan.sites)
    shared_types, shared_names = passed_as(layout.shared_args())
    block = Block(arg_types=[INDEX_ROWS, *(rows_type(v.type) for v in plan.stored),
                             *[INDEX_ROWS] * nsites, *(rows_type(t) for t in rec_outputs),
                             *shared_types])
    args = list(block.args)
    stored = args[1:1 + len(plan.stored)]
    children = args[1 + len(plan.stored):1 + len(plan.stored) + nsites]
    first_table = 1 + len(plan.stored) + nsites
    tables = args[first_table:first_table + len(rec_outputs)]

    def gather(at: Rows, op: invoke.InvokeOp) -> None:
        ids = builder.get(at, children[plan.sites[op]])
        for result, table in zip(op.results, tables, strict=True):
            at.local[result] = builder.emit(frontier.TakeOp(table, ids))

    builder = RowBuilder(block, plan.kinds, lambda op: plan.runs(op, "post"),
                         lambda op: True, gather)
    name_args(block, ["tree", *(v.name_hint for v in plan.stored),
                      *(f"child{k}" for k in range(nsites)),
                      *(f"result{k}" for k in range(len(rec_outputs))), *shared_names])
    top = top_rows(builder, args[0])
    top.local.update(zip(plan.stored, stored, strict=True))
    top.local.update((c, c) for c in children)
    layout.bind_shared(builder, args[1 + len(plan.stored) + nsites + len(rec_outputs):])
    builder.run_block(top, plan.rec.body.block)
    returned = plan.rec.body.block.last_op.operands  # type: ignore[union-attr]
    return new_function(name, block, [builder.rows_of(top, v) for v in returned])


def entry_args(plan: Plan) -> list[tuple[SSAValue, str]]:
    """The entry's arguments and kinds: the batched entry takes rows for a
    per-element input (B), a per-tree array (R, of dynamic shape) as the
    trees' arrays and their offsets, parameters (U) as they are."""
    return [(arg, plan.kinds[arg]) for arg in plan.entry.body.block.args]


def bind_entry(plan: Plan, builder: RowBuilder, block: Block) -> Rows:
    """Map the entry's arguments to the batched entry's: its top rows."""
    local = bind(builder, entry_args(plan), list(block.args))
    if not local:
        raise emit_error(plan.entry, "frontier batching needs an input of fixed shape "
                         "(one row per batch element)")
    top = builder.top = Rows(None, None, None, next(iter(local.values())), local)
    return top


def build_entry(plan: Plan, layout: Layout, names: tuple[str, str, str]) -> func.FuncOp:
    types, arg_names = passed_as(entry_args(plan))
    block = Block(arg_types=types)
    name_args(block, arg_names)
    rec_outputs = list(plan.rec.function_type.outputs.data)

    def schedule(at: Rows, op: invoke.InvokeOp) -> None:
        if at is not top:
            raise emit_error(op, "frontier batching needs the entry's invoke outside branches")
        moving = [builder.rows_of(at, op.args[j]) for j in layout.moving]
        shared: list[SSAValue] = []
        for j in layout.shared:
            value, kind = op.args[j], plan.kinds[layout.args[j]]
            if kind == "U":
                shared.append(builder.uniform_value(value))
            elif value in builder.ragged:
                shared += builder.ragged[value]
            else:
                shared.append(builder.rows_of(at, value))
        sched = frontier.ScheduleOp(names[0], names[1], len(plan.sites), moving, shared,
                                    [rows_type(t) for t in rec_outputs])
        builder.add(sched)
        at.local.update(zip(op.results, sched.results, strict=True))

    builder = RowBuilder(block, plan.kinds, lambda op: True, lambda op: True, schedule)
    top = bind_entry(plan, builder, block)
    builder.run_block(top, plan.entry.body.block)
    returned = plan.entry.body.block.last_op.operands  # type: ignore[union-attr]
    return new_function(names[2], block, [builder.rows_of(top, v) for v in returned], None)


def default_entry(module: ModuleOp) -> str:
    found = [name for name, fn in functions(module).items()
             if not fn.is_declaration and fn.sym_visibility is None and callees(fn)]
    if not found:  # (from `recir.compile(batching="frontier")`: a model without recursion)
        raise RecirError("error: invoke-to-frontier: no public function invokes a "
                         "subgraph: frontier batching runs a recursion's calls level by "
                         "level, and this module has none (batching='recursive' runs it)")
    if len(found) != 1:
        raise RecirError("error: invoke-to-frontier: name the entry function "
                         f"(invoke-to-frontier{{entry=...}}); candidates: {found}")
    return found[0]


def default_inputs(entry: func.FuncOp) -> int:
    """Up to the last scalar or dynamically shaped argument: parameters are
    tensors of fixed shape and come after the inputs."""
    count = 0
    for k, arg in enumerate(entry.body.block.args):
        if not isinstance(arg.type, TensorType) or is_ragged(arg.type):
            count = k + 1
    return count


@dataclass(frozen=True)
class InvokeToFrontierPass(ModulePass):
    name = "invoke-to-frontier"

    entry: str = ""
    inputs: int = -1

    def __post_init__(self) -> None:
        at_least(self, inputs=-1)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        entry_name = self.entry or default_entry(op)
        entry, _ = find_recursive(op, entry_name)
        funcs = functions(op)
        inputs = self.inputs if self.inputs >= 0 else default_inputs(entry)
        if inputs > len(entry.args):
            raise emit_error(entry, f"takes {len(entry.args)} arguments: inputs={inputs} "
                             "counts more inputs than that")
        plan = make_plan(op, entry_name, entry_kinds(entry, inputs))
        layout = Layout(plan)
        rec_name = plan.rec.sym_name.data
        if not layout.moving:
            raise emit_error(plan.rec, "passes every argument along unchanged: its "
                             "recursion never ends")
        for j, arg in enumerate(layout.args):
            moving, ragged = j in layout.moving, is_ragged(arg.type)
            rank = len(arg.type.get_shape()) if ragged else 1  # type: ignore[attr-defined]
            if ragged and (moving or rank != 1):
                raise emit_error(plan.rec, f"argument {j} ({arg.type}): an array of dynamic "
                                 "shape must be a vector passed along unchanged")
        names = (f"{rec_name}__expand", f"{rec_name}__post", f"{entry_name}__frontier")
        for name in names:
            if name in funcs:
                raise emit_error(funcs[name], f"invoke-to-frontier would add @{name} again")
        expand = build_expand(plan, layout, names[0])
        post = build_post(plan, layout, names[1])
        batched = build_entry(plan, layout, names)
        op.body.block.add_ops([expand, post, batched])
