"""`batching="frontier"` and `"auto"` for `recir.compile` and `recir.value_and_grad`.

`"frontier"` is `invoke-to-frontier`'s batched IR compiled by the one
backend (`frontier_compile.py`, `frontier_gradients.py`). `"auto"` holds both
the recursive native code and the frontier form and runs each call through
the one a cost model says is faster for that batch (`Estimate`): the same
batch always gets the same mode, and nothing is timed during the calls.

The model is `auto_costs.py`'s. The number of heights it needs is walked
off the largest trees where the recursion reads its children off structure
arrays (`tmath.extract` of an input at the invocation's argument) and the
decision turns on it (the bounds of `auto_costs.height_bounds` would not
agree); else estimated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import BlockArgument

from recir.auto_costs import Estimate, cell_cost, estimated_heights, height_bounds
from recir.backend import policy
from recir.backend.arguments import batch_items
from recir.diagnostics import RecirError
from recir.dialects import invoke, tmath
from recir.frontier_compile import compile_frontier
from recir.frontier_gradients import check_loss_output, value_and_grad_frontier
from recir.gradients import check_depth, check_threads

MODES = ("recursive", "frontier", "auto")
# The largest trees of a batch whose levels are walked (the tallest is
# almost always among them; the rest are estimated): a walk takes a few
# hundred ns a node, four SST-sized trees a few percent of a frontier call.
WALKED_TREES = 4


class Auto:
    """`auto`'s choice for one compiled model: its cell's costs, the
    machine's costs (`costs`, replaceable), and the batch's node counts."""

    def __init__(self, model: Any, batched: Any, gradient: bool, cache_dir: Any = None):
        self.batched = batched
        self.cell = cell_cost(model.module)
        self.costs = policy.costs(cache_dir)
        self.gradient = gradient
        self.estimate: Estimate | None = None
        inputs = list(batched.original.function_type.inputs)[:len(model.input_names)] \
            if batched is not None else []
        self.structures = [k for k, t in enumerate(inputs)
                           if isinstance(t, TensorType) and any(d < 0 for d in t.get_shape())]
        self.tree = child_arrays(model.module, len(inputs)) if batched is not None else None

    def sizes(self, batch: Sequence[Sequence[Any]]) -> list[int] | None:
        """Each input tuple's invocations: its longest structure array's
        length; None where an input tuple has too few inputs or a structure
        input without a length (the call then says which)."""
        structures = self.structures
        try:
            return [max((len(inputs[j]) for j in structures), default=1) for inputs in batch]
        except (IndexError, TypeError):
            return None

    def model(self) -> Estimate:
        estimate = self.estimate
        if estimate is None or estimate.costs is not self.costs:  # (`costs` replaced)
            estimate = self.estimate = Estimate(self.cell, self.costs, self.gradient)
        return estimate

    def seconds(self, batch: Sequence[Sequence[Any]], threads: int, frontier_threads: int
                ) -> dict[str, float]:
        """Each mode's predicted time for `batch`, the recursive code on
        `threads`, the frontier's products on up to `frontier_threads`
        (the heights walked where the trees give them)."""
        sizes = self.sizes(batch)
        if sizes is None:
            raise RecirError("error: a batch element has too few inputs or a structure "
                             "input that is not an array")
        if not batch:  # (either mode returns at once: no call, no height)
            return {"recursive": 0.0, "frontier": 0.0}
        estimate, heights = self.model(), self.heights(batch)
        return {"recursive": estimate.recursive(sizes, threads, heights),
                "frontier": estimate.frontier(sizes, frontier_threads, heights)}

    def mode(self, batch: Sequence[Sequence[Any]], threads: int, frontier_threads: int
             ) -> str:
        """The cheaper mode: by the bounds of the heights where both agree,
        else by the heights walked (or estimated)."""
        sizes = self.sizes(batch) if self.batched is not None and batch else None
        if sizes is None:
            return "recursive"
        estimate = self.model()
        picks = {estimate.frontier(sizes, frontier_threads, h)
                 < estimate.recursive(sizes, threads, h)
                 for h in height_bounds(max(sizes), self.cell.fan_out)}
        if len(picks) > 1:
            h = self.heights(batch)
            picks = {estimate.frontier(sizes, frontier_threads, h)
                     < estimate.recursive(sizes, threads, h)}
        return "frontier" if picks.pop() else "recursive"

    def heights(self, batch: Sequence[Sequence[Any]]) -> float | None:
        """The batch's heights: its tallest tree's levels where the trees
        give them, walking its `WALKED_TREES` largest (None: estimate them)."""
        sizes = self.sizes(batch)
        if self.tree is None or sizes is None:
            return None
        children, root = self.tree
        order = sorted(range(len(batch)), key=sizes.__getitem__, reverse=True)
        tallest = max((estimated_heights(sizes[k], self.cell.fan_out)
                       for k in order[WALKED_TREES:]), default=0.0)
        for k in order[:WALKED_TREES]:
            if height_bounds(sizes[k], self.cell.fan_out)[1] <= tallest:
                break  # no smaller tree can be taller
            levels = tree_levels([batch[k][j] for j in children], batch[k][root])
            if levels is None:
                return None
            tallest = max(tallest, float(levels))
        return tallest


def tree_levels(children: Sequence[Any], root: Any) -> int | None:
    """The levels below and at `root` of the tree whose nodes' children are
    `children`'s entries (negative: none), walked in Python (a few hundred
    ns a node); None for arrays that do not make a tree (the call itself
    says what is wrong)."""
    try:
        lists = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in children]
        nodes = min(len(c) for c in lists)
        deepest, seen, stack = 0, 0, [(int(root), 1)]
        pop, push = stack.pop, stack.append
        while stack:
            node, level = pop()
            seen += 1
            if seen > nodes or not 0 <= node < nodes:
                return None
            if level > deepest:
                deepest = level
            for c in lists:
                child = c[node]
                if child >= 0:
                    push((child, level + 1))
        return deepest
    except (ValueError, TypeError, IndexError):
        return None


def child_arrays(module: Any, inputs: int) -> tuple[list[int], int] | None:
    """Which inputs hold each invocation's children and which its root,
    where the recursion reads every child off an input at its argument
    (`tmath.extract %left[%i]`) and the entry invokes it on an input."""
    subgraphs = [op for op in module.walk() if isinstance(op, invoke.SubgraphOp)]
    if len(subgraphs) != 1:
        return None
    sub = subgraphs[0]
    entry = sub.parent_op()
    if not isinstance(entry, func.FuncOp) or len(sub.body.block.args) != 1:
        return None
    children: list[int] = []
    for op in sub.walk():
        if not isinstance(op, invoke.InvokeOp) or len(op.operands) != 1:
            continue
        extract = op.operands[0].owner
        if not (isinstance(extract, tmath.ExtractOp) and extract.index == sub.body.block.args[0]
                and entry_input(extract.input, entry, inputs) is not None):
            return None
        children.append(entry_input(extract.input, entry, inputs))  # type: ignore[arg-type]
    calls = [op for op in entry.body.block.ops if isinstance(op, invoke.InvokeOp)]
    if not children or len(calls) != 1 or len(calls[0].operands) != 1:
        return None
    root = entry_input(calls[0].operands[0], entry, inputs)
    return (sorted(set(children)), root) if root is not None else None


def entry_input(value: Any, entry: func.FuncOp, inputs: int) -> int | None:
    """The input `value` is, if it is one of the entry's first `inputs`."""
    if isinstance(value, BlockArgument) and value.owner is entry.body.block \
            and value.index < inputs:
        return value.index
    return None


