"""Calling compiled code: NumPy arrays in, NumPy arrays and scalars out.

Every call goes through one of the function's two entry points, with its
arguments packed in 8-byte fields (`arguments.py`): `@f__packed`, one call
on this thread, or `@f__team`, one call or a batch on a team (`teams.py`).
ctypes releases the GIL for the call. Whether a call runs on a team, and how
deep it spawns, `policy.py` computes from the call's size: the same inputs
always get the same schedule. A call that may be retried (inference) runs on
this thread's stack, and again on a deep one if its recursion ran out; one
that may not (gradients: a retry would add some gradients twice) starts on a
deep stack.
"""

from __future__ import annotations

import array
import ctypes
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import FunctionType

from recir.backend import interrupts, policy, settings, stack
from recir.backend.arguments import (Arguments, batch_element, batch_items, named_element,
                                     rows_of)
from recir.backend.background import Deferred
from recir.backend.batch_fields import batch_fields
from recir.backend.contexts import Context, failed_check, lone_context
from recir.backend.engine import Engine
from recir.backend.outer_logs import NO_LOGS, OuterLogs
from recir.backend.tape_pool import TAPES
from recir.backend.teams import KeptContexts, run_team
from recir.backend.watchdog import call_within
from recir.diagnostics import RecirError
from recir.passes.native_context import (
    ERROR_CHECK,
    ERROR_DEPTH,
    ERROR_HEAP,
    ERROR_INTERRUPT,
    ERROR_MEMORY,
    ERROR_STACK,
    ERROR_TIMEOUT,
)
from recir.passes.entry_points import PACKED_ENTRY, TEAM_ENTRY

Once = Callable[[bool], tuple[Context, Any]]  # a call, on a switched deep stack if True


