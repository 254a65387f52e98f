"""Frontier-batched callables: `recir.compile(model, batching="frontier")`.

`f(*inputs)` runs one input tuple (batching within the tree), `f.batch(list
of input tuples)` runs many at once (batching across trees too); outputs are
the recursive path's, tuple per input. The IR is closed once
(`capture-outer-refs`) and segmented (`segments.py`); parameters are read by
reference, so an optimizer that updates them in place is seen.

Calls of one function from several Python threads take turns (`calls`, a
lock): its `Runner` keeps its scratch from one call to the next (the native
post segment's lanes and record templates, the native expansion's tables,
the forward's frames and schedules that the backward reads), so sharing is
inherent; each call is already spread over the function's threads. Calls of
different functions run at once: the per-run thread count is per Python
thread (`kernels.THREADS`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType

from recir.batching import kernels
from recir.batching.execute import Frame, Runner
from recir.batching.kernels import PerRoot, dtype_of
from recir.batching.schedule import Schedule
from recir.passes.frontier_segments import Plan, entry_kinds, make_plan
from recir.diagnostics import RecirError
from recir.interpreter import coerce_argument, coerce_tensor, tensor_facts
from recir.pipeline import CLOSE, run_passes


def closed(model: Any) -> Any:
    module = model.module.clone()
    run_passes(module, CLOSE)
    return module


def plan_for(model: Any, module: Any) -> Plan:
    from recir.passes.frontier_segments import find_recursive

    entry, _ = find_recursive(module, model.entry)
    return make_plan(module, model.entry, entry_kinds(entry, len(model.input_names)))


class BatchedFunction:
    """A traced model run by the frontier scheduler."""

    def __init__(self, model: Any, threads: int | None = 1, native: bool = True,
                 gradients: bool = False):
        """`native`: row-wise ops as compiled row kernels (`native.py`); False
        runs every op as a NumPy call (the reference the tests compare with)."""
        self.threads = threads or (os.cpu_count() or 1)
        self.params: dict[str, np.ndarray] = model.params
        self.input_names = list(model.input_names)
        self.module = closed(model)
        self.plan = plan_for(model, self.module)
        self.runner = Runner(self.plan, native, gradients)
        self.calls = threading.Lock()  # held by the call running on `runner`

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        return self.batch([inputs])[0]

    def entry_values(self, batch: Sequence[Sequence[Any]]) -> list[Any]:
        """Per entry argument: stacked rows (B), ragged per-tree arrays (R) or
        the parameter (U)."""
        plan = self.plan
        args = plan.entry.body.block.args
        ninputs = len(self.input_names)
        for k, inputs in enumerate(batch):
            if len(inputs) != ninputs:
                raise RecirError(f"error: @{plan.entry.sym_name.data} takes {ninputs} "
                                 f"inputs, got {len(inputs)} (batch element {k})")
        values: list[Any] = []
        for j, arg in enumerate(args):
            if j >= ninputs:
                values.append(self.params[list(self.params)[j - ninputs]])
                continue
            typ = arg.type
            dtype = dtype_of(typ.element_type if isinstance(typ, TensorType) else typ)
            if isinstance(typ, TensorType):  # checked as every path checks
                facts = tensor_facts(typ)
                column = [coerce_tensor(j, inputs[j], typ, facts) for inputs in batch]
                if facts[0] != dtype:
                    column = [np.asarray(c, dtype) for c in column]
            else:
                column = [np.asarray(coerce_argument(j, inputs[j], typ), dtype)
                          for inputs in batch]
            if plan.kinds[arg] == "R":
                values.append(PerRoot.ragged(column))
            else:
                values.append(np.stack(column) if column else np.zeros(0, dtype))
        return values

    def run(self, batch: Sequence[Sequence[Any]]
            ) -> tuple[list[Any], Frame, dict[Any, Schedule]]:
        """The entry's outputs over the batch (rows), its frame and schedules (the
        tape the backward reads; dropped after an inference call, so a batch's
        arrays are freed before the next one allocates)."""
        plan, runner = self.plan, self.runner
        kernels.THREADS[:] = [self.threads, 0]  # 0: set at the first product
        runner.start_call()
        values = self.entry_values(batch)
        frame = Frame(len(batch), np.arange(len(batch)))
        frame.env.update(zip((runner.slot[a] for a in plan.entry.body.block.args), values,
                             strict=True))
        schedules: dict[Any, Schedule] = {}

        def call(op: Any, fr: Frame, phase: str) -> list[Any]:
            schedule = schedules[op] = Schedule(runner)
            return schedule.call(op, fr)

        runner.on_invoke = call
        try:
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                outputs = runner.run_block(frame, plan.entry.body.block, "all")
        finally:
            runner.on_invoke = None  # holds this call's schedules
        return outputs, frame, schedules

    def batch(self, batch: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        if not batch:
            return []
        kinds = [self.plan.kinds[v] for v in self.plan.entry.body.block.last_op.operands]  # type: ignore[union-attr]
        with self.calls:  # (the outputs may be the runner's buffers until copied out)
            outputs, _, _ = self.run(batch)
            return unboxed(outputs, kinds, len(batch))


def unboxed(outputs: list[Any], kinds: list[str], n: int) -> list[tuple[Any, ...]]:
    """Each of the n batch elements' outputs, as native calls return them."""
    columns = []
    for out, kind in zip(outputs, kinds, strict=True):
        if kind != "U" and isinstance(out, np.ndarray) and out.ndim == 1:
            columns.append(out.tolist())  # Python scalars
        elif kind != "U" and isinstance(out, np.ndarray):
            columns.append(list(out.copy()))  # rows of one copy
        else:
            columns.append([unbox(out, kind, k) for k in range(n)])
    return list(zip(*columns, strict=True))