class AutoFunction:
    """`batching="auto"`: recursive native code or the frontier, per call.
    The recursive code is compiled at its first use where the frontier form
    exists: a batch the cost model gives to the frontier never needs it, so
    a cold start compiles one form, not two. Without the frontier form it
    is compiled at once (its errors then surface where the call to
    `recir.compile` is)."""

    gradient = False

    def __init__(self, model: Any, build: Callable[[], Any], batched: Any, threads: int,
                 cache_dir: Any = None):
        """`threads`: the recursive code's, as `pipeline.resolve_threads` gives them."""
        self.build, self.batched, self.threads = build, batched, threads
        self.built = None if batched is not None else build()
        self.auto = Auto(model, batched, self.gradient, cache_dir)
        self.params, self.name = model.params, model.entry

    def wait(self) -> AutoFunction:
        """This function, the code it has compiled so far loaded
        (`NativeFunction.wait`): the frontier's, and the recursive code once built."""
        for compiled in (self.batched, self.built):
            if compiled is not None:
                compiled.wait()
        return self

    @property
    def recursive(self) -> Any:
        if self.built is None:
            self.built = self.build()
        return self.built

    def choose(self, batch: Sequence[Sequence[Any]], threads: int | None = None) -> str:
        """By the recursive code on `threads` (default: the function's; a
        gradient batch's may run on a team's or the pool's) and the frontier
        on the function's; an empty batch to the frontier where it exists
        (nothing to run, so nothing to compile)."""
        if not batch and self.batched is not None:
            return "frontier"
        return self.auto.mode(batch, threads or self.threads, self.threads)

    def __call__(self, *inputs: Any, timeout: float | None = None) -> tuple[Any, ...]:
        """One call; with a `timeout`, the recursive code's (which stops it)."""
        if timeout is not None:
            return self.recursive(*inputs, timeout=timeout)
        return self.batch([inputs])[0]

    def batch(self, batch: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        batch = batch_items(batch, self.name)
        if self.choose(batch) == "frontier":
            return self.batched.batch(batch)
        return self.recursive.batch(batch)


class AutoGradFunction(AutoFunction):
    """`value_and_grad(batching="auto")`: the recursive gradient code or the
    frontier's batched backward, per batch, by the same model."""

    gradient = True

    def __call__(self, *inputs: Any, into: dict[str, Any] | None = None,
                 timeout: float | None = None) -> Any:
        return self.recursive(*inputs, into=into, timeout=timeout)

    def batch(self, batch: Sequence[Sequence[Any]], into: dict[str, Any] | None = None,
              threads: int | None = None) -> Any:
        """`threads` (default: the function's) for the recursive code."""
        batch = batch_items(batch, self.name)
        threads = check_threads(threads) or self.threads
        if self.choose(batch, threads) == "frontier":
            return self.batched.batch(batch, into)
        return self.recursive.batch(batch, into, threads)


def compile_batched(model: Any, batching: str, **options: Any) -> Any:
    """`recir.compile(model, batching="frontier" | "auto")`."""
    from recir import pipeline

    check_options("compile", options, ("threads", "fuse", "cache_dir", "max_depth"), batching)
    check_batching(model, batching)
    return batched_or_auto(model, batching, compile_frontier, (), AutoFunction,
                           lambda: pipeline.compile(model, **options), options)


def value_and_grad_batched(model: Any, loss: int, batching: str, **options: Any) -> Any:
    """`recir.value_and_grad(model, batching="frontier" | "auto")`."""
    from recir import gradients as api

    check_options("value_and_grad", options,
                  ("threads", "fuse", "cache_dir", "engine", "max_depth"), batching)
    check_batching(model, batching)
    loss = check_loss_output(model, loss)
    return batched_or_auto(model, batching, value_and_grad_frontier, (loss,), AutoGradFunction,
                           lambda: api.value_and_grad(model, loss, **options), options)


def check_options(function: str, options: dict[str, Any], known: tuple[str, ...],
                  batching: str) -> None:
    """Names the recursive code takes (the frontier reads `cache_dir` and
    `threads`, and needs no `fuse`); the frontier alone would drop the
    others without a word, so an unknown name or a setting it cannot honour
    is refused as the recursive code refuses it."""
    for name in options:
        if name not in known:
            raise TypeError(f"{function}() got an unexpected keyword argument '{name}'")
    from recir.pipeline import checked_fuse

    checked_fuse(options.get("fuse", True))
    check_depth(options.get("max_depth"), options.get("engine", "native"))
    if batching != "frontier":
        return
    if options.get("max_depth") is not None:
        raise RecirError("error: max_depth bounds the recursive code's calls: "
                         "batching='frontier' makes none (it bounds its levels itself)")
    if options.get("engine", "native") != "native":
        raise RecirError(f"error: engine='{options['engine']}' runs the recursive form: "
                         "batching='frontier' is compiled code only")


def check_batching(model: Any, batching: str) -> None:
    """A known mode, for a traced model: a module's function (`entry=`) is
    compiled by the recursive code only."""
    if batching not in MODES:
        raise RecirError(f"error: unknown batching '{batching}' (choose from {MODES})")
    if isinstance(model, ModuleOp):
        raise RecirError(f"error: batching='{batching}' takes a traced model (recir.trace), "
                         "not a module: compile a module's function with batching='recursive'")


def batched_or_auto(model: Any, batching: str, frontier: Callable[..., Any],
                    args: tuple[Any, ...], auto: type[AutoFunction],
                    recursive: Callable[[], Any], options: dict[str, Any]) -> Any:
    """`frontier`'s form (given the options it takes), or for `"auto"`
    `auto` over it and the `recursive` code; a recursion `invoke-to-frontier`
    cannot batch has no frontier form, and `auto` then runs the recursive
    code only; so it does given a setting only that code honours
    (`max_depth`, `engine="interpret"`), which `check_options` refuses for
    `"frontier"`."""
    from recir.pipeline import resolve_threads

    kept = {k: v for k, v in options.items() if k in ("cache_dir", "threads")}
    if batching == "frontier":
        return frontier(model, *args, **kept)
    honoured = options.get("max_depth") is None and options.get("engine", "native") == "native"
    try:
        batched = frontier(model, *args, **kept) if honoured else None
    except RecirError:
        batched = None
    threads = resolve_threads(options.get("threads")) if options.get(
        "engine", "native") == "native" else 1  # (the interpreter: one)
    return auto(model, recursive, batched, threads, options.get("cache_dir"))
