"""The batched backward: the forward's frontiers in reverse, rule by rule.

Order (the reverse of the forward's): the entry's ops back to its invoke of
@f; then @f's post frontiers from the tallest height down (an invoke hands
its results' cotangents to its children's rows, `dres`), collecting the
cotangents of stored expansion values (`dstored`); then, if the expand
segment computed floats (TD-TreeLSTM's LSTM step), the depth levels from the
deepest up: each invoke takes its children's argument cotangents; what is
left at the top of a level is the cotangent of that level's arguments. The
roots' argument cotangents go back to the entry's invoke.

Parameter gradients are added straight into the caller's gradient arrays,
embedding rows with `np.add.at`. A matrix's gradient `dW += dY^T X` is
added once per backward: each frontier's rows of dY and X are kept and
stacked at the end (`finish`), one SGEMM instead of one per height, most of
which have too few rows for OpenBLAS's full rate.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects import scf
from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Block, SSAValue

from recir.batching.execute import GROUP, IF, INVOKE, RETURN, Frame, Runner
from recir.backend.kernels import gemm
from recir.batching import scatter
from recir.batching.kernels import split_for
from recir.batching.rules import NO_GRAD, VJP, Outer, Rows, Slice
from recir.batching.schedule import Schedule, rows
from recir.diagnostics import emit_error
from recir.dialects import invoke


def is_float(v: SSAValue) -> bool:
    typ = v.type
    return isinstance(typ.element_type if isinstance(typ, TensorType) else typ, Float32Type)


class Acc:
    """A cotangent buffer this backward owns, so it may add into it in place."""

    __slots__ = ("a",)

    def __init__(self, a: np.ndarray):
        self.a = a


def plain(g: Any) -> Any:
    return g.a if isinstance(g, Acc) else g


def joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts' rows as one array: a view where each part's rows follow the
    last's in one buffer (a yielded value's rows, written over the heights
    of two regions: 1 MB at h=256), else a concatenation."""
    first = parts[0]
    if len(parts) == 1:
        return first
    end = first.__array_interface__["data"][0] + len(first) * first.strides[0]
    for p in parts[1:]:
        if owner(p) is not owner(first) or p.strides != first.strides or \
                p.shape[1:] != first.shape[1:] or p.__array_interface__["data"][0] != end:
            return np.concatenate(parts)
        end += len(p) * p.strides[0]
    rows = sum(len(p) for p in parts)
    return np.lib.stride_tricks.as_strided(first, (rows, *first.shape[1:]), first.strides,
                                           writeable=False)


def owner(a: Any) -> Any:
    """The object that owns an array's memory (the end of its `base` chain)."""
    while getattr(a, "base", None) is not None:
        a = a.base
    return a