def unbox(out: Any, kind: str, k: int) -> Any:
    """Row k of an output: an array, or a Python scalar as native calls return."""
    value = out[k] if kind != "U" else out
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return value.copy()
    value = np.asarray(value)
    return float(value) if value.dtype.kind == "f" else (
        bool(value) if value.dtype == np.bool_ else int(value))


class BatchedGradFunction(BatchedFunction):
    """`outputs, grads = f(*inputs, into=None)` like `recir.value_and_grad`,
    by the frontier scheduler; `f.batch(batch, into=None)` sums the
    gradients of a whole minibatch in one forward and one backward."""

    def __init__(self, model: Any, loss: int = -1, threads: int | None = 1,
                 native: bool = True):
        super().__init__(model, threads, native, gradients=True)
        self.loss = loss

    def __call__(self, *inputs: Any, into: dict[str, np.ndarray] | None = None  # type: ignore[override]
                 ) -> tuple[tuple[Any, ...], dict[str, np.ndarray]]:
        outputs, grads = self.batch([inputs], into)
        return outputs[0], grads

    def batch(self, batch: Sequence[Sequence[Any]],  # type: ignore[override]
              into: dict[str, np.ndarray] | None = None, threads: int | None = None
              ) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray]]:
        """`threads` (default: the function's) are BLAS threads for large products."""
        grads = accumulators(self.params, into)
        if not batch:
            return [], grads
        with self.calls:  # the backward reads the forward's lanes: one call at a time
            return self.forward_backward(batch, grads, threads), grads

    def forward_backward(self, batch: Sequence[Sequence[Any]], grads: dict[str, np.ndarray],
                         threads: int | None) -> list[tuple[Any, ...]]:
        """`batch`'s outputs, its gradients added into `grads` (holding `calls`)."""
        from recir.batching.grad import Backward

        plan, runner = self.plan, self.runner
        own = self.threads
        self.threads = threads or own
        try:
            outputs, frame, schedules = self.run(batch)
        finally:
            self.threads = own
        args = plan.entry.body.block.args
        ninputs = len(self.input_names)
        targets = {runner.slot[a]: grads[name]
                   for a, name in zip(args[ninputs:], self.params, strict=True)}
        rec_args = plan.rec.body.block.args
        for op in schedules:
            for v, a, through in zip(op.args, rec_args, plan.passthrough, strict=True):
                found = targets.get(runner.slot[v])
                if through and found is not None:
                    if targets.setdefault(runner.slot[a], found) is not found:
                        raise RecirError("error: frontier batching: two calls pass different "
                                         "parameters along the recursion")
        backward = Backward(runner, targets)
        backward.schedules = schedules
        returned = plan.entry.body.block.last_op.operands  # type: ignore[union-attr]
        backward.add(frame, runner.slot[returned[self.loss]], np.ones(len(batch), np.float32))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            backward.block(frame, plan.entry.body.block, "all")
            backward.finish()
        return unboxed(outputs, [plan.kinds[v] for v in returned], len(batch))


def accumulators(params: dict[str, np.ndarray], into: dict[str, np.ndarray] | None
                 ) -> dict[str, np.ndarray]:
    if into is None:
        return {k: np.zeros_like(v, dtype=np.float32) for k, v in params.items()}
    for name, value in params.items():
        acc = into.get(name)
        if (not isinstance(acc, np.ndarray) or acc.dtype != np.float32
                or acc.shape != value.shape):
            raise RecirError(f"error: into['{name}'] must be a float32 array of shape "
                             f"{value.shape}")
    return into


# `auto`: run a call through the frontier scheduler when its work, the
# multiply-adds of the cell's largest product over the batch's invocations,
# reaches AUTO_WORK (one thread) or AUTO_TEAM_WORK (a team, which runs the
# recursive code's trees as its tasks); otherwise the recursive native code.
# A tree's invocations are its nodes, read off its longest structure array
# (1 per input tuple without one); a cell's work is 750 x 300 for TreeLSTM
# h=150, RNTN's bilinear tensor counted 5x: the recursive code runs it at
# about a fifth of a matrix-vector product's rate (RNTN d=25 against TreeRNN
# h=150). The thresholds sit where the frontier scheduler overtook the
# recursive code in trees/s, one thread and two, inference and training, over
# SST dev trees (`python bench/run.py auto`, docs/bench/auto.json). One tree
# of many nodes is the scheduler's too: the work counts nodes, not trees.
AUTO_WORK, AUTO_TEAM_WORK = 30_000_000, 50_000_000
BILINEAR_COST = 5


