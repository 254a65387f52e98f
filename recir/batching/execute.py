"""Evaluate a block of IR once for a whole frontier.

A `Frame` is one evaluation of a block over `n` invocations: `env` maps value
slots (an int per SSA value, `Runner.slot`) to arrays with a leading frontier
axis (kind B) or to one shared value (U, R). A branch partitions the frontier
by its predicate: each region runs in a child frame over the rows that took
it (`idx`, positions in the parent), reading outer values restricted to those
rows, and the yields are scattered back. Frames are kept: they are the tape
the batched backward reads (`grad.py`).

Blocks are compiled once into instruction tuples, so the per-op cost at run
time is a tuple unpack, dict lookups on ints and the NumPy call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import scf
from xdsl.ir import Block, Operation, SSAValue

from recir.batching.kernels import INTO, KERNELS, PER_ROOT_OPS, PerRoot, constant, into
from recir.batching.native import Kernels, RowGroup, make_groups
from recir.passes.frontier_segments import CONSTANTS, TERMINATORS, Plan
from recir.diagnostics import RecirError, emit_error
from recir.dialects import invoke, tmath

# ops whose result is a fresh array (not a view, not a stored or parent value)
FRESH = (tmath.MatvecOp, tmath.AddOp, tmath.SubOp, tmath.MulOp, tmath.ConcatOp,
         tmath.TanhOp, tmath.SigmoidOp)

KERNEL, IF, INVOKE, RETURN, GROUP = range(5)


class Frame:
    """One block evaluated over a frontier of `n` invocations."""

    __slots__ = ("__weakref__", "env", "n", "roots", "up", "idx", "pos", "subs", "base",
                 "cot")

    def __init__(self, n: int, roots: np.ndarray, parent: Frame | None = None,
                 idx: np.ndarray | None = None, base: Callable[[int], Any] | None = None):
        self.env: dict[int, Any] = {}
        self.n, self.roots, self.idx, self.base = n, roots, idx, base
        # weak: a parent holds its children (`subs`), and a cycle would keep a
        # batch's arrays alive until Python's cyclic collector ran (measured: the
        # heap grew by ~10 MB a batch, each new page a fault, at h=256)
        self.up = weakref.ref(parent) if parent is not None else None
        # rows in the top frame (None: all of them, in order)
        if parent is None or parent.pos is None:
            self.pos = idx
        else:
            self.pos = parent.pos if idx is None else parent.pos[idx]
        self.subs: dict[Operation, list[tuple[Any, Any]]] = {}
        self.cot: dict[int, Any] = {}

    @property
    def parent(self) -> Frame | None:
        return self.up() if self.up is not None else None

    def child(self, idx: np.ndarray | None) -> Frame:
        if idx is None:
            return Frame(self.n, self.roots, self, None)
        return Frame(len(idx), self.roots[idx], self, idx)


class Runner:
    """Runs blocks of a plan over frames; invokes call back into `on_invoke`."""

    def __init__(self, plan: Plan, native: bool = False, gradients: bool = False):
        """`native`: run row-wise op groups as compiled row kernels (`native.py`),
        with their backward kernels too if `gradients`."""
        self.plan = plan
        self.slot: dict[SSAValue, int] = {}
        self.consts: dict[int, Any] = {}
        for fn in (plan.entry, plan.rec):
            for op in fn.walk():
                for region in op.regions:
                    for block in region.blocks:
                        for arg in block.args:
                            self.slot_of(arg)
                for r in op.results:
                    self.slot_of(r)
                if isinstance(op, CONSTANTS):
                    self.consts[self.slot[op.results[0]]] = constant(op)
        self.batched = [False] * len(self.slot)
        for v, s in self.slot.items():
            self.batched[s] = plan.kinds.get(v, "U") != "U"
        self.programs: dict[tuple[Block, str], list[tuple[Any, ...]]] = {}
        self.on_invoke: Callable[[invoke.InvokeOp, Frame, str], list[Any]] | None = None
        self.kernels: Kernels | None = None
        self.groups: dict[tuple[Operation, ...], RowGroup] = {}
        self.branches: dict[scf.IfOp, Any] = {}
        self.tape = gradients
        self.fast_post: Any = None
        self.fast_expand: Any = None
        if native:
            self.compile_groups(gradients)

    def compile_groups(self, gradients: bool) -> None:
        """The row groups of every program a run may use, compiled at once."""
        blocks = [(self.plan.entry.body.block, ("all",))] + [
            (b, ("expand", "post", "all")) for op in self.plan.rec.walk()
            for r in op.regions for b in r.blocks]
        for block, phases in blocks:
            for phase in phases:
                try:
                    prog = self.raw_program(block, phase)
                except RecirError:
                    continue  # an op without a kernel: an error if this program runs
                for group in self.row_groups(prog, block):
                    self.groups.setdefault(tuple(group.members), group)
        self.kernels = Kernels(list(self.groups.values()), gradients)

    def native_post(self) -> Any:
        """The post segment as one native run (`native_post.py`), with row
        kernels; None where it does not apply."""
        if self.kernels is None:
            return None
        if self.fast_post is None:
            from recir.batching.native_post import NativePost

            self.fast_post = NativePost(self)
        return self.fast_post if self.fast_post.ok else None

    def start_call(self) -> None:
        """A call of the function starts: its native forwards' lanes from the first."""
        if self.fast_post is not None:
            self.fast_post.next_lane = 0

    def native_expand(self) -> Any:
        """The expand segment as one native loop (`native_expand.py`) where it
        is integer work only; None where it is not (or not native)."""
        if self.kernels is None:
            return None
        if self.fast_expand is None:
            from recir.batching.native_expand import NativeExpand

            self.fast_expand = NativeExpand(self.plan)
        return self.fast_expand if self.fast_expand.ok else None

    def row_groups(self, prog: list[tuple[Any, ...]], block: Block) -> list[RowGroup]:
        ops = [ins[1] for ins in prog if ins[0] == KERNEL]
        return make_groups(ops, block, self.plan.kinds)

    def slot_of(self, v: SSAValue) -> int:
        s = self.slot.get(v)
        if s is None:
            s = self.slot[v] = len(self.slot)
        return s

    def program(self, block: Block, phase: str) -> list[tuple[Any, ...]]:
        """`block`'s ops that `phase` runs as (code, op, kernel, args, results,
        flags, per-root operand positions), constants left out; each compiled
        row group replaces its members (at its last member's place)."""
        key = (block, phase)
        found = self.programs.get(key)
        if found is not None:
            return found
        prog = self.raw_program(block, phase)
        if self.kernels is not None:
            prog = self.fuse(prog, block)
        self.programs[key] = prog
        return prog

    def fuse(self, prog: list[tuple[Any, ...]], block: Block) -> list[tuple[Any, ...]]:
        slot = self.slot
        last: dict[Operation, RowGroup] = {}
        members: set[Operation] = set()
        for group in self.row_groups(prog, block):
            known = self.groups.get(tuple(group.members))
            if known is None:
                continue
            last[known.members[-1]] = known
            members.update(known.members)
        fused = []
        for ins in prog:
            group = last.get(ins[1])
            if group is not None:
                fused.append((GROUP, group, None, tuple(slot[v] for v in group.inputs),
                              tuple(slot[v] for v in group.outputs), tuple(group.batched), ()))
            elif ins[1] not in members:
                fused.append(ins)
        return fused

    def raw_program(self, block: Block, phase: str) -> list[tuple[Any, ...]]:
        kinds, slot = self.plan.kinds, self.slot
        prog: list[tuple[Any, ...]] = []
        for op in self.plan.block_ops(block, phase):
            if isinstance(op, CONSTANTS):
                continue
            args = tuple(slot[v] for v in op.operands)
            results = tuple(slot[r] for r in op.results)
            flags = tuple(kinds.get(v) != "U" for v in op.operands)
            per_root = () if isinstance(op, (*PER_ROOT_OPS, invoke.InvokeOp)) else tuple(
                k for k, v in enumerate(op.operands) if kinds.get(v) == "R")
            if isinstance(op, TERMINATORS):
                prog.append((RETURN, op, None, args, results, flags, per_root))
            elif isinstance(op, scf.IfOp):
                prog.append((IF, op, None, args, results, flags, per_root))
            elif isinstance(op, invoke.InvokeOp):
                prog.append((INVOKE, op, None, (), results, flags, ()))  # reads its own
            else:
                kernel = KERNELS.get(type(op))
                if kernel is None:
                    raise emit_error(op, "has no batched kernel (frontier batching)")
                if self.overwrites(op, flags):
                    kernel = into
                prog.append((KERNEL, op, kernel, args, results, flags, per_root))
        return prog

    def overwrites(self, op: Operation, flags: tuple[bool, ...]) -> bool:
        """Whether `op` may write over its first operand: an array a fresh-result
        kernel made in the same block, used only here, of the result's shape."""
        if type(op) not in INTO or not flags[0] or (len(flags) > 1 and not (
                flags[1] or len(tmath.shape_of(op.operands[1])) <= 1)):
            return False
        first = op.operands[0]
        owner = first.owner
        return (isinstance(owner, FRESH) and owner.parent_block() is op.parent_block()
                and len(list(first.uses)) == 1 and first.type == op.results[0].type
                and owner not in self.plan.expand and op not in self.plan.expand
                and first not in self.plan.stored)

    def lookup(self, frame: Frame, s: int) -> Any:
        """A value not computed in `frame`: a constant, the parent's rows, the base."""
        if s in self.consts:
            found = self.consts[s]
        elif frame.up is not None:
            parent = frame.up()
            assert parent is not None, "a frame outlived its parent"
            found = self.lookup(parent, s) if s not in parent.env else parent.env[s]
            if frame.idx is not None and self.batched[s] and not isinstance(found, PerRoot):
                found = found[frame.idx]
        elif frame.base is not None:
            found = frame.base(s)
        else:
            raise KeyError(s)
        frame.env[s] = found
        return found

    def value(self, frame: Frame, v: SSAValue) -> Any:
        """The rows of `v` (a per-root input read at the frame's roots)."""
        s = self.slot[v]
        x = frame.env[s] if s in frame.env else self.lookup(frame, s)
        return self.rows(frame, x, None) if isinstance(x, PerRoot) else x

    def rows(self, frame: Frame, x: PerRoot, op: Operation | None) -> Any:
        if x.array is None:
            raise emit_error(op, "reads a per-tree structure array where it needs a "
                             "fixed shape")
        return x.array[frame.roots]

    def run_block(self, frame: Frame, block: Block, phase: str) -> list[Any]:
        """Evaluate the ops of `block` that `phase` runs; the terminator's operands."""
        env = frame.env
        lookup = self.lookup
        for code, op, kernel, args, results, flags, per_root in self.program(block, phase):
            vals = [env[s] if s in env else lookup(frame, s) for s in args]
            for k in per_root:
                vals[k] = self.rows(frame, vals[k], op)
            if code == KERNEL:
                outs = kernel(op, vals, flags, frame)
            elif code == GROUP:
                outs = self.kernels.forward(op, vals, frame.n)  # type: ignore[union-attr]
            elif code == RETURN:
                return vals
            elif code == IF:
                outs = self.run_if(frame, op, phase, vals[0], self.batched[args[0]])
            else:
                assert self.on_invoke is not None
                outs = self.on_invoke(op, frame, phase)
            for s, x in zip(results, outs):
                env[s] = x
        return []

    def branch(self, op: scf.IfOp) -> tuple[list[Block], list[bool], list[list[bool]]]:
        """An if's region blocks, whether each result is batched and whether
        each region's yields are (read off the IR once)."""
        found = self.branches.get(op)
        if found is None:
            blocks = [r.block for r in op.regions]
            yields = [b.last_op.operands for b in blocks]  # type: ignore[union-attr]
            found = self.branches[op] = (
                blocks, [self.batched[self.slot[r]] for r in op.results],
                [[self.batched[self.slot[v]] for v in values] for values in yields])
        return found

    def run_if(self, frame: Frame, op: scf.IfOp, phase: str, pred: Any, batched: bool
               ) -> list[Any]:
        """Partition the frontier by the (`batched`) predicate; each region on its rows."""
        whole = phase == "expand" and op in self.plan.expand
        inner = "all" if whole else phase  # a branch an invoke argument needs: run it whole
        if not batched:
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
        record: list[tuple[Any, Any]] = [(None, None), (None, None)]
        for (idx, region), sub in zip(parts, subs, strict=True):
            record[region] = (idx, sub)
        frame.subs[op] = record
        blocks, results, _ = self.branch(op)
        outs = [self.run_block(sub, blocks[region], inner)
                for (_, region), sub in zip(parts, subs, strict=True)]
        if (phase == "expand" and not whole) or not results:
            return [None] * len(results)
        return self.merge(frame, op, parts, outs)

    def merge(self, frame: Frame, op: scf.IfOp, parts: list[Any], outs: list[Any]) -> list[Any]:
        """The if's results over the whole frontier from each region's yields."""
        _, batched, yields = self.branch(op)
        merged = []
        for k, wide in enumerate(batched):
            if not wide:
                merged.append(outs[0][k])
                continue
            values = [out[k] if yields[region][k] else self.widen(
                len(idx) if idx is not None else frame.n, out[k])
                for (idx, region), out in zip(parts, outs, strict=True)]
            if len(parts) == 1:
                merged.append(values[0])
                continue
            out = np.empty((frame.n, *values[0].shape[1:]), values[0].dtype)
            for (idx, _), v in zip(parts, values, strict=True):
                out[idx] = v
            merged.append(out)
        return merged

    @staticmethod
    def widen(n: int, x: Any) -> Any:
        """A uniform yield as rows of a B result: broadcast over the rows."""
        x = np.asarray(x)
        return np.broadcast_to(x, (n, *x.shape)).copy()
