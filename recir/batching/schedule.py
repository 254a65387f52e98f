"""The frontier schedule of one call of the recursive function for a batch.

1. *Expand* (top down, one frontier per depth): the expand segment runs once
   for all invocations of a depth, vectorized over them; each invoke it
   reaches makes one child per row that reached it. Branches partition the
   frontier by their predicate (leaf vs internal), so the tree's shape may
   depend on computed values (TD-TreeLSTM). Values the post segment reads
   are stored per invocation.
2. *Group by height* (Cavs' ready frontier: a node is ready when its
   children are): invocations are renumbered so each height is one
   contiguous range of rows. Stored values are permuted once; from then on a
   frontier reads its own rows as views and writes its results as one slice
   assignment. Only the children's results are gathered.
3. *Post* (bottom up, one frontier per height): the post segment runs once
   per height; an invoke's results are the rows of its children.

The frames of both phases are kept for the backward (`grad.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from recir.batching import heights
from recir.batching.execute import Frame, Runner
from recir.batching.kernels import PerRoot, dtype_of
from recir.diagnostics import RecirError, emit_error
from recir.dialects import invoke

# A call tree past these is an error: more invocations than a batch's rows
# could hold in memory (4M rows of TreeLSTM h=256 values are ~20 GB), or more
# depth levels than a real tree has (each level costs interpreter time): a
# cycle in a tree's structure arrays expands forever.
MAX_INVOCATIONS = 1 << 22
MAX_DEPTH = 1 << 17


def too_big(plan: Any, what: str) -> RecirError:
    return emit_error(plan.rec, f"frontier batching expanded more than {what} (a cycle in "
                      "a tree's structure arrays?)")


def rows(value: SSAValue, n: int, fill: Any = 0) -> np.ndarray:
    """n rows shaped like `value`'s type (uninitialised if `fill` is None)."""
    typ = value.type
    shape = tuple(typ.get_shape()) if isinstance(typ, TensorType) else ()
    dtype = dtype_of(typ.element_type if isinstance(typ, TensorType) else typ)
    if fill is None:
        return np.empty((n, *shape), dtype)
    if fill == 0:
        return np.zeros((n, *shape), dtype)
    return np.full((n, *shape), fill, dtype)


