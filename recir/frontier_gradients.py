"""Gradients of a batch through the frontier-batched IR, natively.

`recir.value_and_grad(model, batching="frontier")`: `synthesize-gradients`
differentiates `@f__post` (the one rules table), `@f__post_bwd` is compiled
with `@f__expand` and `@f__post` by the one backend, and the interpreter's
`Backward` (`frontier.schedule_grad`'s reference) runs the schedule forward,
then `@f__post_bwd` height by height from the roots down, calling native code;
where the expansion makes floats (TD-TreeLSTM), `@f__expand_bwd` by depth
after it, and where the batched entry computes before its schedule, that
prefix's own `_bwd` last. Each `_bwd` takes the rows its `_fwd` returned for
it (the products' and transcendentals' outputs, `saving.rebuilds_row`) and
rebuilds the cheap rest; the schedule keeps them per height. A batched `_fwd`
saves nothing in its frame (rows cannot go in one), so it is compiled without
it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, TensorType
from xdsl.ir import BlockArgument

from recir.autodiff.analysis import is_float
from recir.backend import stack
from recir.backend.arguments import batch_items, named_element
from recir.backend.claims import claimed
from recir.backend.frontier_schedule import FORWARD
from recir.backend.frontier_summary import RowFacts, through_summary
from recir.backend.native_backward import NativeBackward
from recir.backend.native_schedule import NativeSchedule
from recir.backend.repeat_call import RepeatGradient
from recir.diagnostics import RecirError, emit_error
from recir.dialects import tape
from recir.dialects.row_types import is_rows
from recir.frontier_compile import (BEFORE, NO_TIMEOUT, FrontierFunction, origin, per_element,
                                    split_entry)
from recir.gradients import CheckedBuffers, accumulators, check_loss, check_threads
from recir.interpreter import find_entry
from recir.interpreter.frontier import dtype_of, row_shape
from recir.interpreter.frontier_grad import is_float_tensor
from recir.pipeline import (FRONTIER, FRONTIER_GRADIENT, collector_paused, resolve_threads,
                            run_passes)

BACKWARD = "_bwd"


def check_loss_output(model: Any, loss: Any) -> int:
    """`loss` as the index of an f32 output of the traced model, checked
    before anything compiles (under `auto` a frontier compile's error only
    leaves the recursive code, which compiles at its first batch)."""
    loss = check_loss(loss)
    outputs = find_entry(model.module, model.entry).function_type.outputs.data
    if not -len(outputs) <= loss < len(outputs):
        raise RecirError(f"error: output {loss} of @{model.entry} is not a loss: it has "
                         f"{len(outputs)} outputs")
    typ = outputs[loss]
    if not is_float(typ) or (isinstance(typ, TensorType) and not is_rows(typ)):
        raise RecirError(f"error: output {loss} of @{model.entry} is {typ}, not an f32 "
                         "loss (or rows of one, summed) to differentiate")
    return loss


@collector_paused()
def value_and_grad_frontier(model: Any, loss: int = -1, *,
                            cache_dir: Path | str | None = None,
                            threads: int | None = None) -> FrontierGradFunction:
    loss = check_loss_output(model, loss)
    batching = FRONTIER.format(inputs=len(model.input_names))
    made_of, threads = origin(model, batching), resolve_threads(threads)

    def differentiated() -> tuple[Any, dict[str, Any]]:
        module = model.module.clone()
        run_passes(module, batching)
        schedule, before = split_entry(find_entry(module, f"{model.entry}__frontier"))
        names = [schedule.post.root_reference.data]
        if makes_floats(module, schedule):  # TD-TreeLSTM's states grow top down
            names.append(schedule.expand.root_reference.data)
        if before is not None:  # the entry's ops before the schedule, differentiated too
            before.sym_visibility = None
            module.body.blocks[0].add_op(before)
            names.append(before.sym_name.data)
        gradients = ",".join(FRONTIER_GRADIENT.format(name) for name in names)
        run_passes(module, gradients)
        for name in names:
            without_frame(find_entry(module, f"{name}{FORWARD}"))
        return module, {"gradients": gradients, "backwards": [
            f"{name}{suffix}" for name in names for suffix in (FORWARD, BACKWARD)]}

    # the summary is keyed by what the gradient's IR is made from: the traced
    # IR, the batching passes and the gradient passes' template (the functions
    # they run on follow from the batched IR)
    return through_summary(
        cache_dir, f"{made_of}\0{FRONTIER_GRADIENT}", model.entry, differentiated,
        lambda module, facts, found: FrontierGradFunction(
            module, model, loss, cache_dir, list(found["backwards"]), threads, made_of,
            str(found["gradients"]), facts))


def without_frame(forward: func.FuncOp) -> None:
    """A batched `_fwd` returns its saved rows, not a frame: the frame its
    `tape.new` makes holds nothing (its `_bwd`, given None, reads none)."""
    ret = forward.body.blocks[0].last_op
    assert ret is not None
    new = ret.operands[-1].owner
    if not isinstance(new, tape.NewOp) or len(list(new.frame.uses)) != 1:
        raise emit_error(forward, "a batched function's forward saves values in a "
                         "frame, which native code does not keep")
    ret.operands = ret.operands[:-1]
    new.detach()
    new.erase()
    outputs = forward.function_type.outputs.data[:-1]
    forward.function_type = FunctionType.from_lists(forward.function_type.inputs.data,
                                                    outputs)


def makes_floats(module: Any, schedule: Any) -> bool:
    """Whether the expansion moves or makes f32 values (`Backward.top_down`)."""
    expand = find_entry(module, schedule.expand.root_reference.data).function_type
    moving = expand.inputs.data[:1 + len(schedule.moving)]
    return any(is_float_tensor(t) for t in (*moving, *expand.outputs.data))


class FrontierGradFunction(FrontierFunction):
    """`batch(items, into)`: each item's outputs, and d(sum of the items'
    losses)/d parameters (added into `into`'s arrays where given)."""

    def __init__(self, module: Any, model: Any, loss: int, cache_dir: Path | str | None,
                 backwards: list[str], threads: int = 1, origin: str | None = None,
                 later: str = "", facts: dict[str, RowFacts] | None = None):
        self.names = list(model.params)
        self.checked = CheckedBuffers()  # `into`'s last clear arrays
        super().__init__(module, model.entry, list(model.params.values()), cache_dir,
                         extra=backwards, threads=threads, forward=False, origin=origin,
                         later=later, facts=facts)
        self.prefix = f"{model.entry}__frontier{BEFORE}"
        ret = self.entry.body.blocks[0].last_op
        assert ret is not None
        outputs = list(self.schedule.outputs)
        if not -len(ret.operands) <= loss < len(ret.operands) or (
                ret.operands[loss] not in outputs):
            raise RecirError(f"error: output {loss} of @{model.entry} is not a loss "
                             "the schedule computes")
        self.loss = outputs.index(ret.operands[loss])  # type: ignore[arg-type]
        self.backward_facts: Any = None  # `Backward.facts`, from the first call
        # the float outputs' row shapes (their cotangents), and per shared
        # operand the parameter whose buffer in `grads` its gradient is added
        # straight into, where there is no prefix to differentiate (no
        # batch-sized copy to add)
        self.float_rows = [(k, row_shape(r.type)) for k, r in enumerate(outputs)
                           if dtype_of(r.type) == np.float32]
        block = self.entry.body.blocks[0]
        first_param = len(block.args) - len(self.params)
        prefixed = f"{self.prefix}{BACKWARD}" in self.compiled
        self.direct = [self.names[v.index - first_param] if not prefixed and isinstance(
            v, BlockArgument) and v.index >= first_param else None for v in self.schedule.shared]

    @functools.cached_property
    def before_fwd(self) -> Any:
        """The prefix's `_fwd`, compiled; None where there is no prefix."""
        return self.native.functions.get(f"{self.prefix}{FORWARD}")

    @functools.cached_property
    def before_bwd(self) -> Any:
        return self.native.functions.get(f"{self.prefix}{BACKWARD}")

    def __call__(self, *inputs: Any, into: dict[str, np.ndarray] | None = None,
                 timeout: float | None = None
                 ) -> tuple[tuple[Any, ...], dict[str, np.ndarray]]:  # type: ignore[override]
        if timeout is not None:  # (`recursive`'s and `auto`'s calls take one)
            raise RecirError(NO_TIMEOUT)
        outputs, grads = self.batch([inputs], into)  # type: ignore[misc]
        return outputs[0], grads

    def batch(self, batch: Sequence[Sequence[Any]],  # type: ignore[override]
              into: dict[str, np.ndarray] | None = None, threads: int | None = None
              ) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray]]:
        """`threads`: accepted as the recursive gradient's `batch` takes it;
        the products' team is the one the function was compiled for."""
        batch = batch_items(batch, self.original.sym_name.data)
        threads = check_threads(threads)
        grads = accumulators(dict(zip(self.names, self.params, strict=True)), into,
                             self.checked)
        if not batch:
            return [], grads
        with claimed(into), self.calls:
            try:
                return stack.with_room(lambda: self.run_grad(batch, grads)), grads
            except RecirError as error:
                scratch = accumulators(dict(zip(self.names, self.params, strict=True)), None)
                raise named_element(error, batch, lambda inputs: stack.with_room(
                    lambda: self.run_grad([inputs], scratch))) from None

    def run_grad(self, batch: Sequence[Sequence[Any]], grads: dict[str, np.ndarray]
                 ) -> list[tuple[Any, ...]]:
        args = self.entry_args(batch)
        op, flow = self.schedule, self.flow
        count = flow.moving
        before_kept: tuple[Any, ...] = ()  # the prefix's saved rows, for its `_bwd`
        before: tuple[Any, ...] = ()
        if self.before_fwd is not None:
            outs = self.before_fwd(args)
            before, before_kept = outs[:flow.count], outs[flow.count:]
        inputs = flow.inputs(args, before)
        cotangents = [np.ones((len(batch), *shape), np.float32) if k == self.loss else None
                      for k, shape in self.float_rows]  # None: zeros
        into = [None if name is None else grads[name] for name in self.direct]
        found = None if self.again is None else self.again.repeat_gradient(
            inputs[:count], inputs[count:], flow.wanted, cotangents, into)
        if found is None:  # not a call to repeat: the schedule's, its plans for the next
            self.again, calls = None, self.native  # (calls: an interpreter's call_op, natively)
            schedule = NativeSchedule(calls, op, inputs[:count], inputs[count:], self.facts)
            backward = NativeBackward(schedule, self.backward_facts)
            self.facts, self.backward_facts = schedule.facts, backward.facts  # found once
            gradients = backward.run(cotangents, into)
            s = backward.s
            found = ([t[s.inv[:len(batch)]] if k in flow.wanted else None
                      for k, t in enumerate(backward.tables)], gradients)
            self.again = RepeatGradient.after(schedule, backward)
        tables, gradients = found
        if self.before_bwd is not None:  # the schedule's operands' gradients, back
            block = self.entry.body.blocks[0]
            first_param = len(block.args) - len(self.params)
            accumulators = [grads[self.names[a.index - first_param]] if a.index >= first_param
                            else np.zeros_like(v) for a, v in zip(block.args, args)
                            if is_float_tensor(a.type)]
            cotangents = [d for d in gradients if d is not None]
            self.before_bwd((*before_kept, None, *cotangents, *args, *accumulators))
        return per_element(flow.results(args, inputs, tables), len(batch), flow.fresh)
