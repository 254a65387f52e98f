"""An inference call's post segment, all heights, as one native run.

The Python post loop cost ~40 us per height whatever the hidden size (~1
ms of a 25-tree TreeLSTM batch, on one core while the team's other thread
waited). Here the heights' work is laid out as records for `split`'s
dispatcher before anything runs: each op of a height's branch is one step
(children's rows gathered by index, concatenation by row copies into
column slices, products as SGEMM or few-row kernel parts split by weight
rows, row kernels split by rows, per-tree arrays read at each row's root),
independent ops share a step, and one team runs all steps with a barrier
between them. Values live in scratch buffers of the largest height's rows,
reused by every height; an op whose result the function returns writes
straight into the batch's result rows.

It takes the post programs inference produces for structure-driven models
(a leaf/internal branch whose regions hold only those ops; every height
takes one region). Anything else, and an inference call with gradients,
runs the Python loop (`schedule.py`). A failed index check or row kernel
check stops nothing native: the batch is run again by the Python loop,
which raises the located error.
"""

from __future__ import annotations

import ctypes
from array import array
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType

from recir.batching import blas, kernels, smallgemm, split
from recir.batching.blas import NO_TRANS, ROW_MAJOR, TRANS
from recir.batching.execute import GROUP, IF, INVOKE, KERNEL, RETURN, Runner
from recir.batching.kernels import PerRoot, dtype_of
from recir.batching.native import Context, length
from recir.dialects import tmath


class Unsupported(Exception):
    """A post program this pass does not take (the Python loop runs it)."""


def layout(value: Any) -> tuple[tuple[int, ...], Any]:
    typ = value.type
    if isinstance(typ, TensorType):
        return tuple(typ.get_shape()), dtype_of(typ.element_type)
    return (), dtype_of(typ)


class Op:
    """One op of a region: `kind`, its operand and result slots, its step."""

    __slots__ = ("kind", "ins", "outs", "step", "extra")

    def __init__(self, kind: str, ins: tuple[int, ...], outs: tuple[int, ...], extra: Any):
        self.kind, self.ins, self.outs, self.extra, self.step = kind, ins, outs, extra, 0


class Step:
    """The ops of a region that run together, and the yields copied after them."""

    __slots__ = ("ops", "copies")

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.copies: list[tuple[int, int, int]] = []  # (result position, slot, width)


class Region:
    """A branch's ops in step order, and where its yields go."""

    def __init__(self, runner: Runner, prog: list[tuple[Any, ...]], results: list[int]):
        self.ops: list[Op] = []
        self.layouts: dict[int, tuple[tuple[int, ...], Any]] = {}
        made: dict[int, int] = {}  # slot -> step that makes it
        for code, op, _, args, outs, flags, per_root in prog:
            if code == RETURN:
                self.yields = list(args)
                break
            if code == INVOKE:
                new = Op("invoke", (), outs, runner.plan.sites[op])
            elif code == GROUP:
                assert runner.kernels is not None
                new = Op("rows", args, outs, (op, runner.kernels.layout[id(op)][0]))
            elif code == KERNEL and not per_root:
                kind = self.kernel_kind(runner, op, flags)
                new = Op(kind, args, outs, [length(v) for v in op.operands]
                         if kind == "concat" else None)
            else:
                raise Unsupported(op)
            new.step = 1 + max((made.get(s, -1) for s in new.ins), default=-1)
            values = op.outputs if code == GROUP else op.results
            for s, v in zip(outs, values, strict=True):
                made[s] = new.step
                self.layouts[s] = layout(v)
            self.ops.append(new)
        else:
            raise Unsupported("no yield")
        # a yielded value made here is written into its result rows directly
        # a child's result read only by a concat is copied into its columns
        uses: dict[int, int] = {}
        for used in [*(s for o in self.ops for s in o.ins), *self.yields]:
            uses[used] = uses.get(used, 0) + 1
        invoked = {s for o in self.ops if o.kind == "invoke" for s in o.outs}
        self.alias: dict[int, tuple[int, int]] = {}  # slot -> (concat's slot, byte column)
        for o in self.ops:
            if o.kind == "concat":
                column = 0
                for s, width in zip(o.ins, o.extra, strict=True):
                    if s in invoked and uses[s] == 1:
                        self.alias[s] = (o.outs[0], column)
                    column += 4 * width
        self.direct: dict[int, int] = {}
        self.copies: list[tuple[int, int]] = []  # (result position, slot)
        for position, s in zip(results, self.yields, strict=True):
            if s in made and s not in self.direct:
                self.direct[s] = position
            else:
                self.copies.append((position, s))
        steps = 1 + max([op.step for op in self.ops] + [
            made.get(s, -1) + 1 for _, s in self.copies] + [0])
        self.by_step = [Step() for _ in range(steps)]
        for new in self.ops:
            self.by_step[new.step].ops.append(new)
        for position, s in self.copies:
            width = length(runner.plan.rec.body.block.last_op.operands[position])  # type: ignore[union-attr]
            self.by_step[made.get(s, -1) + 1].copies.append((position, s, width))

    @staticmethod
    def kernel_kind(runner: Runner, op: Any, flags: tuple[bool, ...]) -> str:
        kinds = runner.plan.kinds
        if isinstance(op, tmath.MatvecOp) and flags == (False, True):
            return "product"
        if isinstance(op, tmath.ConcatOp) and all(flags) and all(
                len(tmath.shape_of(v)) == 1 for v in op.operands):
            return "concat"
        if isinstance(op, tmath.GatherOp) and flags == (False, True):
            return "gather"
        if isinstance(op, tmath.ExtractOp) and kinds.get(op.operands[0]) == "R" and flags[1]:
            return "pick"
        raise Unsupported(op)


