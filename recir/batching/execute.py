"""Evaluate a block of IR once for a whole frontier.

A `Frame` is one evaluation of a block over `n` invocations: `env` maps SSA
values to arrays with a leading frontier axis (kind B) or to one shared
value (U, R). A branch partitions the frontier by its predicate: each region
runs in a child frame over the rows that took it (`idx`, positions in the
parent), reading outer values restricted to those rows, and the yields are
scattered back. Frames are kept: they are the tape the batched backward
reads (`grad.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import scf
from xdsl.ir import Block, Operation, SSAValue

from recir.batching.kernels import KERNELS, PER_ROOT_OPS, PerRoot, constant
from recir.batching.segments import CONSTANTS, TERMINATORS, Plan
from recir.diagnostics import emit_error
from recir.dialects import invoke


class Frame:
    """One block evaluated over a frontier of `n` invocations."""

    __slots__ = ("env", "n", "roots", "parent", "idx", "pos", "subs", "base", "cot")

    def __init__(self, n: int, roots: np.ndarray, parent: Frame | None = None,
                 idx: np.ndarray | None = None, base: Callable[[SSAValue], Any] | None = None):
        self.env: dict[SSAValue, Any] = {}
        self.n, self.roots, self.parent, self.idx, self.base = n, roots, parent, idx, base
        # absolute rows in the top frame (None: all of them, in order)
        self.pos = idx if parent is None or parent.pos is None else (
            None if idx is None else parent.pos[idx])
        if parent is not None and parent.pos is not None and idx is None:
            self.pos = parent.pos
        self.subs: dict[scf.IfOp, list[tuple[np.ndarray | None, Frame]]] = {}
        self.cot: dict[SSAValue, Any] = {}

    def child(self, idx: np.ndarray | None) -> Frame:
        roots = self.roots if idx is None else self.roots[idx]
        n = self.n if idx is None else len(idx)
        return Frame(n, roots, self, idx)

    def get(self, value: SSAValue, kinds: dict[SSAValue, str]) -> Any:
        env = self.env
        if value in env:
            return env[value]
        if self.parent is not None:
            found = self.parent.get(value, kinds)
            if self.idx is not None and kinds[value] == "B":
                found = found[self.idx]
        elif self.base is not None:
            found = self.base(value)
        else:
            raise KeyError(value)
        env[value] = found
        return found


class Runner:
    """Runs blocks of a plan over frames; invokes call back into `on_invoke`."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.kinds = plan.kinds
        self.consts: dict[SSAValue, Any] = {}
        for fn in (plan.entry, plan.rec):
            for op in fn.walk():
                if isinstance(op, CONSTANTS):
                    self.consts[op.results[0]] = constant(op)
        self.flags: dict[Operation, tuple[bool, ...]] = {}
        self.on_invoke: Callable[[invoke.InvokeOp, Frame, str], list[Any]] | None = None

    def operand_flags(self, op: Operation) -> tuple[bool, ...]:
        flags = self.flags.get(op)
        if flags is None:
            flags = tuple(self.kinds.get(v) != "U" for v in op.operands)
            self.flags[op] = flags
        return flags

    def value(self, frame: Frame, v: SSAValue, per_root_ok: bool = False) -> Any:
        if v in self.consts:
            return self.consts[v]
        found = frame.get(v, self.kinds)
        if isinstance(found, PerRoot) and not per_root_ok:
            if found.array is None:
                raise emit_error(v.owner if isinstance(v.owner, Operation) else None,
                                 "a per-tree structure array is used by an op that needs "
                                 "a fixed shape")
            return found.array[frame.roots]
        return found

    def run_block(self, frame: Frame, block: Block, phase: str) -> list[Any]:
        """Evaluate the ops of `block` that `phase` runs; the terminator's operands."""
        env = frame.env
        for op in self.plan.block_ops(block, phase):
            if op in self.consts or isinstance(op, CONSTANTS):
                continue
            if isinstance(op, TERMINATORS):
                return [self.value(frame, v) for v in op.operands]
            if isinstance(op, scf.IfOp):
                self.run_if(frame, op, phase)
                continue
            if isinstance(op, invoke.InvokeOp):
                assert self.on_invoke is not None
                results = self.on_invoke(op, frame, phase)
                for r, x in zip(op.results, results, strict=True):
                    env[r] = x
                continue
            kernel = KERNELS.get(type(op))
            if kernel is None:
                raise emit_error(op, "has no batched kernel (frontier batching)")
            ok = isinstance(op, PER_ROOT_OPS)
            args = [self.value(frame, v, ok) for v in op.operands]
            for r, x in zip(op.results, kernel(op, args, self.operand_flags(op), frame),
                            strict=True):
                env[r] = x
        return []

    def run_if(self, frame: Frame, op: scf.IfOp, phase: str) -> None:
        """Partition the frontier by the predicate; each region on its rows."""
        if phase == "expand" and op in self.plan.expand:
            phase = "all"  # a branch an invoke argument needs: run it whole
        pred = self.value(frame, op.cond)
        if self.kinds[op.cond] == "U":
            parts = [(None, 0 if pred else 1)]
        else:
            taken = np.flatnonzero(pred)
            if len(taken) == frame.n:
                parts = [(None, 0)]
            elif len(taken) == 0:
                parts = [(None, 1)]
            else:
                parts = [(taken, 0), (np.flatnonzero(~pred), 1)]
        subs = [frame.child(idx) for idx, _ in parts]
        frame.subs[op] = [(None, None), (None, None)]  # type: ignore[list-item]
        for (idx, region), sub in zip(parts, subs, strict=True):
            frame.subs[op][region] = (idx, sub)
        outs = [self.run_block(sub, op.regions[region].block, phase)
                for (_, region), sub in zip(parts, subs, strict=True)]
        if phase == "expand" or not op.results:
            return
        self.merge(frame, op, parts, outs)

    def merge(self, frame: Frame, op: scf.IfOp, parts: list[Any], outs: list[Any]) -> None:
        """The if's results over the whole frontier from each region's yields."""
        for k, r in enumerate(op.results):
            if self.kinds[r] == "U":
                frame.env[r] = outs[0][k]
                continue
            if len(parts) == 1:
                frame.env[r] = self.widen(frame, op, parts[0][1], k, outs[0][k])
                continue
            values = [self.widen(sub_n, op, region, k, out[k]) for (idx, region), out, sub_n
                      in zip(parts, outs, [len(p[0]) for p in parts], strict=True)]
            out = np.empty((frame.n, *values[0].shape[1:]), values[0].dtype)
            for (idx, _), v in zip(parts, values, strict=True):
                out[idx] = v
            frame.env[r] = out

    def widen(self, n: Any, op: scf.IfOp, region: int, k: int, x: Any) -> Any:
        """A uniform yield as rows of a B result: broadcast over the rows."""
        n = n.n if isinstance(n, Frame) else n
        if self.kinds[op.regions[region].block.last_op.operands[k]] != "U":  # type: ignore[union-attr]
            return x
        x = np.asarray(x)
        return np.broadcast_to(x, (n, *x.shape)).copy()
