"""`recir.value_and_grad` and `recir.grad`: gradients of a traced model's loss.

The model's module is closed (`capture-outer-refs`), differentiated
(`synthesize-gradients`) and run natively or by the interpreter; the native
code's cache entry is keyed by the traced module and those passes, so a
warm start loads it without differentiating anything. Gradients
land in float32 arrays, one per parameter; `into=` accumulates over calls
(a minibatch) without allocating. Native gradient calls run on a deep stack
from the start (`recir.backend.stack`): a retry after running out of stack
could add part of a gradient twice. `threads` (default: all cores) runs a tree's
independent calls, forward and backward, as tasks. `max_depth` and a call's
`timeout=` mean what they mean for `recir.compile`'s code.

Several Python threads may call one function at once (see
`backend/runtime.py`); a batch's pool workers add into gradient buffers
of that batch's own (`thread_grads`, taken from a list of spare sets and
given back zeroed).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from recir.autodiff.analysis import is_float_tensor
from recir.backend.arguments import batch_element, batch_items, named_element, whole_number
from recir.backend.array_address import data_address
from recir.backend.claims import claimed
from recir.backend.stack import DeepStackPool
from recir.diagnostics import RecirError
from recir.interpreter import find_entry
from recir.pipeline import checked_max_depth, compile_module, gradient_passes, run_passes

ENGINES = ("native", "interpret")


class GradFunction:
    """`outputs, grads = f(*inputs, into=None)`: the model's outputs and
    d loss / d parameter for each parameter (added into `into` if given)."""

    def __init__(self, model: Any, loss: int = -1, engine: str = "native",
                 cache_dir: Path | str | None = None, fuse: bool = True,
                 threads: int | None = None, max_depth: int | None = None):
        if engine not in ENGINES:
            raise RecirError(f"error: unknown engine '{engine}' (choose from {ENGINES})")
        loss, depth = check_loss(loss), check_depth(max_depth, engine)
        if not all(hasattr(model, a) for a in ("params", "entry", "input_names", "module")):
            raise RecirError(f"error: gradients are taken of a traced model's parameters "
                             f"(recir.trace(...).traced), got a {type(model).__name__}")
        check_fixed_inputs(model)
        self.params: dict[str, np.ndarray] = model.params
        self.checked = CheckedBuffers()  # `into`'s last clear arrays
        self.name, self.public = model.entry, len(model.input_names)
        self.engine = engine
        self.entry = f"{model.entry}_grad"
        self.origin, self.passes = model.module, gradient_passes(model.entry, loss)
        self.native = None
        if engine == "native":
            # keyed by the traced module and the passes: a cache hit synthesizes nothing
            # (`max_depth` as `compile` counts: `@f_grad` calls `@f_fwd`, one call more)
            bound = min(depth + 1, MAX_DEPTH) if depth else None
            self.native = compile_module(model.module, self.entry, cache_dir=cache_dir,
                                         fuse=fuse, threads=threads, derive=self.passes,
                                         max_depth=bound)
            self.native.deep_only, self.native.max_depth = True, depth
            inputs = self.native.arguments.inputs
        else:
            inputs = list(find_entry(self.module, self.entry).function_type.inputs)
        # the gradient function takes the model's arguments, then an
        # accumulator for each float tensor among them
        names = [*model.input_names, *self.params]
        self.wrt = [(name, tuple(t.get_shape())) for name, t in
                    zip(names, inputs) if is_float_tensor(t)]
        # `batch`'s threads (batches from several Python threads queue on them)
        self.pool = DeepStackPool()
        self._spare_grads: list[list[dict[str, np.ndarray]]] = []  # `thread_grads`' sets

    @cached_property
    def module(self) -> ModuleOp:
        """The gradient module (synthesized here on first use: a native
        function loaded from the object cache was compiled without it)."""
        module = self.origin.clone()
        run_passes(module, self.passes)
        return module

    def wait(self) -> GradFunction:
        """This function, its native code loaded (`NativeFunction.wait`)."""
        if self.native is not None:
            self.native.wait()
        return self

    @property
    def last_tape_bytes(self) -> int | None:
        """Bytes of activation frames the last native call allocated."""
        return None if self.native is None else int(self.native.last_tape_bytes)

    def __call__(self, *inputs: Any, into: dict[str, np.ndarray] | None = None,
                 timeout: float | None = None
                 ) -> tuple[tuple[Any, ...], dict[str, np.ndarray]]:
        """`timeout` (seconds) stops the call as it stops `compile`'s, with
        part of its gradients added into `into`; native code only (the
        interpreter cannot be stopped)."""
        if timeout is not None and self.native is None:
            raise RecirError("error: timeout= stops native code: engine='interpret' runs "
                             "in Python; use engine='native' for calls with a timeout")
        grads = accumulators(self.params, into, self.checked)
        with claimed(into):
            return self.call(inputs, grads, timeout)

    def call(self, inputs: Sequence[Any], grads: dict[str, np.ndarray],
             timeout: float | None = None) -> tuple[tuple[Any, ...], dict[str, np.ndarray]]:
        """`__call__` with `grads` already checked (`accumulators`)."""
        if len(inputs) != self.public:  # (the native entry counts parameters and buffers too)
            raise RecirError(f"error: @{self.name} takes {self.public} inputs, got {len(inputs)}")
        args = [*inputs, *self.params.values(), *self.gradient_args(grads)]
        if self.native is not None:
            outputs = self.native(*args, timeout=timeout)
        else:
            from recir.interpreter import run_function

            outputs = run_function(self.module, self.entry, args)
        return outputs, grads

    def gradient_args(self, grads: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The gradient function's accumulator arguments: a parameter's adds
        into `grads`, a float input's into a scratch array."""
        return [grads[name] if name in self.params else np.zeros(shape, np.float32)
                for name, shape in self.wrt]

    def batch(self, batch: Sequence[Sequence[Any]], into: dict[str, np.ndarray] | None = None,
              threads: int | None = None) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray]]:
        """Outputs for each input tuple of `batch`, and the summed gradients.
        With `threads` > 1 (default: the function's) the trees run side by
        side: as tasks of one team of the function's threads where it was
        compiled for several (trees and their subtrees balanced by the task
        scheduler), else each on a pool thread adding into its own gradient
        buffers, summed into `into` at the end. With one thread, one at a
        time."""
        batch = batch_items(batch, self.name, self.public)
        if threads is None:
            threads = self.native.threads if self.native is not None else 1
        threads = check_threads(threads)
        grads = accumulators(self.params, into, self.checked)
        with claimed(into):
            return self.batch_into(batch, grads, threads)

    def batch_into(self, batch: Sequence[Sequence[Any]], grads: dict[str, np.ndarray],
                   threads: int) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray]]:
        """`batch` with `grads` checked and held (`claims`)."""
        if threads <= 1 or self.native is None or len(batch) < 2:
            outputs = []
            for k, inputs in enumerate(batch):
                with batch_element(k):
                    outputs.append(self.call(inputs, grads)[0])
            return outputs, grads
        if self.native.team:
            shared = [*self.params.values(), *self.gradient_args(grads)]
            try:
                return self.native.batch([(*inputs, *shared) for inputs in batch]), grads
            except RecirError as error:
                scratch = accumulators(self.params, None)  # (what a call alone adds into)
                raise named_element(error, batch, lambda inputs: self.call(
                    inputs, scratch)) from None
        threads = min(threads, len(batch))  # (a thread without a tree adds nothing)
        own = self.thread_grads(threads)
        try:
            return self.batch_on_pool(threads, own, batch, grads), grads
        finally:
            self._spare_grads.append(own)  # (zeroed: `batch_on_pool`)

    def batch_on_pool(self, threads: int, own: list[dict[str, np.ndarray]],
                      batch: Sequence[Sequence[Any]], grads: dict[str, np.ndarray]
                      ) -> list[tuple[Any, ...]]:
        """`batch`'s trees on `threads` of the function's pool, worker w > 0
        adding into `own[w - 1]`, then into `grads`."""

        def one(worker: int, item: Any) -> tuple[Any, ...]:
            k, inputs = item
            accs = self.gradient_args(grads if worker == 0 else own[worker - 1])
            with batch_element(k):
                return self.native.call_here(  # type: ignore[union-attr]
                    *inputs, *self.params.values(), *accs)

        try:
            outputs = self.pool.map(one, list(enumerate(batch)), threads)
            for name, total in grads.items():
                for worker in own:
                    total += worker[name]
        finally:
            for worker in own:
                for value in worker.values():
                    value.fill(0)
        return outputs

    def thread_grads(self, threads: int) -> list[dict[str, np.ndarray]]:
        """Zeroed gradient buffers of workers 1.. (worker 0 adds into the
        result) for one batch: a spare set of that many, else new ones."""
        spare = self._spare_grads
        for _ in range(len(spare)):
            try:
                own = spare.pop()  # (atomic: batches from several Python threads)
            except IndexError:
                break
            if len(own) == threads - 1:
                return own
        return [{k: np.zeros_like(v) for k, v in self.params.items()}
                for _ in range(threads - 1)]


