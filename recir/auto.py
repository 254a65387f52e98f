"""`batching="frontier"` and `"auto"` for `recir.compile` and `recir.value_and_grad`.

`"frontier"` is `invoke-to-frontier`'s batched IR compiled by the one
backend (`frontier_compile.py`, `frontier_gradients.py`). `"auto"` holds both
the recursive native code and the frontier form and runs each call through
one of them: the frontier where the batch's work, the multiply-adds of the
cell's largest product over the batch's invocations, reaches AUTO_WORK (one
thread) or AUTO_TEAM_WORK (a team, which runs the recursive code's trees as
its tasks). A tree's invocations are its nodes, read off its longest
structure array (1 per input tuple without one); a cell's work is 750 x 300
for TreeLSTM h=150, RNTN's bilinear tensor counted 5x: the recursive code
runs it at about a fifth of a matrix-vector product's rate. The thresholds
sit where the frontier overtook the recursive code in trees/s over SST dev
trees (`python bench/run.py auto`). One tree of many nodes is the
frontier's too: the work counts nodes, not trees.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType

from recir.diagnostics import RecirError
from recir.dialects import tmath
from recir.frontier_compile import FrontierFunction, compile_frontier
from recir.frontier_gradients import FrontierGradFunction, value_and_grad_frontier

AUTO_WORK, AUTO_TEAM_WORK = 30_000_000, 50_000_000
BILINEAR_COST = 5
MODES = ("recursive", "frontier", "auto")


def cell_work(module: Any) -> int:
    """Multiply-adds of the model's largest product (bilinear weighted)."""
    work = [int(np.prod(tmath.shape_of(op.matrix))) for op in module.walk()
            if isinstance(op, tmath.MatvecOp)]
    work += [BILINEAR_COST * int(np.prod(tmath.shape_of(op.tensor)))
             for op in module.walk() if isinstance(op, tmath.BilinearOp)]
    return max(work, default=0)


class Work:
    """A batch's work for `auto`: invocations x the cell's largest product."""

    def __init__(self, model: Any, batched: FrontierFunction | None):
        self.batched = batched
        self.cell = cell_work(model.module) if batched is not None else 0
        inputs = list(batched.original.function_type.inputs)[:len(model.input_names)] \
            if batched is not None else []
        self.structures = [k for k, t in enumerate(inputs)
                           if isinstance(t, TensorType) and any(d < 0 for d in t.get_shape())]

    def of(self, batch: Sequence[Sequence[Any]]) -> int:
        structures = self.structures
        return self.cell * sum(max((len(inputs[j]) for j in structures), default=1)
                               for inputs in batch)

    def mode(self, batch: Sequence[Sequence[Any]], team: bool) -> str:
        least = AUTO_TEAM_WORK if team else AUTO_WORK
        return "frontier" if self.batched is not None and self.of(batch) >= least else \
            "recursive"


class AutoFunction:
    """`batching="auto"`: recursive native code or the frontier, per call."""

    def __init__(self, model: Any, native: Any, batched: FrontierFunction | None):
        self.native, self.batched = native, batched
        self.work = Work(model, batched)

    def choose(self, batch: Sequence[Sequence[Any]]) -> str:
        return self.work.mode(batch, bool(self.native.batch_team))

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        return self.batch([inputs])[0]

    def batch(self, batch: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        if self.choose(batch) == "frontier":
            return self.batched.batch(batch)  # type: ignore[union-attr]
        return self.native.batch(batch)


class AutoGradFunction:
    """`value_and_grad(batching="auto")`: the recursive gradient code or the
    frontier's batched backward, per batch, by the same rule."""

    def __init__(self, model: Any, recursive: Any, batched: FrontierGradFunction | None):
        self.recursive, self.batched = recursive, batched
        self.work = Work(model, batched)
        self.params = recursive.params

    def choose(self, batch: Sequence[Sequence[Any]], threads: int) -> str:
        native = self.recursive.native
        return self.work.mode(batch, threads > 1 and native is not None and
                              bool(native.batch_team))

    def __call__(self, *inputs: Any, into: dict[str, np.ndarray] | None = None) -> Any:
        return self.recursive(*inputs, into=into)

    def batch(self, batch: Sequence[Sequence[Any]], into: dict[str, np.ndarray] | None = None,
              threads: int | None = None) -> Any:
        """`threads` (default: the function's) for the recursive code."""
        native = self.recursive.native
        threads = threads or (native.threads if native is not None else 1)
        if self.choose(batch, threads) == "frontier":
            return self.batched.batch(batch, into)  # type: ignore[union-attr]
        return self.recursive.batch(batch, into, threads)


def checked_mode(batching: str) -> None:
    if batching not in MODES:
        raise RecirError(f"error: unknown batching '{batching}' (choose from {MODES})")


def frontier_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k in ("cache_dir", "threads")}


def frontier_or_none(build: Any, *args: Any, **options: Any) -> Any:
    """`build`'s frontier form, or None for a recursion `invoke-to-frontier`
    cannot batch (then `auto` runs the recursive code only)."""
    try:
        return build(*args, **frontier_options(options))
    except RecirError:
        return None


def compile_batched(model: Any, batching: str, **options: Any) -> Any:
    """`recir.compile(model, batching="frontier" | "auto")`."""
    from recir import pipeline

    checked_mode(batching)
    if batching == "frontier":
        return compile_frontier(model, **frontier_options(options))
    batched = frontier_or_none(compile_frontier, model, **options)
    return AutoFunction(model, pipeline.compile(model, **options), batched)


def value_and_grad_batched(model: Any, loss: int, batching: str, **options: Any) -> Any:
    """`recir.value_and_grad(model, batching="frontier" | "auto")`."""
    from recir import gradients as api

    checked_mode(batching)
    if batching == "frontier":
        return value_and_grad_frontier(model, loss, **frontier_options(options))
    batched = frontier_or_none(value_and_grad_frontier, model, loss, **options)
    return AutoGradFunction(model, api.value_and_grad(model, loss, **options), batched)