class Schedule:
    """One entry-level invoke of @f over the batch, forward (and its tape)."""

    def __init__(self, runner: Runner):
        self.runner, self.plan = runner, runner.plan
        block = self.plan.rec.body.block
        self.args = [runner.slot[a] for a in block.args]
        self.moving = [a for a, p in zip(self.args, self.plan.passthrough, strict=True) if not p]
        self.fixed: dict[int, Any] = {}
        self.levels: list[tuple[int, int, Frame]] = []  # (first id, count, frame)
        self.heights: list[tuple[int, int, Frame]] = []
        self.pending: list[tuple[int, np.ndarray, list[Any]]] = []
        self.lo = 0
        self.native: Any = None  # a native post segment's tape (`native_grad.Tape`)

    # -- expansion ------------------------------------------------------
    def expand_invoke(self, op: invoke.InvokeOp, frame: Frame) -> list[Any]:
        runner = self.runner
        values = []
        for v, uniform in self.plan.moving_args(op):
            x = runner.value(frame, v)
            if uniform:
                x = np.broadcast_to(x, (frame.n, *np.shape(x))).copy()
            values.append(x)
        pos = frame.pos if frame.pos is not None else np.arange(frame.n)
        self.pending.append((self.plan.sites[op], pos, values))
        return [None] * len(op.results)

    def expand(self, root_values: list[Any], roots: np.ndarray) -> None:
        plan, runner = self.plan, self.runner
        block = plan.rec.body.block
        moving = [x for x, p in zip(root_values, plan.passthrough, strict=True) if not p]
        self.fixed = {a: x for a, x, p in zip(self.args, root_values, plan.passthrough,
                                              strict=True) if p}
        fast = runner.native_expand()
        if fast is not None and fast.run(self, moving, roots):
            return
        nsites = len(plan.sites)
        self.child_chunks: list[list[np.ndarray]] = [[] for _ in range(nsites)]
        self.stored_chunks: dict[SSAValue, list[np.ndarray]] = {v: [] for v in plan.stored}
        self.root_chunks: list[np.ndarray] = []
        lo, n = 0, len(roots)
        while n:
            if lo + n > MAX_INVOCATIONS:
                raise too_big(plan, f"{MAX_INVOCATIONS} invocations")
            if len(self.levels) == MAX_DEPTH:
                raise too_big(plan, f"{MAX_DEPTH} levels")
            frame = Frame(n, roots)
            frame.env.update(self.fixed)
            frame.env.update(zip(self.moving, moving, strict=True))
            self.pending = []
            runner.run_block(frame, block, "expand")
            self.levels.append((lo, n, frame))
            self.root_chunks.append(roots)
            self.collect(frame, n)
            next_lo, count = lo + n, 0
            chunks = [np.full(n, -1, np.int64) for _ in range(nsites)]
            parts, root_parts = [], []
            for site, pos, values in self.pending:
                chunks[site][pos] = next_lo + count + np.arange(len(pos))
                count += len(pos)
                parts.append(values)
                root_parts.append(roots[pos])
            for site in range(nsites):
                self.child_chunks[site].append(chunks[site])
            if count:
                moving = [np.concatenate([p[k] for p in parts]) for k in range(len(self.moving))]
                roots = np.concatenate(root_parts)
            lo, n = next_lo, count
        self.total = lo

    def collect(self, frame: Frame, n: int) -> None:
        """Store this level's rows of each value the post segment reads."""
        for v, chunks in self.stored_chunks.items():
            sub: Frame | None = frame
            for if_op, region in self.plan.paths[v]:
                sub = sub.subs[if_op][region][1] if sub is not None and if_op in sub.subs \
                    else None
            if sub is None or self.runner.slot[v] not in sub.env:
                chunks.append(rows(v, n))
                continue
            x = np.asarray(sub.env[self.runner.slot[v]])
            if sub.pos is None:
                chunks.append(x if x.ndim and x.shape[0] == n else rows(v, n, x))
                continue
            out = rows(v, n)
            out[sub.pos] = x
            chunks.append(out)

    # -- heights --------------------------------------------------------
    def order_by_height(self) -> None:
        self.child_level = [np.concatenate(c) for c in self.child_chunks]
        perm, inv, self.child, self.bounds = heights.order(self.child_level)
        self.perm, self.inv = perm, inv
        self.roots = np.concatenate(self.root_chunks)[perm]
        self.stored = {self.runner.slot[v]: np.concatenate(chunks)[perm] if len(chunks) > 1
                       else chunks[0][perm] for v, chunks in self.stored_chunks.items()}
        del self.stored_chunks

    # -- post -----------------------------------------------------------
    def post_invoke(self, op: invoke.InvokeOp, frame: Frame) -> list[Any]:
        lo = self.lo
        children = self.child[self.plan.sites[op]]
        ids = children[lo:lo + frame.n] if frame.pos is None else children[lo + frame.pos]
        return [r.take(ids, axis=0) for r in self.results]

    def post(self) -> None:
        plan, runner = self.plan, self.runner
        block = plan.rec.body.block
        outs = block.last_op.operands  # type: ignore[union-attr]
        # every height writes its own rows: nothing to clear (2 MB a batch at h=256)
        self.results = [rows(v, self.total, None) for v in outs]
        fast = runner.native_post()
        if fast is not None and fast.run(self):
            return
        for lo, hi in zip(self.bounds[:-1], self.bounds[1:], strict=True):
            lo, hi = int(lo), int(hi)
            self.lo = lo
            frame = Frame(hi - lo, self.roots[lo:hi], base=self.lookup(lo, hi))
            values = runner.run_block(frame, block, "post")
            for res, x in zip(self.results, values, strict=True):
                res[lo:hi] = x
            self.heights.append((lo, hi, frame))

    def lookup(self, lo: int, hi: int) -> Any:
        stored, fixed = self.stored, self.fixed

        def base(s: int) -> Any:
            if s in stored:
                return stored[s][lo:hi]
            if s in fixed:
                return fixed[s]
            raise RecirError(f"error: frontier batching: value {s} was not stored (internal)")

        return base

    # -- the whole call -------------------------------------------------
    def call(self, op: invoke.InvokeOp, frame: Frame) -> list[Any]:
        """Run @f for every row of the entry's `frame`: its results' rows."""
        if frame.parent is not None:
            raise emit_error(op, "frontier batching needs the entry's invoke outside branches")
        runner = self.runner
        values = []
        for v, through in zip(op.args, self.plan.passthrough, strict=True):
            slot = runner.slot[v]
            x = frame.env[slot] if slot in frame.env else runner.lookup(frame, slot)
            kind = self.plan.kinds[v]
            if through and kind == "B":
                x = PerRoot(array=x)
            elif not through and kind == "U":
                x = np.broadcast_to(x, (frame.n, *np.shape(x))).copy()
            values.append(x)
        saved = runner.on_invoke
        runner.on_invoke = self.dispatch
        try:
            self.expand(values, np.arange(frame.n))
            self.order_by_height()
            self.post()
        finally:
            runner.on_invoke = saved
        root = self.inv[:frame.n]
        return [r[root] for r in self.results]

    def dispatch(self, op: invoke.InvokeOp, frame: Frame, phase: str) -> list[Any]:
        if phase == "expand":
            return self.expand_invoke(op, frame)
        return self.post_invoke(op, frame)