def check_threads(threads: Any) -> int | None:
    """A `batch(threads=...)`: a positive count (or None: the function's)."""
    if threads is not None and (whole_number(threads) or 0) < 1:
        raise RecirError(f"error: threads must be a positive integer, got {threads!r}")
    return None if threads is None else whole_number(threads)


def check_fixed_inputs(model: Any) -> None:
    """Every float input of a fixed size: a gradient is taken with respect
    to each (the rules for one of open size do not exist: a crash)."""
    types = find_entry(model.module, model.entry).function_type.inputs.data
    for name, typ in zip(model.input_names, types, strict=False):
        if is_float_tensor(typ) and min(typ.get_shape(), default=0) < 0:
            raise RecirError(f"error: input '{name}' ({typ}) is a float tensor of no fixed "
                             "size: gradients are taken with respect to every float input, "
                             "and not yet to one of open size (give it a fixed size)")


MAX_DEPTH = (1 << 63) - 1  # `checked_max_depth`'s largest


def check_depth(max_depth: Any, engine: str = "native") -> int:
    """`max_depth` (0: none), which bounds native code's recursion only."""
    depth = checked_max_depth(max_depth)
    if depth and engine == "interpret":
        raise RecirError("error: max_depth bounds native code's recursion: "
                         "engine='interpret' runs none; use engine='native' with it")
    return depth


