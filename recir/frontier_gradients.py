"""Gradients of a batch through the frontier-batched IR, natively.

`recir.value_and_grad(model, batching="frontier-ir")`: `synthesize-gradients`
differentiates `@f__post` (the one rules table), `@f__post_bwd` is compiled
with `@f__expand` and `@f__post` by the one backend, and the interpreter's
`Backward` (`frontier.schedule_grad`'s reference) runs the schedule
forward, then `@f__post_bwd` height by height from the roots down, calling
native code. The forward's rows are recomputed by `_bwd`, so `@f__post`
serves as `@f__post_fwd` (`frontier_schedule.NativeCalls`). So far for
models whose expansion makes no floats and whose batched entry is its
schedule alone (TreeRNN, TreeLSTM); the others are an error naming why.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.ir import BlockArgument

from recir.diagnostics import RecirError
from recir.frontier_compile import BATCH, FrontierFunction
from recir.interpreter import find_entry
from recir.interpreter.frontier import Schedule, dtype_of, row_shape
from recir.interpreter.frontier_grad import Backward
from recir.pipeline import run_passes

POST_GRADIENT = "synthesize-gradients{{entry={post} wrapper=false}}"


def value_and_grad_frontier(model: Any, loss: int = -1, *,
                            cache_dir: Path | str | None = None,
                            threads: int | None = 1) -> FrontierGradFunction:
    if threads not in (None, 1):
        raise RecirError("error: batching='frontier-ir' runs on one thread so far")
    module = model.module.clone()
    run_passes(module, BATCH.format(inputs=len(model.input_names)))
    entry = find_entry(module, f"{model.entry}__frontier")
    schedules = [op for op in entry.walk() if op.name == "frontier.schedule"]
    if len(schedules) != 1:
        raise RecirError(f"error: @{entry.sym_name.data} must hold one frontier.schedule")
    post = schedules[0].post.root_reference.data  # type: ignore[attr-defined]
    run_passes(module, POST_GRADIENT.format(post=post))
    return FrontierGradFunction(module, model, loss, cache_dir)


class FrontierGradFunction(FrontierFunction):
    """`batch(items, into)`: each item's outputs, and d(sum of the items'
    losses)/d parameters (added into `into`'s arrays where given)."""

    def __init__(self, module: Any, model: Any, loss: int, cache_dir: Path | str | None):
        self.names = list(model.params)
        post = find_entry(module, f"{model.entry}__frontier")
        schedule = next(op for op in post.walk() if op.name == "frontier.schedule")
        bwd = f"{schedule.post.root_reference.data}_bwd"  # type: ignore[attr-defined]
        super().__init__(module, model.entry, list(model.params.values()), cache_dir,
                         extra=[bwd])
        if self.before is not None:
            raise RecirError(f"error: @{model.entry}__frontier computes before its "
                             "schedule: its gradient is not compiled natively yet")
        ret = self.entry.body.blocks[0].last_op
        assert ret is not None
        outputs = list(self.schedule.outputs)
        if not -len(ret.operands) <= loss < len(ret.operands) or (
                ret.operands[loss] not in outputs):
            raise RecirError(f"error: output {loss} of @{model.entry} is not a loss "
                             "the schedule computes")
        self.loss = outputs.index(ret.operands[loss])  # type: ignore[arg-type]

    def __call__(self, *inputs: Any, into: dict[str, np.ndarray] | None = None
                 ) -> tuple[tuple[Any, ...], dict[str, np.ndarray]]:  # type: ignore[override]
        outputs, grads = self.batch([inputs], into)  # type: ignore[misc]
        return outputs[0], grads

    def batch(self, batch: Sequence[Sequence[Any]],  # type: ignore[override]
              into: dict[str, np.ndarray] | None = None
              ) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray]]:
        grads = into if into is not None else {
            k: np.zeros_like(p) for k, p in zip(self.names, self.params)}
        if not batch:
            return [], grads
        with self.calls:
            return self.run_grad(batch, grads), grads

    def run_grad(self, batch: Sequence[Sequence[Any]], grads: dict[str, np.ndarray]
                 ) -> list[tuple[Any, ...]]:
        args = self.entry_args(batch)
        block = self.entry.body.blocks[0]
        values = dict(zip(block.args, args, strict=True))
        op = self.schedule
        count = len(op.moving)
        inputs = [values[v] for v in op.operands]
        calls: Any = self.native  # an interpreter's call_op, natively
        backward = Backward(Schedule(calls, op, inputs[:count], inputs[count:]))
        floats = [k for k, r in enumerate(op.outputs)
                  if dtype_of(r.type) == np.float32]
        cotangents = []
        for k in floats:
            shape = (len(batch), *row_shape(op.outputs[k].type))
            cotangents.append(np.ones(shape, np.float32) if k == self.loss
                              else np.zeros(shape, np.float32))
        gradients = backward.run(cotangents)
        s = backward.s
        tables = [t[s.inv[:len(batch)]] for t in backward.tables]
        values.update(zip(op.outputs, tables, strict=True))
        first_param = len(block.args) - len(self.params)
        shared = gradients[len(gradients) - len(op.shared):]
        for operand, d in zip(op.shared, shared, strict=True):
            if d is None or not isinstance(operand, BlockArgument):
                continue
            if operand.index >= first_param:
                grads[self.names[operand.index - first_param]] += d
        ret = block.last_op
        assert ret is not None
        results = [values[v] for v in ret.operands]
        return [tuple(r[k] for r in results) for k in range(len(batch))]
