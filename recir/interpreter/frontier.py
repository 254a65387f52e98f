"""NumPy semantics of `frontier`, and the frontier schedule `frontier.schedule` runs.

The schedule is the reference a native runtime follows: expand the call
tree depth by depth with `@expand` (each invoke site's rows make one child
each, numbered after the current depth), then number the invocations by
height (leaves first; Cavs' ready frontier: a node is ready when its
children are) so each height is one contiguous range of rows, and run
`@post` once per height, writing that range of every result.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, IndexType, IntegerType, TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls
from xdsl.ir import Attribute
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import InterpretationError

from recir.diagnostics import emit_error
from recir.dialects import frontier
from recir.interpreter.tmath import checked_rows

# A call tree past these is an error, not an out-of-memory: more invocations
# than a batch's rows could hold, or more depth levels than a real tree has
# (a cycle in a tree's structure arrays expands forever).
MAX_INVOCATIONS = 1 << 22
MAX_DEPTH = 1 << 17

CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
        5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater,
        9: np.greater_equal}
# cmpf: (ordered comparison, or-unordered); 0 false, 7 ord, 14 uno, 15 true
CMPF = {1: (np.equal, False), 2: (np.greater, False), 3: (np.greater_equal, False),
        4: (np.less, False), 5: (np.less_equal, False), 6: (np.not_equal, False),
        8: (np.equal, True), 9: (np.greater, True), 10: (np.greater_equal, True),
        11: (np.less, True), 12: (np.less_equal, True), 13: (np.not_equal, True)}


def dtype_of(typ: Attribute) -> np.dtype[Any]:
    element = typ.element_type if isinstance(typ, TensorType) else typ
    if isinstance(element, Float32Type):
        return np.dtype(np.float32)
    if isinstance(element, IntegerType) and element.width.data == 1:
        return np.dtype(np.bool_)
    if isinstance(element, IndexType):
        return np.dtype(np.int64)
    return np.dtype(np.int32)


def row_shape(typ: Attribute) -> tuple[int, ...]:
    assert isinstance(typ, TensorType)
    return tuple(typ.get_shape())[1:]


@register_impls
class FrontierFunctions(InterpreterFunctions):
    @impl(frontier.TakeOp)
    def run_take(self, interp: Interpreter, op: frontier.TakeOp, args: Any):
        source, rows = args
        return (source[checked_rows(rows, len(source))],)

    @impl(frontier.PartitionOp)
    def run_partition(self, interp: Interpreter, op: frontier.PartitionOp, args: Any):
        pred = np.asarray(args[0], bool)
        return (np.flatnonzero(pred).astype(np.int32), np.flatnonzero(~pred).astype(np.int32))

    @impl(frontier.MergeOp)
    def run_merge(self, interp: Interpreter, op: frontier.MergeOp, args: Any):
        lhs, lhs_rows, rhs, rhs_rows = args
        if len(lhs) != len(lhs_rows) or len(rhs) != len(rhs_rows):
            raise InterpretationError(f"merging {len(lhs)} and {len(rhs)} rows by "
                                      f"{len(lhs_rows)} and {len(rhs_rows)} row numbers")
        n = len(lhs) + len(rhs)
        out = np.zeros((n, *lhs.shape[1:]), lhs.dtype)
        out[checked_rows(lhs_rows, n)] = lhs
        out[checked_rows(rhs_rows, n)] = rhs
        return (out,)

    @impl(frontier.BroadcastOp)
    def run_broadcast(self, interp: Interpreter, op: frontier.BroadcastOp, args: Any):
        value, like = args
        value = np.asarray(value, dtype_of(op.result.type))
        return (np.broadcast_to(value, (len(like), *value.shape)).copy(),)

    @impl(frontier.CmpiOp)
    def run_cmpi(self, interp: Interpreter, op: frontier.CmpiOp, args: Any):
        lhs, rhs = args
        predicate = op.predicate.value.data
        if predicate >= 6:  # unsigned
            lhs, rhs = lhs.astype(np.uint64) & 0xFFFFFFFF, rhs.astype(np.uint64) & 0xFFFFFFFF
        return (CMPI[predicate](lhs, rhs),)

    @impl(frontier.CmpfOp)
    def run_cmpf(self, interp: Interpreter, op: frontier.CmpfOp, args: Any):
        lhs, rhs = args
        predicate = op.predicate.value.data
        unordered = np.isnan(lhs) | np.isnan(rhs)
        if predicate in (0, 15):
            return (np.full(len(lhs), predicate == 15),)
        if predicate in (7, 14):
            return (~unordered if predicate == 7 else unordered,)
        compare, or_unordered = CMPF[predicate]
        with np.errstate(invalid="ignore"):
            held = compare(lhs, rhs)
        return ((held | unordered) if or_unordered else (held & ~unordered),)

    @impl(frontier.ExtractRaggedOp)
    def run_extract_ragged(self, interp: Interpreter, op: Any, args: Any):
        values, offsets, tree, index = args
        tree = checked_rows(tree, len(offsets) - 1)
        start, length = offsets[tree], offsets[tree + 1] - offsets[tree]
        bad = (index < 0) | (index >= length)
        if bad.any():
            row = int(np.argmax(bad))
            raise InterpretationError(f"index {int(index[row])} out of range for length "
                                      f"{int(length[row])} (row {row}, tree {int(tree[row])})")
        return (values[start + index],)

    @impl(frontier.SizeRaggedOp)
    def run_size_ragged(self, interp: Interpreter, op: Any, args: Any):
        offsets, tree = args
        tree = checked_rows(tree, len(offsets) - 1)
        return ((offsets[tree + 1] - offsets[tree]).astype(np.int32),)

    @impl(frontier.ScheduleOp)
    def run_schedule(self, interp: Interpreter, op: frontier.ScheduleOp, args: Any):
        count = len(op.moving)
        return Schedule(interp, op, args[:count], args[count:]).run()


class Schedule:
    """One `frontier.schedule` (or its `schedule_grad`'s forward): expansion,
    height order, post."""

    def __init__(self, interp: Interpreter, op: frontier.ScheduleOp | frontier.ScheduleGradOp,
                 roots: Sequence[Any], shared: Sequence[Any], facts: Any = None):
        """`facts`: another call's `self.facts` for the same op and callees
        (what does not change from call to call, found once)."""
        self.interp, self.op = interp, op
        if facts is None:
            facts = (self.callee(op.expand), self.callee(op.post), op.sites.value.data)
        self.facts = facts
        self.expand_fn, self.post_fn, self.sites = facts
        self.roots, self.shared = list(roots), tuple(shared)
        self.expand_fwd: func.FuncOp | None = None  # set to differentiate the expansion
        # per depth of a differentiated expansion: its rows, inputs, and what
        # its `_fwd` keeps for its `_bwd` (the saved rows, then the frame)
        self.levels: list[tuple[slice, tuple[Any, ...], tuple[Any, ...]]] = []

    def callee(self, name: Any, why: str = "") -> func.FuncOp:
        found = SymbolTable.lookup_symbol(self.op, name)
        if not isinstance(found, func.FuncOp):
            shown = f"@{name}" if isinstance(name, str) else name
            raise emit_error(self.op, f"no function {shown} in the module{why}")
        return found

    def run(self, wanted: Any = None) -> tuple[Any, ...]:
        """The outputs, each root's row; `wanted`: the numbers of those
        to gather (None for the others), where not all."""
        batch = len(self.roots[0]) if self.roots else 0
        if batch == 0:
            return tuple(np.zeros((0, *row_shape(r.type)), dtype_of(r.type))
                         for r in self.op.outputs)
        self.number_by_height(batch)
        tables = self.post(self.children, self.stored, self.bounds, self.total)
        return tuple(t[self.inv[:batch]] if wanted is None or k in wanted else None
                     for k, t in enumerate(tables))

    def number_by_height(self, batch: int) -> None:
        """Expand, then renumber the invocations by height: `inv[i]` is
        invocation i's row (the roots are 0..batch-1 in expansion order)."""
        self.renumber(*self.expand(batch))

    def renumber(self, children: list[np.ndarray], stored: list[np.ndarray],
                 levels: list[tuple[int, int]]) -> None:
        """The invocations in height order (`number_by_height`), with their
        children (as rows of that order, int32) and stored values."""
        self.children_by_depth = children
        total = self.total = levels[-1][1]
        perm, self.bounds = self.height_order(children, levels, total)
        # and -1 after the rows: no child's row; int32 as `@post` takes
        # children (rows fit: at most MAX_INVOCATIONS)
        inv = np.empty(total + 1, np.int32)
        inv[perm] = np.arange(total, dtype=np.int32)
        inv[total] = -1
        self.inv = inv[:total]
        self.children = [inv[c[perm]] for c in children]
        self.stored = [s[perm] for s in stored]

    def expand(self, n: int
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[int, int]]]:
        """Run `@expand` (or `self.expand_fwd`, keeping each depth's inputs
        and frame in `self.levels`) depth by depth: each invocation's
        children (global row numbers in expansion order, -1 where none),
        stored values, and each depth's range of rows."""
        moving = [np.arange(n, dtype=np.int32), *self.roots]
        child_chunks: list[list[np.ndarray]] = [[] for _ in range(self.sites)]
        stored_chunks: list[list[np.ndarray]] = []
        lo, levels = 0, []
        while n:
            levels.append((lo, lo + n))
            if lo + n > MAX_INVOCATIONS or len(levels) > MAX_DEPTH:
                raise self.too_large(lo + n > MAX_INVOCATIONS)
            inputs = (*moving, *self.shared)
            outs = self.interp.call_op(self.expand_fwd or self.expand_fn, inputs)
            if self.expand_fwd is not None:  # its saved rows and frame, kept
                count = len(self.expand_fn.function_type.outputs)
                self.levels.append((slice(lo, lo + n), inputs, tuple(outs[count:])))
                outs = outs[:count]
            width = 1 + len(moving)
            parts, count = [], 0
            for k in range(self.sites):
                rows, *child = outs[k * width:(k + 1) * width]
                ids = np.full(n, -1, np.int64)
                ids[rows] = lo + n + count + np.arange(len(rows))
                count += len(rows)
                child_chunks[k].append(ids)
                parts.append(child)
            stored = outs[self.sites * width:]
            if not stored_chunks:
                stored_chunks = [[] for _ in stored]
            for chunks, value in zip(stored_chunks, stored, strict=True):
                chunks.append(np.asarray(value))
            if parts:  # with no sites every invocation is a leaf: nothing moves on
                moving = [np.concatenate([p[j] for p in parts]) for j in range(len(moving))]
            lo, n = lo + n, count
        children = [np.concatenate(c) if c else np.zeros(0, np.int64) for c in child_chunks]
        return children, [np.concatenate(c) for c in stored_chunks], levels

    def too_large(self, invocations: bool) -> Exception:
        what = f"{MAX_INVOCATIONS} invocations" if invocations else f"{MAX_DEPTH} levels"
        return emit_error(self.op, f"frontier.schedule expanded more than {what} "
                          "(a cycle in a tree's structure arrays, or trees that large: "
                          "batching='recursive' takes them)")

    def height_order(self, children: list[np.ndarray], levels: list[tuple[int, int]],
                     total: int) -> tuple[np.ndarray, np.ndarray]:
        """Invocations sorted by height (stable), and where each height starts.
        Children are one depth below their parent, so one pass over the depths
        from the deepest up finds every height."""
        height = np.zeros(total, np.int64)
        for lo, hi in reversed(levels):
            for c in children:
                child = c[lo:hi]
                has = np.flatnonzero(child >= 0)
                below = height[child[has]] + 1
                height[lo + has] = np.maximum(height[lo + has], below)
        perm = np.argsort(height, kind="stable")
        sorted_heights = height[perm]
        starts = np.flatnonzero(np.diff(sorted_heights)) + 1
        return perm, np.concatenate([[0], starts, [total]]).astype(np.int64)

    def post(self, children: list[np.ndarray], stored: list[np.ndarray],
             bounds: np.ndarray, total: int, post_fn: func.FuncOp | None = None
             ) -> list[np.ndarray]:
        """Run `@post` (or `post_fn`, its `_fwd`) height by height; with
        `post_fn`, `self.frames` keeps each height's rows, inputs, and what the
        `_fwd` returns for the `_bwd` after the results (the saved rows, then
        the frame)."""
        tables = [np.zeros((total, *row_shape(t)), dtype_of(t))
                  for t in self.post_fn.function_type.outputs.data]
        self.frames: list[tuple[slice, tuple[Any, ...], tuple[Any, ...]]] = []
        for lo, hi in pairwise(bounds):
            rows = slice(int(lo), int(hi))
            inputs = (*(s[rows] for s in stored),
                      *(c[rows].astype(np.int32, copy=False) for c in children), *tables,
                      *self.shared)
            outs = self.interp.call_op(post_fn or self.post_fn, inputs)
            if post_fn is not None:
                self.frames.append((rows, inputs, tuple(outs[len(tables):])))
            for table, value in zip(tables, outs[:len(tables)], strict=True):
                table[rows] = value
        return tables