def check_loss(loss: Any) -> int:
    """`loss` is an output's index (negative: from the end), the one every
    gradient path reads; its range and type are the model's to check."""
    index = whole_number(loss)
    if index is None:
        raise RecirError(f"error: loss must be an integer, the index of an output, "
                         f"got {loss!r}")
    return index


class CheckedBuffers:
    """A function's last `into` found clear of its parameters and of each
    other (`overlapping`), by weak references (the buffers are the
    caller's to free): the same live array objects lie where they lay (an
    array resized in place moves only with a new shape, which the
    per-buffer checks refuse), and a call with them skips the search."""

    def __init__(self) -> None:
        self.last: tuple[weakref.ref[np.ndarray], ...] = ()

    def clear(self, arrays: tuple[np.ndarray, ...]) -> bool:
        return len(arrays) == len(self.last) and all(
            ref() is array for ref, array in zip(self.last, arrays))

    def keep(self, arrays: tuple[np.ndarray, ...]) -> None:
        self.last = tuple(map(weakref.ref, arrays))


def accumulators(params: dict[str, np.ndarray], into: dict[str, np.ndarray] | None,
                 checked: CheckedBuffers | None = None) -> dict[str, np.ndarray]:
    """`into` once each of its arrays is one native code can add into in
    place (a read-only one, say a file mapped for reading, would fault),
    else zeroed buffers. `checked`: the calling function's last clear ones."""
    if into is None:
        return {k: np.zeros_like(v, dtype=np.float32) for k, v in params.items()}
    if not isinstance(into, dict):
        raise RecirError(f"error: into: expected a dict of gradient buffers by parameter "
                         f"name, got {type(into).__name__}")
    for name, value in params.items():
        if (acc := into.get(name)) is None and name not in into:
            raise RecirError(f"error: into: no gradient buffer for parameter '{name}' "
                             f"(keys: {', '.join(map(str, into)) or 'none'})")
        if (not isinstance(acc, np.ndarray) or acc.dtype != np.float32
                or acc.shape != value.shape or not acc.flags.c_contiguous
                or not acc.flags.writeable):
            raise RecirError(f"error: into: gradient buffer '{name}' must be a C-contiguous "
                             f"float32 array of shape {value.shape}, writable")
    if len(into) != len(params):  # a key that names no parameter: a typo's buffer never filled
        extra = ", ".join(repr(k) for k in into if k not in params)
        raise RecirError(f"error: into: {extra} names no parameter (parameters: "
                         f"{', '.join(params)})")
    arrays = (*params.values(), *map(into.__getitem__, params))
    if checked is not None and checked.clear(arrays):
        return into
    if overlapping(params, into):  # (`into=model.params`: a typo that trains)
        raise shared_memory(params, into)
    if checked is not None:
        checked.keep(arrays)
    return into


