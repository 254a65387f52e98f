"""Calling compiled code: NumPy arrays in, NumPy arrays and scalars out.

The native entry takes `(ctx, inputs..., tensor results..., scalar slots...)`:
ctx is `{i64 stack_limit, i32 error, i32 site, tape arena...}`; f32 tensors are pointers to
contiguous data; a structure array (`tensor<?xi32>`) is a pointer to
`{i64 length, ptr data}`, so generated code can check every index read from
it; tensor results are written into arrays allocated here. ctypes releases
the GIL for the call.

Several Python threads may call one function at once, so what a call
writes is its own: its arguments, results and contexts (a team's are kept
for a later call, but each set serves one call at a time: taken from
`kept_contexts` and given back, a list's pop and append being atomic), and
with them each team thread's gradient copies and tables (`tables`), tape
arena and outer-product logs (from the locked pools of `tape_pool.py`). What
calls share is read-only after `__init__` (entries, bound parameters,
shapes) or a cache whose entries are immutable (`last`). Whether a call
runs on a team, and how deep it spawns, `policy.py` computes from the call's
size: the same inputs always get the same schedule.
Teams with tasks are formed only by threads that live as long as the
process: others hand the team's start to a leader (`stack.TeamLeaders`
says why).
"""

from __future__ import annotations

import array
import ctypes
import weakref
from collections.abc import Sequence
from threading import get_ident
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, FunctionType, IntegerType, TensorType
from xdsl.ir import Attribute

from recir.backend import interrupts, policy, stack
from recir.backend.array_address import data_address
from recir.backend.contexts import (
    NO_ERROR,
    NO_TASKS,
    Context,
    lone_context,
    release_kept,
    team_contexts,
)
from recir.backend.engine import Engine, openmp, openmp_entry
from recir.backend.interrupts import RUNNING
from recir.backend.outer_logs import NO_LOGS, OuterLogs
from recir.backend.tape_pool import TAPES
from recir.backend.watchdog import call_within
from recir.diagnostics import RecirError
from recir.interpreter import coerce_argument
from recir.passes.native_context import (
    ERROR_CHECK,
    ERROR_DEPTH,
    ERROR_HEAP,
    ERROR_INTERRUPT,
    ERROR_MEMORY,
    ERROR_STACK,
    ERROR_TIMEOUT,
)
from recir.passes.tasks import LAUNCH_ENTRY, PACKED_ENTRY


class ArrayDescriptor(ctypes.Structure):
    _fields_ = [("length", ctypes.c_int64), ("data", ctypes.c_void_p)]


def c_scalar(typ: Attribute) -> type:
    if isinstance(typ, Float32Type):
        return ctypes.c_float
    if isinstance(typ, IntegerType):
        return {1: ctypes.c_bool, 8: ctypes.c_int8, 32: ctypes.c_int32,
                64: ctypes.c_int64}[typ.width.data]
    raise RecirError(f"error: the native backend cannot pass a value of type {typ}")


def is_tensor(typ: Attribute) -> bool:
    return isinstance(typ, TensorType)