class NativeFunction:
    """A compiled entry point; call it like `TracedModel.run`."""

    def __init__(self, engine: Engine | Deferred[Engine], name: str, signature: FunctionType,
                 sites: Sequence[str], params: Sequence[np.ndarray] = (), threads: int = 1,
                 copied: Sequence[int] = (), call_work: int = 0,
                 logged: Sequence[int] = (), larger_share: float = 0.5,
                 cache_dir: Path | None = None):
        """`copied`: the arguments (gradient buffers) that each thread of a
        team adds into its own copy of (`adjoint.thread_copy`); `call_work`:
        the estimated work of one recursive call (`work_estimate.work`), 0
        where unknown; `logged`: the gradient buffers whose outer products
        each thread logs, added after the call (`adjoint.log_reserve`);
        `larger_share`: of a call's work, its largest recursive call's
        (`work_estimate.larger_share`), which sets how deep calls spawn;
        `cache_dir`: the function's cache folder, where `recir.tune` kept
        the costs and the kernels it runs are kept."""
        self.made, self.name, self.sites = engine, name, list(sites)
        self.arguments = arguments = Arguments(name, signature, params)
        self.deep_only = False
        self.threads = threads
        self.last_tape_bytes = 0
        self.call_work, self.larger_share = call_work, larger_share
        # the public inputs whose length sizes a call (for `team_size`)
        self.sized = [i for i, sh in enumerate(arguments.shapes[:arguments.public])
                      if sh and sh[0] and sh[0][0] < 0] if call_work and threads > 1 else []
        self.copied = copied
        self.loading = threading.Lock()
        self.logged = [(k, *arguments.shapes[k][0]) for k in logged]  # (argument, rows, cols)
        # the machine's costs, from which each call's schedule follows (`policy.py`):
        # those `recir.tune` kept in the function's cache folder
        self.costs, self.folder = policy.costs(cache_dir), cache_dir
        # by team size, where a logged outer product splits across it (`outer_logs`)
        self.team_works: dict[int, int] = {}
        self.fixed_budget = policy.fixed_budget()
        self.max_depth = 0  # the limit `max_depth=` gave, which its error names; 0: none
        interrupts.install()  # Ctrl-C stops native calls

    # what is found in the code, once it is there (`wait`)
    LOADED = frozenset(("engine", "packed_address", "packed", "team", "contexts"))

    def __getattr__(self, name: str) -> Any:
        if name not in NativeFunction.LOADED or "engine" in vars(self):
            raise AttributeError(name)
        return getattr(self.wait(), name)

    def wait(self) -> NativeFunction:
        """This function, its code loaded: `compile` returns while LLVM may
        still be at work (`background.Deferred`). Raises what the compile
        raised."""
        with self.loading:
            if "engine" not in vars(self):
                self.load(self.made.get() if isinstance(self.made, Deferred) else self.made)
        return self

    def load(self, engine: Engine) -> None:
        name = self.name
        self.packed_address = engine.address(f"{name}{PACKED_ENTRY}")
        self.packed = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.packed_address)
        # code with tasks has a team entry; code without (no independent calls) runs as is
        self.team = engine.lookup(f"{name}{TEAM_ENTRY}") if self.threads > 1 else 0
        self.contexts = KeptContexts(len(self.arguments.inputs), self.copied if self.team
                                     else (), self.arguments.shapes)
        self.made = self.engine = engine  # last: every entry point is found

    def __call__(self, *inputs: Any, timeout: float | None = None) -> tuple[Any, ...]:
        """The outputs for `inputs`; with a `timeout` (seconds), on one thread
        and stopped with a RecirError once that has passed."""
        if timeout is not None:
            return call_within(self, inputs, timeout)
        threads, budget = self.schedule(inputs)
        keep: list[Any] = []
        args, results = self.arguments.prepare(inputs, keep)
        return self.arguments.outputs_of(results, self.run(args, threads, budget))

    def schedule(self, inputs: Sequence[Any]) -> tuple[int, int]:
        """(threads, spawn budget) of a call: one thread for code without
        tasks and for a call too small to pay for a team."""
        size = self.size(inputs) if self.team else None
        work = None if size is None else size * self.call_work
        if not self.team or not policy.team_pays(work, self.threads, self.costs):
            return 1, 0
        budget = policy.call_budget(work, self.threads, self.costs, self.larger_share) if \
            self.fixed_budget is None else self.fixed_budget
        return (self.threads if budget else 1), budget

    def team_size(self, items: Sequence[Sequence[Any]]) -> int:
        """This function's thread count, or 1 for calls whose estimated work
        does not pay for a team (`policy.team_pays`; a team where it cannot
        be estimated)."""
        return self.threads_for(self.sizes(items))

    def threads_for(self, sizes: list[int] | None) -> int:
        if sizes is None:
            return self.threads
        work = sum(sizes) * self.call_work  # the calls are the team's tasks
        return self.threads if policy.team_pays(work, self.threads, self.costs,
                                                len(sizes)) else 1

    def sizes(self, items: Sequence[Sequence[Any]]) -> list[int] | None:
        """Each call's `size`; None where one cannot be told."""
        if not self.team:
            return None
        sizes = [self.size(inputs) for inputs in items]
        return None if None in sizes else sizes  # type: ignore[return-value]

    def size(self, inputs: Sequence[Any]) -> int | None:
        """A call's size, the length of its longest variably sized input (a
        tree's node count); None where that cannot be told."""
        sized = self.sized
        if not sized or len(inputs) <= sized[-1]:
            return None  # (the wrong count: `prepare` says so)
        longest = 0
        for i in sized:
            x = inputs[i]
            if type(x) is np.ndarray and x.ndim and x.shape[0] > longest:
                longest = x.shape[0]
        return longest

    def call_here(self, *inputs: Any) -> tuple[Any, ...]:
        """One call on this thread, which must have a deep stack (a pool
        worker), with one thread: the caller runs several at once."""
        keep: list[Any] = []
        args, results = self.arguments.prepare(inputs, keep)
        ctx, returned = self.alone(args)
        self.last_tape_bytes = ctx.tape_bytes
        self.raise_error(ctx)
        return self.arguments.outputs_of(results, returned)

    def run(self, args: list[Any], threads: int, budget: int, once: Once | None = None
            ) -> Any:
        """Runs `once` (default: the call of `args`, on a team of `threads`
        spawning `budget` levels down where threads > 1, else alone) with
        the stack the call needs, and raises its error: inference on this
        thread's stack, again on a deep one if the recursion ran out there;
        gradients on a deep stack from the start (this thread's switched
        stack, else the deep-stack worker's, which lasts: it may form teams)."""
        if once is None:
            once = (lambda switch: self.alone(args, switch)) if threads < 2 else (
                lambda switch: self.one_on_team(args, threads, budget, switch))
        if not self.deep_only:
            ctx, returned = once(False)
        if self.deep_only or ctx.error == ERROR_STACK:
            ctx, returned = once(True) if stack.SWITCHING else \
                stack.DEEP_WORKER.run(lambda: once(False))
        self.last_tape_bytes = ctx.tape_bytes
        self.raise_error(ctx)
        return returned

    def alone(self, args: list[Any], switch: bool = False,
              watch: Callable[[Context], Callable[[], None]] | None = None
              ) -> tuple[Context, Any]:
        """One call of `@f__packed` on this thread (on its switched deep stack
        if `switch`), on a context that spawns nothing; `watch(ctx)` is
        called before it and what it returns after (`watchdog.py`)."""
        deep = stack.switched_stack() if switch else None
        ctx = lone_context(deep.limit if deep else stack.stack_limit(), self.deep_only)
        logs = self.outer_logs([ctx])
        slot = self.arguments.result_slot()
        data = array.array("Q", [ctypes.addressof(ctx), *self.arguments.fields(args),
                                 ctypes.addressof(slot)])
        address = data.buffer_info()[0]
        unwatch = watch(ctx) if watch is not None else None
        key = interrupts.begin(ctx)
        try:
            if deep is None:
                self.packed(address)
            else:
                deep.call(self.packed_address, address)
        finally:
            interrupts.end(key)
            if unwatch is not None:
                unwatch()
            TAPES.release(ctx)
            logs.add_into(args)
        return ctx, slot.value

    def one_on_team(self, args: list[Any], threads: int, budget: int, switch: bool
                    ) -> tuple[Context, Any]:
        """One call on a team of `threads`: `@f__team` with one record."""
        slot = self.arguments.result_slot()
        # `run_team`'s fields, then one record: its context's first (an
        # array.array takes a call's fields faster than NumPy)
        data = array.array("Q", [0, 0, 1, 0, *self.arguments.fields(args),
                                 ctypes.addressof(slot)])

        def payload(contexts: Any) -> Any:
            data[3] = contexts.address
            return data

        return self.on_team(args, threads, budget, switch, payload), slot.value

    def on_team(self, args: list[Any], threads: int, budget: int, switch: bool,
                payload: Callable[[Any], Any]) -> Context:
        """`@f__team` on a team of `threads` with `payload(contexts)` (the
        fields `run_team` takes), on a set of kept contexts; `args` are the
        first call's (its gradient buffers, which every call of a batch
        adds into)."""
        contexts = self.contexts.take(threads, budget, args, self.deep_only)
        logs = self.outer_logs(contexts.views)
        key = interrupts.begin(contexts)
        try:
            return run_team(self.team, contexts, payload(contexts), switch)
        finally:
            interrupts.end(key)
            logs.add_into(args)
            self.contexts.give_back(contexts, self.deep_only)

    def batch(self, items: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """The outputs of each input tuple of `items`: on a team, each call is
        a task of one team, load-balanced with the tasks the calls spawn
        (`policy.batch_budget` says how deep; at 0 the calls spawn nothing:
        calls of like size balance a team by themselves), the largest
        spawned first (`policy.spawn_order`); otherwise one at a time. Calls
        that add into gradient buffers must all be given the same buffers."""
        items = batch_items(items, self.name)
        if not self.team or len(items) < 2:
            return [self.element(k, inputs) for k, inputs in enumerate(items)]
        try:
            return self.on_team_batch(items)
        except RecirError as error:
            if self.contexts.copied or self.logged:  # calls that add: the caller names it
                raise
            raise named_element(error, items, lambda inputs: self(*inputs)) from None

    def on_team_batch(self, items: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """`batch` of two calls or more, on a team."""
        arguments, keep, count = self.arguments, [], len(items)
        fields, first, sizes = self.batch_fields(items, keep)
        threads = self.threads_for(sizes)
        works = None if sizes is None else [n * self.call_work for n in sizes]
        budget = self.fixed_budget if self.fixed_budget is not None else \
            policy.batch_budget(works, count, threads, self.costs, self.larger_share)
        copied = self.contexts.copied
        if copied and (fields[:, copied] != fields[0, copied]).any():
            raise RecirError(f"error: the calls of a batch of @{self.name} must add "
                             f"into the same gradient buffers")
        # every call's results in one buffer per result, a call's at its row;
        # a scalar the entry returns goes to `slots`, the others through pointers
        restype = arguments.restype
        slots = (restype * count)() if restype is not None else None
        results = [np.empty((count, *kind), np.float32) if type(kind) is tuple else
                   slots if slots is not None else (kind * count)()
                   for kind in arguments.out_kinds]
        rows = [rows_of(results[k], count) for k in arguments.result_fields]
        if slots is not None:
            rows.append(rows_of(slots, count))
        # a record per call, as `one_on_team`'s: its context, fields, results;
        # the largest first (`policy.spawn_order`), after `run_team`'s fields
        order = np.array(policy.spawn_order(works, count))
        width = 1 + fields.shape[1] + len(rows)
        data = np.empty(3 + count * width, np.uint64)
        data[2] = count
        records = data[3:].reshape(count, width)
        records[:, 1:1 + fields.shape[1]] = fields.view(np.uint64)[order]
        for j, (base, stride) in enumerate(rows):
            records[:, 1 + fields.shape[1] + j] = base + stride * order

        def payload(contexts: Any) -> np.ndarray:
            records[:, 0] = contexts.address
            return data

        self.run(first, threads, budget, lambda switch: (self.on_team(
            first, threads, budget, switch, payload), None))
        return list(zip(*map(list, results), strict=True))

    def element(self, k: int, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """A batch's call of element `k` alone; its error names the element."""
        with batch_element(k):
            return self(*inputs)

    def batch_fields(self, items: Sequence[Sequence[Any]], keep: list[Any]
                     ) -> tuple[np.ndarray, list[Any], list[int] | None]:
        """Every call's fields (a row each), the first call's arguments and
        each call's `size` (None where not told): laid out by columns
        (`batch_fields`), else call by call (`prepare` checks each)."""
        laid = batch_fields(self.arguments, items, keep, self.folder)
        if laid is not None:
            fields, longest, first = laid
            return fields, first, longest.tolist() if self.sized else None
        prepared = []
        for k, inputs in enumerate(items):
            with batch_element(k):
                prepared.append(self.arguments.prepare(inputs, keep, outputs=False)[0])
        fields = np.array([self.arguments.fields(args) for args in prepared], np.uint64)
        return fields.view(np.int64), prepared[0], self.sizes(items)

    def outer_logs(self, contexts: Sequence[Context]) -> OuterLogs:
        """The logs of a call's deferred outer products, one set per context:
        added as the call's team ends, its workers still spinning (a warm
        team's start, as a batched function's products pay)."""
        if not self.logged:
            return NO_LOGS
        work = self.team_works.get(len(contexts))
        if work is None:
            work = self.team_works[len(contexts)] = policy.team_min_work(
                len(contexts), self.costs, warm=True)
        return OuterLogs(contexts, len(self.arguments.inputs), self.logged, work, self.folder)

    def raise_error(self, ctx: Context) -> None:
        if ctx.error == ERROR_STACK:  # the site names the function that overflowed
            where = self.sites[ctx.site] if 0 <= ctx.site < len(self.sites) else (
                f"error: recursion in @{self.name} is too deep for the native stack")
            sizes = f"{stack.DEEP_STACK_BYTES >> 20} MiB"
            worker = settings.current().worker_stack_bytes
            if self.team and worker != stack.DEEP_STACK_BYTES:  # (its tasks' stacks)
                sizes += f"; a team worker's {worker >> 10} KiB"
            raise RecirError(f"{where} ({sizes})")
        if ctx.error == ERROR_CHECK:
            raise RecirError(f"{failed_check(self.sites[ctx.site], ctx)} (at run time, in native "
                             f"@{self.name})")
        if ctx.error == ERROR_MEMORY:
            raise RecirError(f"error: native @{self.name} ran out of memory for its "
                             f"gradient tape after {ctx.tape_bytes >> 20} MiB")
        if ctx.error == ERROR_INTERRUPT:
            raise KeyboardInterrupt(f"native @{self.name} was interrupted")
        if ctx.error == ERROR_TIMEOUT:  # (`call_within` names the timeout)
            raise RecirError(f"error: native @{self.name} ran past its timeout")
        if ctx.error == ERROR_DEPTH:  # the site names the recursion and its line
            where = self.sites[ctx.site] if 0 <= ctx.site < len(self.sites) else (
                f"error: recursion in @{self.name} is deeper than max_depth")
            raise RecirError(f"{where}={self.max_depth}")
        if ctx.error == ERROR_HEAP:
            raise RecirError(f"error: native @{self.name} ran out of memory for a "
                             f"temporary buffer")
        if ctx.error != 0:
            raise RecirError(f"error: native @{self.name} failed with code {ctx.error}")