def cell_work(plan: Plan) -> int:
    """Multiply-adds per invocation of @f's largest product (bilinear weighted)."""
    from recir.dialects import tmath

    work = [int(np.prod(tmath.shape_of(op.matrix))) for op in plan.rec.walk()
            if isinstance(op, tmath.MatvecOp)]
    work += [BILINEAR_COST * int(np.prod(tmath.shape_of(op.tensor)))
             for op in plan.rec.walk() if isinstance(op, tmath.BilinearOp)]
    return max(work, default=0)


class Work:
    """A batch's work for `auto`: invocations x the cell's largest product."""

    def __init__(self, batched: BatchedFunction | None):
        self.batched = batched
        if batched is None:
            self.cell, self.structures = 0, []
            return
        plan = batched.plan
        self.cell = cell_work(plan)
        args = plan.entry.body.block.args[:len(batched.input_names)]
        self.structures = [j for j, a in enumerate(args) if plan.kinds[a] == "R"]

    def of(self, batch: Sequence[Sequence[Any]]) -> int:
        structures = self.structures
        return self.cell * sum(max((len(inputs[j]) for j in structures), default=1)
                               for inputs in batch)

    def mode(self, batch: Sequence[Sequence[Any]], team: bool) -> str:
        least = AUTO_TEAM_WORK if team else AUTO_WORK
        return "frontier" if self.batched is not None and self.of(batch) >= least else \
            "recursive"


class AutoFunction:
    """`batching="auto"`: recursive native code or the frontier scheduler, per call."""

    def __init__(self, native: Any, batched: BatchedFunction | None):
        self.native, self.batched = native, batched
        self.work = Work(batched)

    def choose(self, batch: Sequence[Sequence[Any]]) -> str:
        return self.work.mode(batch, bool(self.native.batch_team))

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        if self.choose([inputs]) == "frontier":
            return self.batched(*inputs)  # type: ignore[misc]
        return self.native(*inputs)

    def batch(self, batch: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        if self.choose(batch) == "frontier":
            return self.batched.batch(batch)  # type: ignore[union-attr]
        return self.native.batch(batch)


# `auto` for training: the same rule and thresholds (`python bench/run.py
# auto` measures both directions).
class AutoGradFunction:
    """`value_and_grad(batching="auto")`: the recursive gradient code or the
    frontier scheduler's batched backward, per batch."""

    def __init__(self, recursive: Any, batched: BatchedGradFunction | None):
        self.recursive, self.batched = recursive, batched
        self.work = Work(batched)
        self.params = recursive.params

    def choose(self, batch: Sequence[Sequence[Any]], threads: int) -> str:
        native = self.recursive.native
        return self.work.mode(batch, threads > 1 and native is not None and
                              bool(native.batch_team))

    def __call__(self, *inputs: Any, into: dict[str, np.ndarray] | None = None) -> Any:
        return self.recursive(*inputs, into=into)

    def batch(self, batch: Sequence[Sequence[Any]], into: dict[str, np.ndarray] | None = None,
              threads: int | None = None) -> Any:
        """`threads` (default: the function's) for whichever code runs."""
        native = self.recursive.native
        threads = threads or (native.threads if native is not None else 1)
        if self.choose(batch, threads) == "frontier":
            return self.batched.batch(batch, into, threads)  # type: ignore[union-attr]
        return self.recursive.batch(batch, into, threads)


MODES = ("recursive", "frontier", "auto")


def compile_batched(model: Any, batching: str, **options: Any) -> Any:
    """`recir.compile(model, batching=...)` for frontier or auto."""
    from recir import pipeline

    if batching not in MODES:
        raise RecirError(f"error: unknown batching '{batching}' (choose from {MODES})")
    threads = options.get("threads")
    if batching == "frontier":
        return BatchedFunction(model, threads)
    try:
        batched: BatchedFunction | None = BatchedFunction(model, threads)
    except RecirError:
        batched = None  # a shape the segmenter cannot batch: recursive only
    return AutoFunction(pipeline.compile(model, **options), batched)


def value_and_grad_batched(model: Any, loss: int, batching: str, **options: Any) -> Any:
    """`recir.value_and_grad(model, batching="frontier" | "auto")`."""
    if batching not in MODES:
        raise RecirError(f"error: unknown batching '{batching}' (choose from {MODES})")
    if batching == "frontier":
        return BatchedGradFunction(model, loss, options.get("threads", 1))
    from recir import gradients as api

    try:
        batched: BatchedGradFunction | None = BatchedGradFunction(
            model, loss, options.get("threads"))
    except RecirError:
        batched = None  # a shape the segmenter cannot batch: recursive only
    return AutoGradFunction(api.value_and_grad(model, loss, **options), batched)