class NativePost:
    """The post loop of `Schedule` for inference, as one `split.steps_runner` run."""

    def __init__(self, runner: Runner):
        self.runner = runner
        block = runner.plan.rec.body.block
        top = runner.program(block, "post")
        self.scratch: dict[int, np.ndarray] = {}
        self.contexts = (Context * 0)()
        self.pred: int | None = None
        try:
            if len(top) == 2 and top[0][0] == IF and top[1][0] == RETURN:
                code, op, _, args, outs, _, _ = top[0]
                self.pred = args[0]
                positions = [[p for p, s in enumerate(top[1][3]) if s == r] for r in outs]
                if any(len(p) != 1 for p in positions):
                    raise Unsupported(op)
                results = [p[0] for p in positions]
                blocks = runner.branch(op)[0]
                self.regions = [Region(runner, runner.program(b, "post"), results)
                                for b in blocks]
            else:
                self.regions = [Region(runner, top, list(range(len(top[-1][3]))))]
            self.ok = runner.kernels is not None and split.steps_runner() is not None
        except Unsupported:
            self.ok = False

    # -- one call ---------------------------------------------------------
    def run(self, schedule: Any) -> bool:
        """Fill `schedule.results`; False where this batch needs the Python loop."""
        bounds = [int(b) for b in schedule.bounds]
        heights = list(zip(bounds[:-1], bounds[1:], strict=True))
        taken = self.branches(schedule, heights)
        if taken is None:
            return False
        try:
            plan = Plan(self, schedule, max(hi - lo for lo, hi in heights))
            for (lo, hi), region in zip(heights, taken, strict=True):
                plan.height(self.regions[region], lo, hi)
        except Unsupported:
            self.ok = False  # a layout or value kind that does not change between calls
            return False
        return plan.run()

    def branches(self, schedule: Any, heights: list[tuple[int, int]]) -> list[int] | None:
        if self.pred is None:
            return [0] * len(heights)
        pred = schedule.stored.get(self.pred)
        if pred is None:
            return None
        taken = []
        for lo, hi in heights:
            rows = pred[lo:hi]
            if rows.all():
                taken.append(0)
            elif not rows.any():
                taken.append(1)
            else:
                return None
        return taken

    def buffer(self, slot: int, shape: tuple[int, ...], dtype: Any, rows: int) -> np.ndarray:
        found = self.scratch.get(slot)
        if found is None or found.shape[0] < rows:
            found = self.scratch[slot] = np.empty((rows, *shape), dtype)
        return found

    def context_block(self, count: int) -> int:
        if len(self.contexts) < count:
            self.contexts = (Context * max(count, 2 * len(self.contexts)))()
        ctypes.memset(self.contexts, 0, ctypes.sizeof(self.contexts))
        return ctypes.addressof(self.contexts)


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class Plan:
    """The records of one call, height by height. Addresses are looked up
    once per call; a height only adds its first row's offset."""

    def __init__(self, post: NativePost, schedule: Any, rows: int):
        self.post, self.schedule, self.capacity = post, schedule, rows
        self.runner = post.runner
        self.threads = kernels.split_threads()
        self.words = array("q")
        self.offsets = array("q")
        self.starts = array("q", [0])
        self.error = np.zeros(1, np.int64)
        self.err = address(self.error)
        self.contexts = 0
        self.row_kernels: list[int] = []  # record index of each row kernel part
        self.sgemm = split.address(blas.sgemm())
        self.nt = split.address(smallgemm.kernel())
        self.roots = np.ascontiguousarray(schedule.roots, np.int64)
        self.keep: list[Any] = [self.roots]
        # slot -> (address of row 0, row bytes, whether the rows are the batch's)
        self.places: dict[int, tuple[int, int, bool]] = {}
        self.shared: dict[int, Any] = {}
        self.placed: set[int] = set()

    def add(self, record: list[int]) -> None:
        words = self.words
        self.offsets.append(len(words))
        words.extend(record)

    def end_step(self) -> None:
        if len(self.offsets) > self.starts[-1]:
            self.starts.append(len(self.offsets))

    def place(self, region: Region) -> None:
        """Where the region's values live: the result rows or a scratch buffer."""
        results = self.schedule.results
        for s, (shape, dtype) in region.layouts.items():
            position = region.direct.get(s)
            if s in region.alias:
                continue
            if position is not None:
                out = results[position]
                if out.dtype != dtype or out.shape[1:] != shape:
                    raise Unsupported(s)
                self.places[s] = (address(out), out.strides[0], True)
            else:
                buf = self.post.buffer(s, shape, dtype, self.capacity)
                self.places[s] = (address(buf), buf.strides[0], False)
        for s, (concat, column) in region.alias.items():
            base, row, moves = self.places[concat]
            self.places[s] = (base + column, row, moves)
        self.placed.add(id(region))

    def at(self, slot: int, lo: int, dtype: Any, width: int) -> tuple[int, int]:
        """(address of this height's first row of `slot`, row stride in bytes)."""
        found = self.places.get(slot)
        if found is None:
            stored = self.schedule.stored.get(slot)
            if stored is None or stored.dtype != dtype or not stored.flags.c_contiguous or \
                    stored.size != stored.shape[0] * width:
                raise Unsupported(slot)
            found = self.places[slot] = (address(stored), stored.itemsize * width, True)
        base, row, moves = found
        return (base + lo * row if moves else base), row

    def fixed(self, slot: int) -> Any:
        """A value the same for every row (a weight) or a per-tree array."""
        schedule = self.schedule
        x = schedule.fixed[slot] if slot in schedule.fixed else self.runner.consts.get(slot)
        if x is None:
            raise Unsupported(slot)
        return x

    def shared_row(self, slot: int, width: int, dtype: Any) -> int:
        found = self.shared.get(slot)
        if found is None:
            x = kernels_row(self.fixed(slot), width, dtype)
            self.keep.append(x)
            found = self.shared[slot] = address(x)
        return found

    def weight(self, slot: int) -> tuple[int, int, int, int]:
        """(address, rows, columns, row stride in floats) of a weight matrix."""
        found = self.shared.get(slot)
        if found is None:
            w = self.fixed(slot)
            if not isinstance(w, np.ndarray) or w.dtype != np.float32 or w.ndim != 2 or \
                    w.strides[1] != 4:
                raise Unsupported(slot)
            found = self.shared[slot] = (address(w), *w.shape, w.strides[0] // 4)
        return found

    def height(self, region: Region, lo: int, hi: int) -> None:
        if id(region) not in self.placed:
            self.place(region)
        n = hi - lo
        for step in region.by_step:
            for op in step.ops:
                getattr(self, op.kind)(op, region, lo, n)
            for position, s, width in step.copies:
                self.copy_out(position, s, width, lo, n)
            self.end_step()

    # -- records of each kind of op ----------------------------------------
    def invoke(self, op: Op, region: Region, lo: int, n: int) -> None:
        found = self.shared.get(("children", op.extra))
        if found is None:
            children = self.schedule.child[op.extra]
            found = self.shared[("children", op.extra)] = (address(children), len(children), [
                (address(result), result.strides[0]) for result in self.schedule.results])
        children, total, sources = found
        index = children + 8 * lo
        for s, (src, row) in zip(op.outs, sources, strict=True):
            dst, dst_row = self.at(s, lo, None, 0)
            self.add([split.COPY, 0, dst, dst_row, src, row, row, index, 8, total, n, self.err])

    def concat(self, op: Op, region: Region, lo: int, n: int) -> None:
        dst, dst_row = self.at(op.outs[0], lo, np.float32, 0)
        column = 0
        for s, width in zip(op.ins, op.extra, strict=True):
            if s in region.alias:  # the child's rows were copied here
                column += 4 * width
                continue
            src, src_row = self.at(s, lo, np.float32, width)
            self.add([split.COPY, 0, dst + column, dst_row, src, src_row, 4 * width, 0, 0, 0,
                      n, self.err])
            column += 4 * width

    def gather(self, op: Op, region: Region, lo: int, n: int) -> None:
        table, rows, _, ld = self.weight(op.ins[0])
        index, _ = self.at(op.ins[1], lo, np.int32, 1)
        dst, dst_row = self.at(op.outs[0], lo, np.float32, 0)
        self.add([split.COPY, 0, dst, dst_row, table, 4 * ld, 4 * ld, index, 4, rows, n,
                  self.err])

    def pick(self, op: Op, region: Region, lo: int, n: int) -> None:
        found = self.shared.get(op.ins[0])
        if found is None:
            tree = self.fixed(op.ins[0])
            if not isinstance(tree, PerRoot) or tree.flat is None or tree.flat.itemsize != 4:
                raise Unsupported(op)
            flat = np.ascontiguousarray(tree.flat)
            self.keep.append(flat)
            found = self.shared[op.ins[0]] = (address(flat), address(tree.offsets),
                                              address(tree.lengths))
        index, _ = self.at(op.ins[1], lo, np.int32, 1)
        dst, _ = self.at(op.outs[0], lo, np.int32, 0)
        self.add([split.PICK, 0, dst, *found, address(self.roots) + 8 * lo, index, n, self.err])

    def product(self, op: Op, region: Region, lo: int, n: int) -> None:
        wp, rows, k, ldw = self.weight(op.ins[0])
        x, x_row = self.at(op.ins[1], lo, np.float32, k)
        y, y_row = self.at(op.outs[0], lo, np.float32, 0)
        ldx, ldy = x_row // 4, y_row // 4
        if rows < kernels.NARROW:  # a classifier: the few-row kernel on shares of x's rows
            parts = self.threads if self.threads > 1 and n * rows * k >= kernels.SPLIT_FLOPS \
                else 1
            for a, b in split.ranges(n, parts, 4):
                self.add([split.NT, self.nt, b - a, rows, k, x + a * x_row, ldx, wp, ldw,
                          y + a * y_row, ldy])
            return
        parts = self.threads if n * rows * k >= kernels.SPLIT_FLOPS else 1
        small = n <= kernels.SMALL_ROWS[1]
        for a, b in split.ranges(rows, parts, smallgemm.NT_COLS if small else 16):
            if small:
                self.add([split.NT, self.nt, n, b - a, k, x, ldx, wp + 4 * a * ldw, ldw,
                          y + 4 * a, ldy])
            else:
                self.add([split.SGEMM, self.sgemm, ROW_MAJOR, NO_TRANS, TRANS, n, b - a, k,
                          ONE, x, ldx, wp + 4 * a * ldw, ldw, 0, y + 4 * a, ldy])

    def rows(self, op: Op, region: Region, lo: int, n: int) -> None:
        group, ins_layout = op.extra
        pointers: list[tuple[int, int]] = []
        for s, (batched, width, dtype) in zip(op.ins, ins_layout, strict=True):
            pointers.append(self.at(s, lo, dtype, width) if batched else
                            (self.shared_row(s, width, dtype), 0))
        pointers += [self.at(s, lo, np.float32, 0) for s in op.outs]
        compiled = self.runner.kernels
        fn = compiled.compiled[id(group)][0]
        for a, b in split.ranges(n, compiled.threads(group, n)):
            self.row_kernels.append(len(self.offsets))
            self.add([split.ROWS + len(pointers), fn.address, self.contexts, b - a,
                      *[p + a * row for p, row in pointers]])
            self.contexts += 1

    def copy_out(self, position: int, s: int, width: int, lo: int, n: int) -> None:
        out = self.schedule.results[position]
        row = out.strides[0]
        if s in self.places or s in self.schedule.stored:
            src, src_row = self.at(s, lo, out.dtype, width)
        else:
            src, src_row = self.shared_row(s, width, out.dtype), 0
        self.add([split.COPY, 0, address(out) + lo * row, row, src, src_row, row, 0, 0, 0, n,
                  self.err])

    # -- the run -----------------------------------------------------------
    def run(self) -> bool:
        base = self.post.context_block(self.contexts)
        size = ctypes.sizeof(Context)
        words = np.frombuffer(self.words, np.int64)
        at = np.frombuffer(self.offsets, np.int64)[self.row_kernels] + 2
        words[at] = base + size * words[at]  # context indices -> addresses
        steps = len(self.starts) - 1
        counters = np.zeros(max(steps, 1), np.int64)
        kernels.blas_threads_for(0)  # OpenBLAS on one thread inside the parts
        split.steps_runner()(address(words), address(np.frombuffer(self.offsets, np.int64)),
                             address(np.frombuffer(self.starts, np.int64)), steps,
                             address(counters), self.threads)
        if self.error[0]:
            return False
        errors = np.frombuffer(self.post.contexts, np.int32).reshape(len(self.post.contexts), -1)
        return not errors[:self.contexts, 2].any()  # Context.error


ONE = split.bits(1.0)


def kernels_row(x: Any, width: int, dtype: Any) -> np.ndarray:
    """A shared value as one contiguous row of `width` elements."""
    a = np.ascontiguousarray(np.asarray(x), dtype)
    if a.size != width:
        if a.size != 1:
            raise Unsupported(x)
        a = np.full(width, a.reshape(()), dtype)
    return a