class Backward:
    """Reverse sweep over the tape of `BatchedFunction.run`."""

    def __init__(self, runner: Runner, targets: dict[int, np.ndarray]):
        self.runner, self.plan = runner, runner.plan
        self.targets = targets  # slot of a parameter (entry or @f argument) -> grad array
        self.schedules: dict[invoke.InvokeOp, Schedule] = {}
        # id(target) -> (target, the products of its frontiers), added by `finish`
        self.outers: dict[int, tuple[np.ndarray, list[Outer]]] = {}

    # -- accumulation ---------------------------------------------------
    def add(self, frame: Frame, s: int, g: Any) -> None:
        if g is None:
            return
        if not self.runner.batched[s]:
            self.add_uniform(s, g)
            return
        cot = frame.cot
        cur = cot.get(s)
        if isinstance(g, Slice):
            if not isinstance(cur, Acc):
                buf = np.zeros(g.shape, np.float32) if cur is None else np.array(cur, np.float32)
                cur = cot[s] = Acc(buf)
            cur.a[:, g.start:g.start + g.dy.shape[1]] += g.dy
        elif cur is None:
            cot[s] = g
        elif isinstance(cur, Acc):
            cur.a += g
        else:
            cot[s] = Acc(cur + g)

    def finish(self) -> None:
        """Add each matrix's kept frontier products: dW += [dY...]^T [X...]."""
        for target, parts in self.outers.values():
            dy, x = joined([p.dy for p in parts]), joined([p.x for p in parts])
            gemm.add_outer(target, dy, x, split_for(len(dy) * target.size))
        self.outers.clear()

    def add_uniform(self, s: int, g: Any) -> None:
        target = self.targets.get(s)
        if target is None:
            if s in self.runner.consts or isinstance(g, Rows):
                return
            return  # a uniform value not derived from parameters (inputs): dropped
        if isinstance(g, Rows):
            scatter.add_rows(target, g.index, g.dy)
            return
        if isinstance(g, Outer):
            self.outers.setdefault(id(target), (target, []))[1].append(g)
            return
        if isinstance(g, Slice):
            dy = g.dy.sum(axis=0) if g.dy.ndim > len(g.shape) else g.dy
            target[g.start:g.start + dy.shape[0]] += dy
            return
        g = np.asarray(g)
        while g.ndim > target.ndim:
            g = g.sum(axis=0)
        target += g

    # -- blocks ---------------------------------------------------------
    def block(self, frame: Frame, block: Block, phase: str) -> None:
        runner, env, cot = self.runner, frame.env, frame.cot
        for code, op, _kernel, args, results, flags, per_root in reversed(
                runner.program(block, phase)):
            if code == RETURN:
                continue
            dys = [plain(cot.pop(s)) if s in cot else None for s in results]
            if code == IF:
                self.branch(frame, op, phase, dys)
                continue
            if code == INVOKE:
                self.invoke(frame, op, phase, dys)
                continue
            if all(d is None for d in dys) or isinstance(op, NO_GRAD):
                continue
            vals = [env[s] if s in env else runner.lookup(frame, s) for s in args]
            if code == GROUP:
                grads = runner.kernels.backward(op, vals, dys, frame.n)  # type: ignore[union-attr]
                for s, g in zip(args, grads, strict=True):
                    self.add(frame, s, g)
                continue
            rule = VJP.get(type(op))
            if rule is None:
                raise emit_error(op, "has no batched gradient rule")
            for k in per_root:
                vals[k] = runner.rows(frame, vals[k], op)
            dys = [d if d is not None else np.zeros_like(np.asarray(env[s]))
                   for d, s in zip(dys, results, strict=True)]
            outs = [env[s] for s in results]
            for s, g in zip(args, rule(op, vals, outs, dys, flags), strict=True):
                self.add(frame, s, g)

    def branch(self, frame: Frame, op: scf.IfOp, phase: str, dys: list[Any]) -> None:
        record = frame.subs.get(op)
        if record is None:
            return
        whole = phase == "expand" and op in self.plan.expand
        inner = "all" if whole else phase
        slot = self.runner.slot
        for region, (idx, sub) in enumerate(record):
            if sub is None:
                continue
            block = op.regions[region].block
            yields = block.last_op.operands  # type: ignore[union-attr]
            for d, y in zip(dys, yields, strict=True):
                if d is not None:
                    self.add(sub, slot[y], d if idx is None else d[idx])
            self.block(sub, block, inner)
            for s, g in sub.cot.items():
                g = plain(g)
                if idx is None:
                    self.add(frame, s, g)
                    continue
                full = np.zeros((frame.n, *g.shape[1:]), np.float32)
                full[idx] = g
                self.add(frame, s, full)
            sub.cot = {}

    def invoke(self, frame: Frame, op: invoke.InvokeOp, phase: str, dys: list[Any]) -> None:
        if phase == "all":
            schedule = self.schedules[op]
            for s, g in zip((self.runner.slot[a] for a in op.args),
                            self.recursive(schedule, dys), strict=True):
                self.add(frame, s, g)
            return
        schedule = self.current
        pos = frame.pos if frame.pos is not None else np.arange(frame.n)
        site = self.plan.sites[op]
        if phase == "post":
            ids = schedule.child[site][schedule.lo + pos]
            for k, d in enumerate(dys):
                if d is not None and self.dres[k] is not None:
                    self.dres[k][ids] += d
            return
        ids = schedule.child_level[site][self.level_lo + pos]
        for v, a, through in zip(op.args, self.plan.rec.body.block.args,
                                 self.plan.passthrough, strict=True):
            sa = self.runner.slot[a]
            if through or sa not in self.dargs:
                continue
            self.add(frame, self.runner.slot[v], self.dargs[sa][ids])

    # -- the recursion --------------------------------------------------
    def recursive(self, schedule: Schedule, droot: list[Any]) -> list[Any]:
        """Cotangents of the entry invoke's operands from those of its results."""
        self.current = schedule
        plan, runner = self.plan, self.runner
        block = plan.rec.body.block
        outs = block.last_op.operands  # type: ignore[union-attr]
        total, roots = schedule.total, schedule.inv[:schedule.levels[0][1]]

        def seeded() -> list[Any]:
            dres = [rows(v, total) if is_float(v) else None for v in outs]
            for d, g in zip(dres, droot, strict=True):
                if d is not None and g is not None:
                    d[roots] = g
            return dres

        self.dres = seeded()
        stored_float = {runner.slot[v]: v for v in plan.stored if is_float(v)}
        if schedule.native is not None:  # a native forward: its backward, or its frames
            from recir.batching import native_grad

            found = not stored_float and native_grad.backward(schedule.native, self, schedule,
                                                              self.dres)
            if found:
                return self.expansion(schedule, {}, {})
            if found is None:  # it ran and a check failed: start again
                self.dres = seeded()
            schedule.native.frames(schedule)
        dstored = {s: rows(v, total) for s, v in stored_float.items()}
        out_slots = [runner.slot[v] for v in outs]
        for lo, hi, frame in reversed(schedule.heights):
            schedule.lo = lo
            for s, d in zip(out_slots, self.dres, strict=True):
                if d is not None:
                    self.add(frame, s, d[lo:hi])
            self.block(frame, block, "post")
            for s, g in frame.cot.items():
                if s in dstored:
                    dstored[s][lo:hi] += plain(g)
            frame.cot = {}
        return self.expansion(schedule, dstored, stored_float)

    def expansion(self, schedule: Schedule, dstored: dict[int, np.ndarray],
                  stored_float: dict[int, SSAValue]) -> list[Any]:
        plan, runner = self.plan, self.runner
        block = plan.rec.body.block
        level = {s: d[schedule.inv] for s, d in dstored.items()}  # height -> depth order
        args = [runner.slot[a] for a in block.args]
        self.dargs = {s: level.get(s, rows(a, schedule.total))
                      for s, a, through in zip(args, block.args, plan.passthrough, strict=True)
                      if not through and is_float(a)}
        if any(is_float(r) for op in plan.expand for r in op.results):
            for lo, n, frame in reversed(schedule.levels):
                self.level_lo = lo
                for s, v in stored_float.items():
                    if s not in self.dargs:
                        self.seed(frame, s, v, level[s][lo:lo + n])
                self.block(frame, block, "expand")
                for s, g in frame.cot.items():
                    if s in self.dargs:
                        self.dargs[s][lo:lo + n] += plain(g)
                frame.cot = {}
        n0 = schedule.levels[0][1]
        return [None if through or s not in self.dargs else self.dargs[s][:n0]
                for s, through in zip(args, plan.passthrough, strict=True)]

    def seed(self, frame: Frame, s: int, v: SSAValue, d: np.ndarray) -> None:
        """Put a stored value's post cotangent where the expansion computed it."""
        sub: Frame | None = frame
        for if_op, region in self.plan.paths[v]:
            sub = sub.subs[if_op][region][1] if sub is not None and if_op in sub.subs else None
        if sub is None:
            return
        self.add(sub, s, d if sub.pos is None else d[sub.pos])
