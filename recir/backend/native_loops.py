"""A native schedule's loops: `@expand__depths` and `@f__heights`, each one call.

`NativeExpansion` runs every depth of `@expand` in one call, appending
each depth's children to tables (made once per capacity and kept) that grow
while too small. `HeightLoop` runs every height of a `@post` (`_fwd`,
`_bwd`) in one call, reading each height's rows from the whole tables and
writing its results into them. Both are called with a plan
(`passes/schedule_loops.py`, `passes/expansion_loop.py`) that `NativeLoop`
fills from NumPy arrays, checked against the function's types.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable, Sequence
from functools import cache
from itertools import pairwise
from typing import Any

import numpy as np

from recir.backend import interrupts, stack
from recir.backend.arguments import c_scalar
from recir.backend.array_address import DATA_FIELD, data_address
from recir.backend.contexts import Context, team_contexts
from recir.backend.frontier_schedule import NativeRowFunction
from recir.backend.kept_plans import CLEAN, every_field
from recir.backend.kernels.height_policy import weights_of
from recir.backend.schedule_specs import ExpansionSpec, HeightSpec, Spec
from recir.diagnostics import RecirError
from recir.interpreter.frontier import (
    MAX_DEPTH,
    MAX_INVOCATIONS,
    Schedule,
    dtype_of,
    row_shape,
)
from recir.passes.expansion_loop import EXPAND_ENTRY, EXPANSION_FULL, EXPANSION_HEADER
from recir.passes.gemm_target import host_target
from recir.passes.native_context import ERROR_CHECK
from recir.passes.plan_functions import CLEARED, COPIED, SCALAR, Operand
from recir.passes.gemm_teams import grains
from recir.passes.rows import ALIGN
from recir.passes.schedule_loops import HEADER, HEIGHTS_ENTRY


class NativeLoop:
    """A generated loop over calls of one native function over rows, called
    with a plan (`schedule_loops.py`) that this fills from NumPy arrays."""

    ENTRY = ""

    def __init__(self, native: NativeRowFunction, inputs: list[Operand]):
        self.native, self.inputs = native, inputs
        # a loop that zeroes what it reads (`CLEARED`) cannot run it again
        self.clears = any(role.kind == CLEARED for role in inputs)
        self.teams: dict[int, Any] = {}  # `contexts`, by team size
        self.address = native.engine.address(native.name + self.ENTRY)
        self.function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(self.address)

    def fields(self, inputs: Sequence[Any], keep: list[np.ndarray], first: int = 0,
               numbers: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
        """The (rows, address) fields of inputs `first`.. (or `numbers`),
        and which of them are scalars (`write_scalars`): a parameter that is
        the array of last time by its known address, a rows array already of
        its type checked inline, anything else by `described`."""
        if numbers is None:
            assert len(inputs) == len(self.inputs) - first, self.native.name
            numbers = range(first, len(self.inputs))
        fields, scalars = [0] * (2 * len(inputs)), []
        known, kinds, roles = self.native.known, self.native.kinds, self.inputs
        address = ctypes.c_void_p.from_address  # `data_address`, inline
        for i, (k, value) in enumerate(zip(numbers, inputs, strict=True)):
            seen = known[k]
            if seen is not None and seen[0] is value and value.shape == seen[2]:
                fields[2 * i + 1] = seen[1]
                continue
            kind = kinds[k]
            if kind is not None and kind[0] and type(value) is np.ndarray and (
                    value.dtype == kind[1] and value.shape[1:] == kind[2]
                    and value.flags.c_contiguous):
                fields[2 * i] = len(value)  # what `described` gives it
                fields[2 * i + 1] = (address(id(value) + DATA_FIELD).value or 0
                                     if DATA_FIELD else data_address(value))
            elif roles[k].kind == SCALAR:
                scalars.append(i)
            elif value is not None:
                fields[2 * i:2 * i + 2] = self.described(k, value, keep)
        return fields, scalars

    def write_scalars(self, plan: np.ndarray, header: int, inputs: Sequence[Any],
                      scalars: list[int], first: int = 0) -> None:
        """Scalar inputs' values into their fields, in their C type's bytes."""
        for i in scalars:
            raw = np.array(inputs[i], np.dtype(c_scalar(self.inputs[first + i].scalar)))
            at = header + 2 * i + 1
            plan[at:at + 1].view(np.uint8)[:raw.nbytes] = raw.view(np.uint8).ravel()

    def run(self, plan: np.ndarray, needed: int, threads: int = 1,
            entry: Callable[[int, int], None] | None = None) -> Sequence[Context]:
        """One call (of `entry` in place of the loop's, where given) with a
        scratch of `needed` bytes (each thread's, on a team of `threads`),
        and again with a larger one while it runs out (where repeating is
        harmless); the threads' contexts, the calling thread's first."""
        native = self.native
        at = data_address(plan)
        for _ in range(1 if self.clears else native.retries):
            needed = -(-needed // ALIGN) * ALIGN
            if native.scratch.nbytes < needed * threads:
                native.scratch = np.empty(needed * threads, np.uint8)
                native.scratch_at = data_address(native.scratch)
            plan[2] = native.scratch_at
            plan[3] = needed
            contexts = self.contexts(threads)
            self.bind(plan, contexts)
            key = interrupts.begin(contexts)
            try:
                (entry or self.function)(contexts.address, at)
            finally:
                interrupts.end(key)
            views = contexts.views
            if not any(ctx.error for ctx in views) or not any(
                    native.scratch_ran_out(ctx) for ctx in views):
                break
            needed *= 4
        return views

    def bind(self, plan: np.ndarray, contexts: Any) -> None:
        """Where the plan says the threads' contexts are, if it does."""

    def contexts(self, threads: int) -> Any:
        """A context per thread, made once per team size (calls of one
        function take turns: `FrontierFunction.calls`) and cleared for this
        call; the calling thread's stack is the one checked."""
        kept = self.teams.get(threads)
        if kept is None:
            kept = self.teams[threads] = team_contexts(threads)
        for ctx in kept.views:
            ctx.error, ctx.site, ctx.stack_limit = 0, 0, 0
        kept.views[0].stack_limit = stack.stack_limit()
        return kept

    def described(self, k: int, value: Any, keep: list[np.ndarray]) -> tuple[int, int]:
        """Input `k`'s (rows, data address), checked against its type; a
        static one (a parameter, its gradient) that is the array checked
        last time, by the address found then (`NativeRowFunction.known`)."""
        native = self.native
        known = native.known[k]
        if known is not None and known[0] is value and value.shape == known[2]:
            return 0, known[1]
        array = native.checked(k, value, keep)
        batched, _, shape = native.kinds[k]  # type: ignore[misc]
        address = data_address(array)
        if not batched and array is value:
            native.known[k] = (value, address, shape)
        return (len(array) if batched else 0), address


@cache
def row_tile() -> int:
    """Rows of the products' register tiles (their team forms' grain): a
    height whose rows give each thread fewer is left to those teams."""
    target = host_target()
    return max(grains(layout, target)[0] for layout in ("nt", "nn", "tn"))


class HeightLoop(NativeLoop):
    """`@f__heights`: every height of a `@post` (`_fwd`, `_bwd`) in one call."""

    ENTRY = HEIGHTS_ENTRY

    def __init__(self, native: NativeRowFunction, spec: HeightSpec):
        super().__init__(native, spec.inputs)
        self.outputs, self.threads, self.spec = spec.outputs, spec.threads, spec
        self.copies: dict[int, Any] = {}  # threads 1..'s and their tables, by team size
        self.copied = [k for k, role in enumerate(self.inputs) if role.kind == COPIED]
        self.layouts: Any = None  # `native_schedule.Post`, from the first call
        self.kept: Any = None  # its `kept_plans.KeptPlan`, from the first call

    def bind(self, plan: np.ndarray, contexts: Any) -> None:
        plan[6] = contexts.address

    def team_size(self, bounds: np.ndarray, backward: HeightLoop | None = None,
                  largest: int | None = None) -> tuple[int, int]:
        """The threads a call's heights split across, and how many of its
        first heights do: those whose rows give each thread at least a
        register tile of the products (`row_tile`; thinner ones the
        products' own teams split by columns). The team where the rows it
        takes off the calling thread there save more time than its start, a
        barrier per height (warm: the workers spin between heights) and
        adding up the threads' gradient copies (an add per element) cost, by
        the policy's costs; else one. By groups (`height_groups`; `largest`:
        the largest group's rows), every height on the team, each thread its
        own trees' rows, no barriers: all rows but the largest group's move.
        `backward`: the `_bwd` that splits as this `_fwd` (it reads each
        thread's saved rows), whose work counts too. A thread's copy of a
        gradient larger than its L2 costs no traffic per height beyond the
        sum: thin heights log their outer products (`row_logs`), and a wide
        one's product reads and writes the copy once for many rows."""
        weights = weights_of(self, backward)
        if weights.threads < 2 or len(bounds) < 2:
            return 1, 0
        if largest is not None:  # every height, no barriers; the largest group stays
            split, barriers = len(bounds) - 1, 0
            moved = int(bounds[-1] - bounds[0]) - largest
        else:
            rows = bounds[1:] - bounds[:-1]
            split = barriers = int(np.count_nonzero(rows >= self.threads * row_tile()))
            rows = rows[:split]
            moved = int((rows - -(-rows // self.threads)).sum())  # rows off the calling thread
        saved = moved * weights.work * weights.unit_s * weights.share
        start = weights.loops * (weights.team_s + barriers * weights.warm_team_s)
        return (self.threads, split) if split and saved > start + weights.summed else (1, 0)

    def __call__(self, bounds: np.ndarray, inputs: Sequence[Any],
                 outputs: Sequence[np.ndarray], saved_at: np.ndarray, threads: int = 1,
                 split: int = 0, groups: np.ndarray | None = None, rows: int | None = None,
                 most: int | None = None, shared: np.ndarray | None = None,
                 pieces: np.ndarray | None = None) -> None:
        """Every height of `bounds`, the first `split` on `threads`
        (`team_size`; a `_bwd` as its `_fwd`, whose team `saved_at`'s second
        axis counts; with `groups`, i64[heights][threads + 1], each thread's
        rows of each height, on all heights); the arrays must outlive the
        call. With `rows`, the outputs and the inputs `self.kept` owns are
        kept arrays (`kept_plans`) of which the call uses `rows` rows;
        `most`: `most_rows`, and `shared` the fields of `self.kept.shared`."""
        heights = len(bounds) - 1
        if self.clears and self.layouts:  # its tables not known zeroed until it ends
            self.layouts.pop(CLEAN, None)
        if threads > max(self.threads, 1) or saved_at.shape[1] != threads or not (
                0 <= split <= heights) or (threads > 1) != (split > 0) or (
                groups is not None and (groups.shape != (heights, threads + 1) or split
                                        != heights or groups.dtype != np.int64)) or (
                pieces is not None and (pieces.shape != (heights, 4) or groups is not None
                                        or pieces.dtype != np.int64)):
            raise RecirError(f"error: @{self.native.name}'s heights cannot split "
                             f"across {threads} threads")
        keep: list[np.ndarray] = []
        plan = every_field(self, HEADER, inputs, outputs, keep) if rows is None else (
            self.kept.fill(self, inputs, outputs, rows, keep, shared))
        plan[:HEADER] = (heights, data_address(bounds), 0, 0, data_address(saved_at), threads,
                         0, split, 0, 0, 0, 0 if groups is None else data_address(groups),
                         0 if pieces is None else data_address(pieces))
        self.place_copies(plan, threads)
        most = most_rows(bounds, threads, split, groups) if most is None else most
        contexts = self.run(plan, self.native.per_row * most, threads)
        failed = [ctx for ctx in contexts if ctx.error]
        self.native.raise_error(failed[0] if failed else contexts[0])

    def place_copies(self, plan: np.ndarray, threads: int) -> None:
        """Each `COPIED` input's buffers, the caller's then the other threads'
        copies (zeroed once per team size; the team adds them into the
        caller's and zeroes them), as a table in its first field, kept with
        the copies: a call writes the caller's (calls of one function take turns)."""
        copied = self.copied
        if not copied:
            return
        kept = self.copies.get(threads)
        if kept is None:
            copies = [np.zeros((threads - 1, self.inputs[k].row_bytes // 4), np.float32)
                      for k in copied]
            kept = self.copies[threads] = (copies, [np.array(
                [0, *(data_address(c) + c.strides[0] * t for t in range(threads - 1))],
                np.int64) for c in copies])
        for k, table in zip(copied, kept[1], strict=True):
            at = HEADER + 2 * k
            table[0] = plan[at + 1]
            plan[at] = data_address(table)


def most_rows(bounds: np.ndarray, threads: int, split: int, groups: np.ndarray | None) -> int:
    """The most rows one call of a height loop's function takes (what its
    thread's scratch is sized by): a thread's block of a height the team
    splits (ceil(rows / threads)), its group's rows, or a whole height the
    calling thread runs alone."""
    if groups is not None:
        return max(int((groups[:, 1:] - groups[:, :-1]).max(initial=0)), 1)
    edges = bounds.tolist()  # (a few tens of heights: a list, not NumPy calls)
    rows = list(map(operator.sub, edges[1:], edges[:-1]))
    if not split:
        return max(max(rows, default=0), 1)
    blocks = [-(-n // max(threads, 1)) for n in rows[:split]]
    return max(max(blocks, default=0), max(rows[split:], default=0), 1)


class NativeExpansion(NativeLoop):
    """`@expand__depths`: the whole expansion in one call, with the tables
    grown (and the call repeated) while they are too small."""

    ENTRY = EXPAND_ENTRY

    def __init__(self, native: NativeRowFunction, spec: ExpansionSpec):
        super().__init__(native, spec.inputs)
        self.spec = spec
        width = 1 + spec.moving
        self.outputs = len(native.outputs)
        self.tables = [(dtype_of(t), row_shape(t)) for t in native.inputs[:spec.moving]]
        self.stored = [(dtype_of(t), row_shape(t)) for t in native.outputs[spec.sites * width:]]
        self.kept: tuple[np.ndarray, tuple[list[np.ndarray], ...]] | None = None
        self.structure = [k for k, kind in enumerate(native.kinds[spec.moving:])
                          if kind is not None and kind[1].kind in "iu"]  # integer arrays

    def __call__(self, schedule: Schedule, roots: Sequence[Any], shared: Sequence[Any],
                 fields: np.ndarray, then: Any = None
                 ) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[int, int]],
                            np.ndarray, np.ndarray]:
        """`Schedule.expand`'s results for these roots, each invocation's
        height and its tree (its root's row): views of this loop's tables,
        which the next call overwrites (calls of one function take turns,
        and a schedule copies what it keeps). `fields`: `shared`'s; `then(plan,
        tables)`: the call making this one's and more (`NativeSchedule.numbering`)."""
        batch = len(roots[0])
        capacity = max(batch, self.first_capacity(batch, shared))  # the roots fit
        while True:
            plan, arrays = self.plan(capacity, [np.arange(batch), *roots], fields)
            entry = then and then(plan, arrays)
            ctx = self.run(plan, self.native.per_row * int(plan[0]), entry=entry)[0]
            total, depths = int(plan[5]), int(plan[6])
            if not (ctx.error == ERROR_CHECK and self.native.sites[ctx.site] == EXPANSION_FULL):
                break
            capacity = int(plan[0])
            if depths >= MAX_DEPTH or capacity >= MAX_INVOCATIONS:
                raise schedule.too_large(depths < MAX_DEPTH)
            capacity = min(4 * capacity, MAX_INVOCATIONS)
        self.native.raise_error(ctx)
        _, children, stored, levels, heights, trees = arrays
        starts = [*levels[:depths].tolist(), total]
        return ([c[:total] for c in children], [s[:total] for s in stored],
                list(pairwise(starts)), heights[:total], trees[:total])

    def first_capacity(self, batch: int, shared: Sequence[Any]) -> int:
        """Rows for a first try: twice the roots and the longest structure
        array (a tree's node count where the model reads one per node; an
        integer array: a parameter's rows say nothing of the trees)."""
        sizes = [len(v) for v in map(shared.__getitem__, self.structure)
                 if isinstance(v, np.ndarray) and v.ndim]
        return min(MAX_INVOCATIONS, max(256, 2 * batch + 2 * max(sizes, default=0)))

    def plan(self, capacity: int, moving: Sequence[Any], fields: np.ndarray
             ) -> tuple[np.ndarray, tuple[list[np.ndarray], ...]]:
        """The plan for these roots and the shared inputs' `fields`: the
        tables' part made once per capacity (kept while large enough), the
        rest written here."""
        if self.kept is None or self.kept[0][0] < capacity:
            self.kept = self.tables_plan(capacity)
        plan, arrays = self.kept
        tables, batch = arrays[0], len(moving[0])
        for table, value in zip(tables, moving, strict=True):
            table[:batch] = value
        plan[5:8] = 0, 0, batch  # total and depths: written back
        at = EXPANSION_HEADER + 2 * len(tables)
        plan[at:at + len(fields)] = fields
        return plan, arrays

    def tables_plan(self, capacity: int
                    ) -> tuple[np.ndarray, tuple[list[np.ndarray], ...]]:
        """A plan whose tables (the moving inputs', children's, stored
        values', levels', heights' and trees') have `capacity` rows, and
        those tables."""
        spec = self.spec
        tables = [np.empty((capacity, *shape), dtype) for dtype, shape in self.tables]
        children = [np.empty(capacity, np.int64) for _ in range(spec.sites)]
        stored = [np.empty((capacity, *shape), dtype) for dtype, shape in self.stored]
        levels = np.empty(min(capacity, MAX_DEPTH), np.int64)
        heights, trees = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
        ninputs = len(self.inputs)
        plan = np.zeros(EXPANSION_HEADER + 2 * (ninputs + self.outputs + spec.sites), np.int64)
        plan[[0, 1, 4, 8, 9]] = (capacity, len(levels), data_address(levels),
                                 data_address(heights), data_address(trees))
        for j, table in enumerate(tables):
            plan[EXPANSION_HEADER + 2 * j:EXPANSION_HEADER + 2 * j + 2] = (
                self.described(j, table, []))
        targets = [None if j == 0 else tables[j - 1] for _ in range(spec.sites)
                   for j in range(1 + spec.moving)] + stored + children
        for k, array in enumerate(targets):
            if array is not None:
                at = EXPANSION_HEADER + 2 * (ninputs + k)
                plan[at:at + 2] = capacity, data_address(array)
        return plan, (tables, children, stored, levels, heights, trees)


def runtime(spec: Spec, native: NativeRowFunction) -> NativeLoop:
    """The loop a spec describes, over its compiled function `native`."""
    if isinstance(spec, HeightSpec):
        return HeightLoop(native, spec)
    return NativeExpansion(native, spec)