def overlapping(params: dict[str, np.ndarray], into: dict[str, np.ndarray]) -> bool:
    """Whether a gradient buffer's memory bounds overlap a parameter's or
    another buffer's (`np.may_share_memory`'s answer; parameters may share:
    tied weights). The bounds sorted by start, each compared with the
    furthest end of each kind before it: a sort per batch, not NumPy's
    dispatch per pair."""
    spans = [span for name, value in params.items()
             for span in (bounds(value, False), bounds(into[name], True)) if span[0] < span[1]]
    spans.sort()
    params_end = buffers_end = 0  # the furthest end of each kind so far
    for start, end, buffer in spans:
        if start < buffers_end or (buffer and start < params_end):
            return True
        if buffer:
            buffers_end = max(buffers_end, end)
        else:
            params_end = max(params_end, end)
    return False


def shared_memory(params: dict[str, np.ndarray], into: dict[str, np.ndarray]) -> RecirError:
    """The error for the first buffer (in the parameters' order) that
    shares memory with its parameter, another one or another buffer."""
    names = list(params)
    for k, name in enumerate(names):
        acc = into[name]
        if np.may_share_memory(acc, params[name]):
            return RecirError(f"error: into: gradient buffer '{name}' is the parameter "
                              "itself: gradients would be added into the weights")
        for other in names:
            if np.may_share_memory(acc, params[other]):
                return RecirError(f"error: into: gradient buffer '{name}' shares memory with "
                                  f"parameter '{other}': gradients would be added into the "
                                  "weights")
        for other in names[k + 1:]:
            if np.may_share_memory(acc, into[other]):
                return RecirError(f"error: into: gradient buffers '{name}' and '{other}' "
                                  "share memory: each would hold the other's gradients too")
    raise AssertionError("no buffer shares memory")  # `overlapping` found one


def bounds(array: np.ndarray, buffer: bool) -> tuple[int, int, bool]:
    """The bytes `array`'s elements lie in, [start, end), and `buffer`."""
    start = data_address(array)
    if array.flags.c_contiguous or not array.size:
        return start, start + array.nbytes, buffer
    low = sum((n - 1) * s for n, s in zip(array.shape, array.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(array.shape, array.strides, strict=True) if s > 0)
    return start + low, start + high + array.itemsize, buffer


def value_and_grad(model: Any, loss: int = -1, **options: Any) -> GradFunction:
    """The model's outputs and the gradient of output `loss` (an f32 scalar)."""
    return GradFunction(model, loss, **options)


def grad(model: Any, loss: int = -1, **options: Any) -> Any:
    """Like `value_and_grad`, returning only the gradients."""
    function = GradFunction(model, loss, **options)

    def gradients(*inputs: Any, into: dict[str, np.ndarray] | None = None,
                  timeout: float | None = None):
        return function(*inputs, into=into, timeout=timeout)[1]

    gradients.function = function  # type: ignore[attr-defined]
    return gradients