class NativeFunction:
    """A compiled entry point; call it like `TracedModel.run`."""

    def __init__(self, engine: Engine, name: str, signature: FunctionType,
                 sites: Sequence[str], params: Sequence[np.ndarray] = (), threads: int = 1,
                 copied: Sequence[int] = (), call_work: int = 0,
                 logged: Sequence[int] = ()):
        """`copied`: the arguments (gradient buffers) that each thread of a
        team adds into its own copy of (`adjoint.thread_copy`); `call_work`:
        the estimated work of one recursive call (`pipeline.call_work`), 0
        where unknown; `logged`: the gradient buffers whose outer products
        each thread logs, added after the call (`adjoint.log_reserve`)."""
        self.engine, self.name, self.sites = engine, name, list(sites)
        self.inputs = list(signature.inputs)
        self.outputs = list(signature.outputs)
        self.params = [np.ascontiguousarray(p, dtype=np.float32) for p in params]
        self.deep_only = False
        self.threads = threads
        self.last_tape_bytes = 0
        self.shapes = [(tuple(t.get_shape()), np.dtype(np.int32 if isinstance(
            t.element_type, IntegerType) else np.float32)) if is_tensor(t) else None
            for t in self.inputs]
        # per argument: whether it is an i32 scalar, and how `prepare` passes
        # it; per output: its shape (a tensor) or its ctype
        self.passing = [passing(sh, isinstance(t, IntegerType) and t.width.data == 32)
                        for sh, t in zip(self.shapes, self.inputs, strict=True)]
        self.sized_count = sum(kind == SIZED for kind, _, _ in self.passing)
        self.call_work = call_work
        # the public inputs whose length sizes a call (for `team_size`)
        public = self.public = len(self.inputs) - len(self.params)
        self.sized = [i for i, sh in enumerate(self.shapes[:public])
                      if sh and sh[0] and sh[0][0] < 0] if call_work and threads > 1 else []
        self.out_kinds = [tuple(t.get_shape()) if is_tensor(t) else c_scalar(t)
                          for t in self.outputs]
        scalars = [t for t in self.outputs if not is_tensor(t)]
        self.returns_one = len(scalars) == 1
        argtypes = [ctypes.c_void_p] * (1 + len(self.inputs) + len(self.outputs)
                                        - (1 if self.returns_one else 0))
        for i, typ in enumerate(self.inputs):
            if not is_tensor(typ):
                argtypes[1 + i] = c_scalar(typ)
        # the public inputs `fields` packs (scalars); pointers pass as they are
        self.scalar_inputs = [i for i, typ in enumerate(self.inputs[:public])
                              if not is_tensor(typ)]
        restype = c_scalar(scalars[0]) if self.returns_one else None
        prototype = ctypes.CFUNCTYPE(restype, *argtypes)
        self.function = prototype(engine.address(name))
        self.argtypes, self.restype = argtypes, restype
        # code with tasks has a team entry; code without (no independent calls) runs as is
        team = f"{name}__team"
        self.team = engine.address(team) if threads > 1 and engine.has(team) else 0
        self.batch_team = engine.address(f"{name}__batch") if self.team else 0
        # the same team call taking its arguments as the entry does (`@f__launch`),
        # on contexts kept for the next call
        self.launch = ctypes.CFUNCTYPE(restype, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32,
                                       *argtypes[1:])(
            engine.address(f"{name}{LAUNCH_ENTRY}")) if self.team else None
        # team contexts free for the next call, by team size
        self.kept_contexts: dict[int, list[Any]] = {}
        weakref.finalize(self, release_kept, self.kept_contexts)
        # one-thread gradient code: an entry taking packed arguments, to start
        # on a switched stack
        packed = f"{name}{PACKED_ENTRY}"
        self.packed = engine.address(packed) if not self.team and engine.has(packed) else 0
        # per argument: the last array of fixed shape passed, its shape, address and dtype
        self.last: list[tuple[np.ndarray, tuple[int, ...], int, np.dtype] | None] = [None] * len(
            self.inputs)
        self.param_keep: list[Any] = []
        self.param_args = [self.argument(public + j, p, self.inputs[public + j], self.param_keep)
                           for j, p in enumerate(self.params)]
        self.param_fields = [pack(a, t) for a, t in zip(self.param_args, argtypes[1 + public:])]
        self.copied = list(copied) if self.team else []
        self.logged = [(k, *self.shapes[k][0]) for k in logged]  # (argument, rows, cols)
        # the machine's costs, from which each call's schedule follows (`policy.py`)
        self.costs = policy.costs()
        self.fixed_budget = policy.fixed_budget()
        self.max_depth = 0  # the compiled limit (`compile(max_depth=)`), 0 for none
        interrupts.install()  # Ctrl-C stops native calls

    def __call__(self, *inputs: Any, timeout: float | None = None) -> tuple[Any, ...]:
        """The outputs for `inputs`; with a `timeout` (seconds), on one thread
        and stopped with a RecirError once that has passed."""
        if timeout is not None:
            return call_within(self, inputs, timeout, lone_context)
        size = self.size(inputs) if self.team else None
        work = None if size is None else size * self.call_work
        # code without tasks runs as it is; a call too small to pay for a team, on one thread
        if not self.team or not policy.team_pays(work, self.threads, self.costs):
            return self.invoke(inputs, lambda args: self.call(args, threads=1))
        threads = self.threads
        budget = policy.call_budget(work, threads, self.costs) if self.fixed_budget is None \
            else self.fixed_budget
        if budget and not self.deep_only:  # inference on a team, the shortest way
            keep: list[Any] = []
            args, results = self.prepare(inputs, keep)
            ctx, returned = self.launched(args, threads, budget)
            if ctx.error == ERROR_STACK:
                ctx, returned = deeper(
                    lambda a, t, switch: self.call_once(a, t, switch, budget),
                    args, threads, True)
            if ctx.error:
                self.raise_error(ctx)
            return self.outputs_of(results, returned)
        return self.invoke(inputs, lambda args: self.call(
            args, threads=threads if budget else 1, budget=budget))

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
        def here(args: list[Any]) -> Any:
            ctx, returned = self.call_once(args, 1)
            self.raise_error(ctx)
            return returned

        return self.invoke(inputs, here)

    def invoke(self, inputs: Sequence[Any], call: Any) -> tuple[Any, ...]:
        keep: list[Any] = []
        args, results = self.prepare(inputs, keep)
        return self.outputs_of(results, call(args))

    def prepare(self, inputs: Sequence[Any], keep: list[Any], outputs: bool = True
                ) -> tuple[list[Any], list[Any]]:
        """The native entry's arguments for `inputs` (bound parameters and
        result buffers added), and the results they will be written to.
        Arrays already in the right dtype, shape and layout pass by address
        (a call's Python cost is most of a small tree's native time); others
        go through `argument`'s checks.
        `inputs` must stay alive until the call returns."""
        public = self.public
        if len(inputs) != public:
            raise RecirError(f"error: @{self.name} takes {public} inputs, got {len(inputs)}")
        args: list[Any] = []
        descriptors = None
        used = 0
        last = self.last
        for i, value in enumerate(inputs):
            seen = last[i]
            if seen is not None and seen[0] is value and value.shape == seen[1] and (
                    value.dtype is seen[3]):  # the array of the last call: weights, gradients
                args.append(seen[2])
                continue
            kind, dtype, dims = self.passing[i]
            if type(value) is np.ndarray and (value.dtype is dtype or value.dtype == dtype) and (
                    value.flags.c_contiguous):
                if kind == FIXED and value.shape == dims:
                    address = data_address(value)
                    last[i] = (value, dims, address, value.dtype)
                    args.append(address)
                    continue
                if kind == SIZED and value.shape[1:] == dims:
                    if descriptors is None:
                        descriptors = (ctypes.c_int64 * (2 * self.sized_count))()
                        keep.append(descriptors)
                        base = ctypes.addressof(descriptors)
                    descriptors[used] = value.shape[0]
                    descriptors[used + 1] = data_address(value)
                    args.append(base + 8 * used)
                    used += 2
                    continue
            elif kind == SCALAR and type(value) is int and -(1 << 31) <= value < (1 << 31):
                args.append(value)
                continue
            args.append(self.argument(i, value, self.inputs[i], keep))
        args += self.param_args
        results: list[Any] = []
        if not outputs:  # the caller adds them (`batch`)
            return args, results
        for kind in self.out_kinds:
            if type(kind) is tuple:
                out = np.empty(kind, np.float32)
                args.append(data_address(out))
            elif self.returns_one:
                out = None  # the entry returns it
            else:
                out = kind()
                args.append(ctypes.addressof(out))
            results.append(out)
        return args, results

    @staticmethod
    def outputs_of(results: list[Any], returned: Any) -> tuple[Any, ...]:
        return tuple(returned if r is None else r if type(r) is np.ndarray else r.value
                     for r in results)

    def batch(self, items: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """The outputs of each input tuple of `items`: on a team, each call is
        a task of one team, load-balanced with the tasks the calls spawn
        (`policy.batch_budget` says how deep; at 0 the calls spawn nothing:
        calls of like size balance a team by themselves); otherwise
        one at a time. Calls that add into gradient buffers must all be given
        the same buffers."""
        if not self.batch_team or len(items) < 2:
            return [self(*inputs) for inputs in items]
        return self.batch_on_team(items)

    def batch_on_team(self, items: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """`batch`'s calls as tasks of one team, spawning as deep as
        `policy.batch_budget` says."""
        sizes = self.sizes(items)
        threads = self.threads_for(sizes)
        works = None if sizes is None else [n * self.call_work for n in sizes]
        budget = self.fixed_budget if self.fixed_budget is not None else \
            policy.batch_budget(works, len(items), threads, self.costs)
        entry = self.batch_team
        keep: list[Any] = []
        prepared = [self.prepare(inputs, keep, outputs=False)[0] for inputs in items]
        first = prepared[0]
        if self.copied and any(args[k] != first[k] for args in prepared for k in self.copied):
            raise RecirError(f"error: the calls of a batch of @{self.name} must add "
                             f"into the same gradient buffers")
        count = len(items)
        # every call's results in one buffer per result, a call's at its row;
        # a scalar the entry returns goes to `slots`, the others through pointers
        slots = (self.restype * count)() if self.returns_one else None
        results = [np.empty((count, *kind), np.float32) if type(kind) is tuple else
                   slots if slots is not None else (kind * count)() for kind in self.out_kinds]
        rows = [rows_of(r, count) for r in results if r is not slots]
        if slots is not None:
            rows.append(rows_of(slots, count))

        def run(entry_args: list[Any], threads: int, switch: bool) -> tuple[Context, Any]:
            contexts = self.take_contexts(threads, budget, entry_args)
            logs = self.outer_logs(contexts)
            payload = [count]
            record = [ctypes.addressof(contexts), *range(self.public), *self.param_fields]
            public, scalars, argtypes = self.public, self.scalar_inputs, self.argtypes
            for k, args in enumerate(prepared):
                record[1:1 + public] = args[:public]
                for i in scalars:
                    record[1 + i] = pack(args[i], argtypes[1 + i])
                payload += record
                payload += [base + k * stride for base, stride in rows]
            try:
                return run_team(entry, contexts, payload, switch), None
            finally:
                logs.add_into(entry_args)
                self.give_back(contexts)

        self.call(first, run, threads)
        return list(zip(*map(list, results), strict=True))

    def fields(self, args: list[Any]) -> list[int]:
        """The entry's arguments as `@f__team` loads them (`pack`): the bound
        parameters' fields made once, result buffers' addresses as they are."""
        fields = args[:self.public]
        for k in self.scalar_inputs:
            fields[k] = pack(fields[k], self.argtypes[1 + k])
        fields += self.param_fields
        fields += args[len(self.inputs):]
        return fields

    def tables(self, threads: int) -> list[Any]:
        """Each thread's table of gradient buffers, indexed by argument, for a
        new set of team contexts (whose calls alone use them): threads 1..
        add into zeroed copies of their own, which the team adds into thread
        0's at its end and zeroes again (`passes/thread_copies.sum_copies_function`); thread
        0's entries are each call's buffers (`take_contexts`)."""
        if not self.copied or threads < 2:
            return []
        tables = [(ctypes.c_void_p * len(self.inputs))() for _ in range(threads)]
        for table in tables[1:]:
            table.own = [np.zeros(self.shapes[k][0], np.float32) for k in self.copied]
            for j, k in enumerate(self.copied):
                table[k] = table.own[j].ctypes.data
        return tables

    def call(self, args: list[Any], once: Any = None, threads: int | None = None,
             budget: int = 0) -> Any:
        """Runs `once(args, threads, switch)` (default: one call). A call that
        may be retried (not `deep_only`: inference) runs on this thread's
        own stack, and again on a deep one if the recursion ran out there (a
        team on this thread's switched stack, one thread otherwise). Calls
        that may not (gradients: a retry would add some gradients twice) run
        on a deep stack from the start: a team call, or a one-thread call
        with a packed entry, on this thread's switched stack (`run_team`,
        `call_packed`), others on the deep-stack worker. `budget`: the
        levels of the call tree that spawn tasks (0: none)."""
        packed = self.packed and once is None and stack.SWITCHING
        threads = threads or self.threads
        once = once or (lambda args, threads, switch: self.call_once(args, threads, switch,
                                                                     budget))
        team = self.in_team(threads)
        if self.deep_only and team and stack.SWITCHING:
            ctx, returned = once(args, threads, True)
        elif self.deep_only and packed:
            ctx, returned = self.call_packed(args)
        elif self.deep_only:
            ctx, returned = stack.DEEP_WORKER.run(lambda: once(args, threads, False))
        else:
            ctx, returned = once(args, threads, False)
            if ctx.error == ERROR_STACK:
                ctx, returned = deeper(once, args, threads, team)
        self.last_tape_bytes = ctx.tape_bytes
        self.raise_error(ctx)
        return returned

    def outer_logs(self, contexts: Sequence[Context]) -> OuterLogs:
        """The logs of a call's deferred outer products, one set per context."""
        return OuterLogs(contexts, len(self.inputs), self.logged) if self.logged else NO_LOGS

    def in_team(self, threads: int) -> bool:
        """Whether a call runs on a team: code with tasks does, except on one
        thread where a retry is harmless (not `deep_only`): there `@f` runs
        on a lone context, which spawns nothing, cheaper than a team of one
        behind a stack switch."""
        return bool(self.team) and (threads > 1 or self.deep_only)

    def call_once(self, args: list[Any], threads: int, switch: bool = False, budget: int = 0
                  ) -> tuple[Context, Any]:
        """One call (a team's on this thread's deep stack if `switch`,
        spawning `budget` levels down); the context with the first error, if
        any, comes back."""
        if self.in_team(threads) and not (switch or self.deep_only):
            return self.launched(args, threads, budget)
        if self.in_team(threads):
            contexts = self.take_contexts(threads, budget, args)
            logs = self.outer_logs(contexts)
            result = self.result_slot()
            fields = self.fields(args)
            fields.append(ctypes.addressof(result))
            try:
                return run_team(self.team, contexts, fields, switch), result.value
            finally:
                logs.add_into(args)
                self.give_back(contexts)
        ctx = lone_context(stack.stack_limit(), self.deep_only)
        logs = self.outer_logs([ctx])
        try:
            return ctx, self.function(ctypes.byref(ctx), *args)
        finally:
            TAPES.release(ctx)
            logs.add_into(args)

    def launched(self, args: list[Any], threads: int, budget: int) -> tuple[Context, Any]:
        """An inference call on a team started by `@f__launch`, on contexts
        kept from an earlier call (the team entry clears their errors)."""
        contexts = self.take_contexts(threads, budget)
        try:
            returned = stack.LEADERS.run(lambda: self.launch(
                contexts.address, stack.stack_limit(), threads, *args))
            for ctx in contexts.views:
                if ctx.error:  # a copy: the contexts go on to the next call
                    return Context.from_buffer_copy(ctx), returned
            return NO_ERROR, returned
        finally:
            self.give_back(contexts)

    def take_contexts(self, threads: int, budget: int, args: Sequence[Any] = ()) -> Any:
        """A team's contexts for one call, kept from an earlier call where one
        is free (their tape arenas ready: `give_back`), else new ones; with
        gradient copies, thread 0's table pointing at the buffers in `args`;
        set to spawn `budget` levels down (the team entry passes thread 0's
        on). Taking a pool chunk for each thread's tape and giving it back
        is then not paid every call."""
        try:  # by team size (budget 0's team of one); pop is atomic: calls from several threads
            contexts = self.kept_contexts[threads].pop()
        except (KeyError, IndexError):
            contexts = team_contexts(threads, self.tables(threads), self.deep_only)
        if contexts.tables:
            first = contexts.tables[0]
            for k in self.copied:
                first[k] = args[k]
        contexts.views[0].spawn_budget = budget or NO_TASKS
        RUNNING[get_ident()] = contexts  # what Ctrl-C stops
        return contexts

    def give_back(self, contexts: Any) -> None:
        """Keeps a team's contexts for the next call: each tape arena starts
        again in its first chunk (`TapePool.rearm`)."""
        if self.deep_only:
            for ctx in contexts.views:
                TAPES.rearm(ctx)
        self.kept_contexts.setdefault(len(contexts), []).append(contexts)

    def call_packed(self, args: list[Any]) -> tuple[Context, Any]:
        """One call of `@f__packed` on this thread's switched deep stack."""
        deep = stack.switched_stack()
        ctx = lone_context(deep.limit, self.deep_only)
        logs = self.outer_logs([ctx])
        result = self.result_slot()
        fields = [ctypes.addressof(ctx), *self.fields(args), ctypes.addressof(result)]
        data = (ctypes.c_uint64 * len(fields))(*fields)
        try:
            deep.call(self.packed, ctypes.addressof(data))
        finally:
            TAPES.release(ctx)
            logs.add_into(args)
        return ctx, result.value

    def result_slot(self) -> Any:
        """Where `@f__team` and `@f__packed` store the scalar result (in its
        own type; the `.value` of an unused slot is None)."""
        return self.restype() if self.restype is not None else NoResult()

    def raise_error(self, ctx: Context) -> None:
        if ctx.error == ERROR_STACK:  # the site names the function that overflowed
            where = self.sites[ctx.site] if 0 <= ctx.site < len(self.sites) else (
                f"error: recursion in @{self.name} is too deep for the native stack")
            raise RecirError(f"{where} ({stack.DEEP_STACK_BYTES >> 20} MiB)")
        if ctx.error == ERROR_CHECK:
            raise RecirError(f"{self.sites[ctx.site]} (at run time, in native @{self.name})")
        if ctx.error == ERROR_MEMORY:
            raise RecirError(f"error: native @{self.name} ran out of memory for its "
                             f"gradient tape after {ctx.tape_bytes >> 20} MiB")
        if ctx.error == ERROR_INTERRUPT:
            raise KeyboardInterrupt(f"native @{self.name} was interrupted")
        if ctx.error == ERROR_TIMEOUT:  # (`call_within` names the timeout)
            raise RecirError(f"error: native @{self.name} ran past its timeout")
        if ctx.error == ERROR_DEPTH:
            raise RecirError(f"error: recursion in @{self.name} is deeper than "
                             f"max_depth={self.max_depth}")
        if ctx.error == ERROR_HEAP:
            raise RecirError(f"error: native @{self.name} ran out of memory for a "
                             f"temporary buffer")
        if ctx.error != 0:
            raise RecirError(f"error: native @{self.name} failed with code {ctx.error}")

    def argument(self, index: int, value: Any, typ: Attribute, keep: list[Any]) -> Any:
        """What the native entry takes for `value`, converted and checked
        (`prepare` passes arrays already in the right form without this)."""
        value = coerce_argument(index, value, typ)
        if isinstance(typ, IntegerType) and typ.width.data == 32 and not (
                -(1 << 31) <= value < (1 << 31)):
            raise RecirError(f"error: argument {index} ({typ}) does not fit: {value}")
        if not is_tensor(typ):
            return value
        keep.append(value)
        if typ.get_shape()[0] >= 0:
            return value.ctypes.data
        descriptor = ArrayDescriptor(value.shape[0], value.ctypes.data)
        keep.append(descriptor)
        return ctypes.addressof(descriptor)


# how `prepare` passes an input: an i32 scalar as it is, an array of fixed
# shape by its data address, one with a leading dynamic dimension (a
# structure array) by a descriptor's address; anything else is checked
SCALAR, FIXED, SIZED, OTHER = range(4)


def passing(shape: tuple[tuple[int, ...], np.dtype] | None, i32: bool
            ) -> tuple[int, np.dtype | None, tuple[int, ...]]:
    """(kind, dtype, the dimensions `prepare` compares: all of a fixed
    shape's, a sized array's after the first)."""
    if shape is None:
        return (SCALAR if i32 else OTHER), None, ()
    dims, dtype = shape
    if all(d >= 0 for d in dims):
        return FIXED, dtype, dims
    if dims[0] < 0 and all(d >= 0 for d in dims[1:]):
        return SIZED, dtype, dims[1:]
    return OTHER, dtype, dims


def pack(value: Any, typ: Any) -> int:
    """An argument as the 8-byte field `@f__team` loads it from."""
    if typ is ctypes.c_float:
        return ctypes.c_uint32.from_buffer(ctypes.c_float(value)).value
    return (value or 0) & 0xFFFFFFFFFFFFFFFF


class NoResult(ctypes.Structure):
    """The slot of a call without a scalar result (never written)."""

    _fields_ = [("unused", ctypes.c_uint64)]
    value = None


def rows_of(buffer: Any, count: int) -> tuple[int, int]:
    """(address, bytes from one call's row to the next) of a batch's buffer
    of `count` results: a NumPy array's rows, a ctypes array's items."""
    if type(buffer) is np.ndarray:
        return data_address(buffer), buffer.nbytes // count
    return ctypes.addressof(buffer), ctypes.sizeof(buffer) // count


def deeper(once: Any, args: list[Any], threads: int, team: bool) -> tuple[Context, Any]:
    """`once` again for a call whose recursion ran out of this thread's
    stack: a team on this thread's switched deep stack, else one thread on a
    deep-stack thread."""
    if team and stack.SWITCHING:
        return once(args, threads, True)
    return stack.on_deep_stack(lambda: once(args, 1, False))


def run_team(entry: int, contexts: Any, payload: Sequence[int], switch: bool) -> Context:
    """Runs a generated team function (`@f__team`, `@f__batch`) on a libgomp
    team, one thread per context: each sets up its own (stack limit, error,
    tape arena), one runs the call(s) packed in `payload`, the others run the
    tasks it spawns. Thread 0 is this thread (a team leader where this one
    may end: `stack.TeamLeaders`), on its switched deep stack if `switch`
    (and glibc has ucontext), else on the stack it is on. The first
    error found is returned with its context."""
    def start() -> None:  # on this thread or a team leader (`stack.TeamLeaders`)
        deep = stack.switched_stack() if switch and stack.SWITCHING else None
        # (an array.array converts a batch's fields several times faster than a ctypes array)
        data = array.array("Q", [ctypes.addressof(contexts),
                                 deep.limit if deep else stack.stack_limit(), *payload])
        address = data.buffer_info()[0]
        if deep is not None:
            deep.call(openmp_entry(), entry, address, len(contexts), 0)
        else:
            openmp().GOMP_parallel(entry, address, len(contexts), 0)  # type: ignore[union-attr]

    stack.LEADERS.run(start)
    failed, tape_bytes = contexts.views[0], 0
    for ctx in contexts.views:
        tape_bytes += ctx.tape_bytes
        if ctx.error and not failed.error:
            failed = ctx
    failed = Context.from_buffer_copy(failed)  # the contexts go on to the next call
    failed.tape_bytes = tape_bytes  # the team's, for last_tape_bytes
    return failed
