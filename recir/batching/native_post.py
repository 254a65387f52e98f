"""A call's post segment, all heights, as one native run.

A Python post loop pays its overhead per height whatever the hidden size
(on one core, while the team's other thread waits). Here the heights' work is laid out as records for `split`'s
dispatcher before anything runs: each op of a height's branch is one step
(children's rows gathered by index, concatenation by row copies into
column slices, products as SGEMM or few-row kernel parts split by weight
rows, row kernels split by rows, per-tree arrays read at each row's root),
independent ops share a step, and one team runs all steps with a barrier
between them. In inference, values live in scratch buffers of the largest
height's rows, reused by every height; a gradient call keeps every row
(buffers of the batch's rows, kept between calls) and leaves the frames
the backward reads as views of them. An op whose result the function
returns writes straight into the batch's result rows.

It takes the post programs of structure-driven models (a leaf/internal
branch whose regions hold only those ops; every height takes one region).
Anything else runs the Python loop (`schedule.py`). A failed index check
or row kernel check stops nothing native: the batch is run again by the
Python loop, which raises the located error.
"""

from __future__ import annotations

import ctypes
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType

from recir.backend.array_address import data_address
from recir.batching import distinct, kernels, smallgemm, split
from recir.batching.execute import GROUP, IF, INVOKE, KERNEL, RETURN, Runner
from recir.batching.kernels import PerRoot, dtype_of
from recir.batching.native import Context, length
from recir.dialects import tmath

Emit = Callable[[int, int], None]  # a height's records from its (first row, rows)


def nothing(lo: int, n: int) -> None:
    pass


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
        # a yielded value made here is written into its result rows directly
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
        self.pair = distinct.find(self.ops, self.yields, self.alias)

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
    """The post loop of `Schedule`, as one `split.runner` run."""

    def __init__(self, runner: Runner):
        self.runner = runner
        block = runner.plan.rec.body.block
        top = runner.program(block, "post")
        self.tags: dict[Any, int] = {}  # `Symbols`' tags, the same in every lane and call
        self.lanes: list[Lane] = []
        self.next_lane = 0  # a gradient call's next forward takes this lane
        self.templates: dict[tuple[int, int, int], Template] = {}  # (region, rows, threads)
        self.contexts = (Context * 0)()
        self.pred: int | None = None
        self.tape = runner.tape
        try:
            if len(top) == 2 and top[0][0] == IF and top[1][0] == RETURN:
                code, op, _, args, outs, _, _ = top[0]
                self.pred, self.branch = args[0], op
                positions = [[p for p, s in enumerate(top[1][3]) if s == r] for r in outs]
                if any(len(p) != 1 for p in positions):
                    raise Unsupported(op)
                results = [p[0] for p in positions]
                blocks = runner.branch(op)[0]
                self.regions = [Region(runner, runner.program(b, "post"), results)
                                for b in blocks]
            else:
                self.regions = [Region(runner, top, list(range(len(top[-1][3]))))]
            self.ok = runner.kernels is not None and split.runner() is not None
        except Unsupported:
            self.ok = False

    # -- one call ---------------------------------------------------------
    def run(self, schedule: Any) -> bool:
        """Fill `schedule.results`; False where this batch needs the Python loop."""
        bounds = [int(b) for b in schedule.bounds]
        heights = list(zip(bounds[:-1], bounds[1:], strict=True))
        taken = self.branches(schedule, bounds)
        if taken is None:
            return False
        # a gradient call keeps every height's values for the backward
        rows = schedule.total if self.tape else max(hi - lo for lo, hi in heights)
        plan = Plan(self, self.lane(), schedule, rows)
        try:
            for (lo, hi), region in zip(heights, taken, strict=True):
                plan.height(self.regions[region], lo, hi)
        except Unsupported:
            self.ok = False  # a layout or value kind that does not change between calls
            return False
        finally:
            plan.emitters.clear()  # they refer to the plan: a cycle would keep the batch
        if not plan.run():
            return False
        if self.tape:  # what the backward reads (`native_grad.py`)
            from recir.batching.native_grad import Tape

            schedule.native = Tape(self, plan, heights, taken)
        return True

    def branches(self, schedule: Any, bounds: list[int]) -> list[int] | None:
        """The region each height takes (0: then, 1: else); None if one mixes them."""
        if self.pred is None:
            return [0] * (len(bounds) - 1)
        pred = schedule.stored.get(self.pred)
        if pred is None:
            return None
        taken = np.add.reduceat(pred.astype(np.int64), bounds[:-1])
        sizes = np.diff(bounds)
        if ((taken != 0) & (taken != sizes)).any():
            return None
        return (taken == 0).astype(np.int64).tolist()

    def lane(self) -> Lane:
        """Inference reuses one lane (its results are copied out before the
        next forward); a gradient call's forwards each keep their own until
        the backward (`Runner.start_call` starts again at the first)."""
        k = self.next_lane if self.tape else 0
        self.next_lane += self.tape
        while len(self.lanes) <= k:
            self.lanes.append(Lane(self.tags))
        return self.lanes[k]

    @staticmethod
    def buffer(slot: int, shape: tuple[int, ...], dtype: Any, rows: int,
               kept: dict[int, np.ndarray]) -> np.ndarray:
        """`slot`'s buffer of at least `rows` rows in `kept`, kept between calls."""
        found = kept.get(slot)
        if found is None or found.shape[0] < rows:
            found = kept[slot] = np.empty((rows, *shape), dtype)
        return found

    def context_block(self, count: int) -> int:
        if len(self.contexts) < count:
            self.contexts = (Context * max(count, 2 * len(self.contexts)))()
        ctypes.memset(self.contexts, 0, ctypes.sizeof(self.contexts))
        return ctypes.addressof(self.contexts)


TAG_SHIFT = 48  # user-space addresses are below 2^47: bits 48-62 are free for a tag
TAG_MASK = (1 << TAG_SHIFT) - 1


class Lane:
    """One forward's buffers and the values of its tags: a gradient call
    whose entry invokes @f twice keeps both tapes until its backward."""

    def __init__(self, tags: dict[Any, int]):
        self.scratch: dict[int, np.ndarray] = {}  # values (a gradient call's: every row)
        self.cotangents: dict[int, np.ndarray] = {}  # the backward's (`native_grad.py`)
        self.symbols = Symbols(tags)


class Symbols:
    """A call's own values in records (the addresses of its arrays, its
    invocation count) as tags: `tag << 48` plus any offset. A height's
    records are then the same in every call with its row count, so they are
    planned once and kept (`Template`); each call resolves the tags once,
    with one vectorized pass over all its words."""

    def __init__(self, tags: dict[Any, int]) -> None:
        self.tags = tags  # a value's key -> its tag, the same in every call
        self.values = np.zeros(64, np.int64)  # tag -> this call's value

    def __call__(self, key: Any, value: int) -> int:
        """`key`'s tag, its value this call `value`."""
        tag = self.tags.get(key)
        if tag is None:
            tag = self.tags[key] = len(self.tags) + 1
            if tag >= 1 << 14:
                raise Unsupported(key)
            if tag >= len(self.values):
                self.values = np.concatenate([self.values, np.zeros_like(self.values)])
        self.values[tag] = value
        return tag << TAG_SHIFT

    def resolve(self, word: int) -> int:
        return int(self.values[word >> TAG_SHIFT]) + (word & TAG_MASK)

    def relocate(self, words: np.ndarray) -> None:
        tags = words >> TAG_SHIFT
        words += self.values[tags] - (tags << TAG_SHIFT)


class Template:
    """A region's records at one row count, from its first row `lo`: the
    words are `base + lo * per_row` (pointers move by a row's bytes)."""

    __slots__ = ("base", "per_row", "offsets", "starts", "row_kernels")

    def __init__(self, first: Records, second: Records):
        self.base = np.frombuffer(first.words, np.int64).copy()
        self.per_row = np.frombuffer(second.words, np.int64) - self.base
        self.offsets = np.frombuffer(first.offsets, np.int64).copy()
        self.starts = np.frombuffer(first.starts, np.int64)[1:].copy()  # each step's end
        self.row_kernels = np.array(first.row_kernels, np.int64)
        if (self.base < 0).any():
            raise Unsupported("a negative word")  # its high bits would read as a tag


class Records:
    """Records in steps for `split.runner`, and their run on the team: those
    added directly, then each height's from its kept `Template`."""

    def __init__(self, post: NativePost, symbols: Symbols):
        self.post, self.runner = post, post.runner
        self.threads = kernels.split_threads()
        self.words, self.offsets, self.starts = array("q"), array("q"), array("q", [0])
        self.contexts = 0  # row kernel parts so far: each has a context of its own
        self.row_kernels: list[int] = []  # record index of each row kernel part
        self.sym = symbols
        self.blocks: list[tuple[Template, int]] = []  # each height's records, first row

    def planned(self, key: Any, steps: list[list[Emit]], lo: int, n: int) -> None:
        """A height's records: `steps`' emitters at (lo, n), a step each list,
        from the template kept for (`key`, n)."""
        key = (key, n, self.threads)
        template = self.post.templates.get(key)
        if template is None:
            template = self.post.templates[key] = self.template(steps, n)
        self.blocks.append((template, lo))

    def template(self, steps: list[list[Emit]], n: int) -> Template:
        """A height's records at rows 0 and 1 (the step between is per row)."""
        return Template(self.record(steps, 0, n), self.record(steps, 1, n))

    def once(self, steps: list[list[Emit]], lo: int, n: int) -> None:
        """A height's records for this call only (not kept)."""
        run = self.record(steps, lo, n)
        self.blocks.append((Template(run, run), 0))

    def record(self, steps: list[list[Emit]], lo: int, n: int) -> Records:
        """`steps`' records at (lo, n), into records of their own."""
        direct = self.words, self.offsets, self.starts, self.row_kernels, self.contexts
        run = Records(self.post, self.sym)
        self.words, self.offsets, self.starts = run.words, run.offsets, run.starts
        self.row_kernels, self.contexts = run.row_kernels, 0
        try:
            for emitters in steps:
                for emit in emitters:
                    emit(lo, n)
                self.end_step()
        finally:
            self.words, self.offsets, self.starts, self.row_kernels, self.contexts = direct
        return run

    def add(self, record: list[int]) -> None:
        words = self.words
        self.offsets.append(len(words))
        words.extend(record)

    def end_step(self) -> None:
        if len(self.offsets) > self.starts[-1]:
            self.starts.append(len(self.offsets))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(words, offsets, starts, each row kernel part's record index), the
        tags resolved: the direct records, then each height's template at its
        first row, joined with a few whole-array operations (not one set per
        height)."""
        parts = [(np.frombuffer(self.words, np.int64), np.frombuffer(self.offsets, np.int64),
                  np.frombuffer(self.starts, np.int64)[1:], np.array(self.row_kernels, np.int64))]
        parts += [(t.base, t.offsets, t.starts, t.row_kernels) for t, _ in self.blocks]
        counts = np.array([[len(a) for a in p] for p in parts], np.int64).T  # per array kind
        words = np.concatenate([p[0] for p in parts])
        if self.blocks:
            first = np.array([lo for _, lo in self.blocks], np.int64)
            words[counts[0, 0]:] += np.concatenate([t.per_row for t, _ in self.blocks]) * \
                np.repeat(first, counts[0, 1:])
        self.sym.relocate(words)
        word_at = np.cumsum(counts[0]) - counts[0]
        record_at = np.cumsum(counts[1]) - counts[1]
        offsets = np.concatenate([p[1] for p in parts]) + np.repeat(word_at, counts[1])
        starts = np.concatenate([np.zeros(1, np.int64), *(p[2] for p in parts)])
        starts[1:] += np.repeat(record_at, counts[2])
        row_kernels = np.concatenate([p[3] for p in parts]) + np.repeat(record_at, counts[3])
        return words, offsets, starts, row_kernels

    def execute(self) -> bool:
        """Run every step; False if a row kernel's check failed."""
        words, offsets, starts, row_kernels = self.arrays()
        count = len(row_kernels)
        base = self.post.context_block(count)
        at = offsets[row_kernels] + 2
        words[at] = base + ctypes.sizeof(Context) * np.arange(count)  # a context each
        steps = len(starts) - 1
        counters = np.zeros(max(steps, 1), np.int64)
        kernels.blas_threads_for(0)  # OpenBLAS on one thread inside the parts
        split.runner()(data_address(words), data_address(offsets), data_address(starts), steps,
                       data_address(counters), self.threads)
        contexts = self.post.contexts
        errors = np.frombuffer(contexts, np.int32).reshape(len(contexts), -1)
        return not errors[:count, 2].any()  # Context.error


class Plan(Records):
    """The records of one call, height by height: each height's from the
    template kept for its region and row count, this call's arrays named by
    tags (`Symbols`), resolved once before the run."""

    def __init__(self, post: NativePost, lane: Lane, schedule: Any, rows: int):
        super().__init__(post, lane.symbols)
        self.lane, self.schedule, self.capacity = lane, schedule, rows
        self.error = np.zeros(1, np.int64)
        self.err = self.sym("error", data_address(self.error))
        self.nt = split.address(smallgemm.kernel())
        self.roots = np.ascontiguousarray(schedule.roots, np.int64)
        self.keep: list[Any] = [self.roots]
        # slot -> (address of row 0, row bytes, whether the rows are the batch's)
        self.places: dict[int, tuple[int, int, bool]] = {}
        self.emitters: dict[int, list[list[Emit]]] = {}  # per region: per step
        self.owners: dict[int, np.ndarray] = {}  # slot -> the array its place is in
        self.shared_rows: dict[int, np.ndarray] = {}  # a shared input as a row kernel reads it
        self.weights: dict[int, tuple[int, int, int, int]] = {}
        self.distinct: dict[int, distinct.Distinct] = {}  # by first row: heights on distinct rows

    def copy(self, dst: int, dst_row: int, src: int, src_row: int, size: int, index: int,
             index_bytes: int, bound: int, n: int) -> None:
        """Rows `size` bytes long (row `index[i]` of src if `index`, else row i).
        One part: split across the team, an embedding's rows of a batch ran
        no faster."""
        self.add([split.COPY, 0, dst, dst_row, src, src_row, size, index, index_bytes, bound, n,
                  self.err])

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
                self.places[s], self.owners[s] = (self.result(position), out.strides[0],
                                                  True), out
            else:
                buf = self.post.buffer(s, shape, dtype, self.capacity, self.lane.scratch)
                # a tape's buffers hold every height's rows; scratch only one's
                self.places[s] = (self.sym(("buffer", s), data_address(buf)), buf.strides[0],
                                  self.post.tape)
                self.owners[s] = buf
        for s, (concat, column) in region.alias.items():
            base, row, moves = self.places[concat]
            self.places[s], self.owners[s] = (base + column, row, moves), self.owners[concat]

    def at(self, slot: int, dtype: Any, width: int) -> tuple[int, int, bool]:
        """(address of row 0 of `slot`, row stride in bytes, whether a height's
        rows start at its first row's offset: the batch's rows, not scratch)."""
        found = self.places.get(slot)
        if found is None:
            stored = self.schedule.stored.get(slot)
            if stored is None or stored.dtype != dtype or not stored.flags.c_contiguous or \
                    stored.size != stored.shape[0] * width:
                raise Unsupported(slot)
            found = self.places[slot] = (self.sym(("stored", slot), data_address(stored)),
                                         stored.itemsize * width, True)
        return found

    def result(self, position: int) -> int:
        return self.sym(("result", position), data_address(self.schedule.results[position]))

    def fixed(self, slot: int) -> Any:
        """A value the same for every row (a weight) or a per-tree array."""
        schedule = self.schedule
        x = schedule.fixed[slot] if slot in schedule.fixed else self.runner.consts.get(slot)
        if x is None:
            raise Unsupported(slot)
        return x

    def shared_row(self, slot: int, width: int, dtype: Any) -> int:
        x = self.shared_rows[slot] = kernels_row(self.fixed(slot), width, dtype)
        return self.sym(("shared", slot), data_address(x))

    def weight(self, slot: int) -> tuple[int, int, int, int]:
        """(address, rows, columns, row stride in floats) of a weight matrix."""
        w = self.fixed(slot)
        if not isinstance(w, np.ndarray) or w.dtype != np.float32 or w.ndim != 2 or \
                w.strides[1] != 4:
            raise Unsupported(slot)
        found = self.weights[slot] = (self.sym(("weight", slot), data_address(w)), *w.shape,
                                      w.strides[0] // 4)
        return found

    def height(self, region: Region, lo: int, hi: int) -> None:
        steps = self.emitters.get(id(region))
        if steps is None:
            self.place(region)
            steps = self.emitters[id(region)] = [
                [getattr(self, op.kind)(op, region) for op in step.ops] +
                [self.copy_out(position, s, width) for position, s, width in step.copies]
                for step in region.by_step]
        found = self.distinct_rows(region, lo, hi)
        if found is None:
            self.planned(("post", id(region)), steps, lo, hi - lo)
            return
        steps = [list(emitters) for emitters in steps]
        product, gather = found.pair.product, found.pair.gather
        steps[product.step][region.by_step[product.step].ops.index(product)] = \
            self.distinct_product(found)
        if not self.post.tape:  # no backward reads the gathered rows
            steps[gather.step][region.by_step[gather.step].ops.index(gather)] = nothing
        self.once(steps, lo, hi - lo)

    def distinct_rows(self, region: Region, lo: int, hi: int) -> distinct.Distinct | None:
        """This height's distinct gathered rows, where its product runs on them."""
        pair = region.pair
        if pair is None:
            return None
        rows, k = self.weight(pair.product.ins[0])[1:3]
        table = self.weight(pair.gather.ins[0])
        if table[2] != k:
            return None
        tree = self.fixed(pair.pick.ins[0]) if pair.pick is not None else None
        index = distinct.indices(pair, self.schedule.stored, tree, self.roots, lo, hi)
        found = distinct.plan(pair, index, lo, table[1], rows * k)
        if found is not None:
            self.distinct[lo] = found
        return found

    # -- each kind of op: its records at a height (lo, n) -------------------
    def invoke(self, op: Op, region: Region) -> Emit:
        children = self.schedule.child[op.extra]
        base = self.sym(("children", op.extra), data_address(children))
        total, copy = self.sym("total", len(children)), self.copy
        copies = [(*self.at(s, None, 0), self.result(k), result.strides[0])
                  for k, (s, result) in enumerate(zip(op.outs, self.schedule.results,
                                                      strict=True))]

        def emit(lo: int, n: int) -> None:
            index = base + 8 * lo
            for dst, dst_row, moves, src, row in copies:
                copy(dst + lo * dst_row if moves else dst, dst_row, src, row, row, index, 8,
                     total, n)
        return emit

    def concat(self, op: Op, region: Region) -> Emit:
        dst, dst_row, dst_moves = self.at(op.outs[0], np.float32, 0)
        copies, column = [], 0
        for s, width in zip(op.ins, op.extra, strict=True):
            if s not in region.alias:  # else the child's rows were copied here
                copies.append((column, *self.at(s, np.float32, width), 4 * width))
            column += 4 * width
        copy = self.copy

        def emit(lo: int, n: int) -> None:
            to = dst + lo * dst_row if dst_moves else dst
            for col, src, src_row, moves, size in copies:
                copy(to + col, dst_row, src + lo * src_row if moves else src, src_row, size, 0,
                     0, 0, n)
        return emit

    def gather(self, op: Op, region: Region) -> Emit:
        table, rows, _, ld = self.weight(op.ins[0])
        index, _, index_moves = self.at(op.ins[1], np.int32, 1)
        dst, dst_row, moves = self.at(op.outs[0], np.float32, 0)
        copy = self.copy

        def emit(lo: int, n: int) -> None:
            copy(dst + lo * dst_row if moves else dst, dst_row, table, 4 * ld, 4 * ld,
                 index + 4 * lo if index_moves else index, 4, rows, n)
        return emit

    def pick(self, op: Op, region: Region) -> Emit:
        tree = self.fixed(op.ins[0])
        if not isinstance(tree, PerRoot) or tree.flat is None or tree.flat.itemsize != 4:
            raise Unsupported(op)
        flat = np.ascontiguousarray(tree.flat)
        self.keep.append(flat)
        arrays = tuple(self.sym(("tree", op.ins[0], k), data_address(a))
                       for k, a in enumerate((flat, tree.offsets, tree.lengths)))
        index, _, index_moves = self.at(op.ins[1], np.int32, 1)
        dst, dst_row, moves = self.at(op.outs[0], np.int32, 0)
        roots, add, err = self.sym("roots", data_address(self.roots)), self.add, self.err

        def emit(lo: int, n: int) -> None:
            add([split.PICK, 0, dst + lo * dst_row if moves else dst, *arrays, roots + 8 * lo,
                 index + 4 * lo if index_moves else index, n, err])
        return emit

    def product(self, op: Op, region: Region) -> Emit:
        weight = self.weight(op.ins[0])
        x, x_row, x_moves = self.at(op.ins[1], np.float32, weight[2])
        y, y_row, y_moves = self.at(op.outs[0], np.float32, 0)
        parts = self.product_parts

        def emit(lo: int, n: int) -> None:
            parts(weight, x + lo * x_row if x_moves else x, x_row // 4,
                  y + lo * y_row if y_moves else y, y_row // 4, n)
        return emit

    def product_parts(self, weight: tuple[int, int, int, int], xp: int, ldx: int, yp: int,
                      ldy: int, n: int) -> None:
        """Records of y = x W^T for n rows of x (strides in floats): the
        few-row kernel, on shares of W's rows in blocks of NT_BLOCK rows of x
        (each block's x stays in L2 while W streams past)."""
        wp, rows, k, ldw = weight
        add, nt = self.add, self.nt
        parts = self.threads if n * rows * k >= kernels.SPLIT_FLOPS else 1
        if rows < kernels.NARROW:  # a classifier: the few-row kernel on shares of x's rows
            for a, b in split.ranges(n, parts, 4):
                add([split.NT, nt, b - a, rows, k, xp + 4 * a * ldx, ldx, wp, ldw,
                     yp + 4 * a * ldy, ldy])
            return
        for lo in range(0, n, NT_BLOCK):
            m = min(NT_BLOCK, n - lo)
            for a, b in split.ranges(rows, parts, smallgemm.NT_COLS):
                add([split.NT, nt, m, b - a, k, xp + 4 * lo * ldx, ldx, wp + 4 * a * ldw, ldw,
                     yp + 4 * (lo * ldy + a), ldy])

    def distinct_product(self, found: distinct.Distinct) -> Emit:
        """The pair's product on the height's distinct rows: gather them, the
        product, then each row's result copied from its distinct row."""
        pair = found.pair
        weight = self.weight(pair.product.ins[0])
        rows, k = weight[1:3]
        table, table_rows, _, ld = self.weight(pair.gather.ins[0])
        y, y_row, y_moves = self.at(pair.product.outs[0], np.float32, 0)
        count = len(found.values)
        found.x = np.empty((count, k), np.float32)
        found.y = np.empty((count, rows), np.float32)
        x_at, y_at = data_address(found.x), data_address(found.y)
        self.keep.append(found)

        def emit(lo: int, n: int) -> None:
            self.copy(x_at, 4 * k, table, 4 * ld, 4 * k, data_address(found.values), 4, table_rows,
                      count)
            self.end_step()
            self.product_parts(weight, x_at, k, y_at, rows, count)
            self.end_step()
            for a, b in split.ranges(n, self.threads):
                self.copy((y + lo * y_row if y_moves else y) + a * y_row, y_row, y_at, 4 * rows,
                          4 * rows, data_address(found.inverse) + 8 * a, 8, count, b - a)
        return emit

    def rows(self, op: Op, region: Region) -> Emit:
        group, ins_layout = op.extra
        places = [self.at(s, dtype, width) if batched else
                  (self.shared_row(s, width, dtype), 0, False)
                  for s, (batched, width, dtype) in zip(op.ins, ins_layout, strict=True)]
        places += [self.at(s, np.float32, 0) for s in op.outs]
        if len(places) > split.MAX_POINTERS:
            raise Unsupported(op)
        compiled = self.runner.kernels
        fn = compiled.compiled[id(group)][0].address
        kind, add, threads = split.ROWS + len(places), self.add, compiled.threads

        def emit(lo: int, n: int) -> None:
            pointers = [(p + lo * row if moves else p, row) for p, row, moves in places]
            for a, b in split.ranges(n, threads(group, n)):
                self.row_kernels.append(len(self.offsets))
                add([kind, fn, self.contexts, b - a, *[p + a * row for p, row in pointers]])
                self.contexts += 1
        return emit

    def copy_out(self, position: int, s: int, width: int) -> Emit:
        out = self.schedule.results[position]
        row, dst = out.strides[0], self.result(position)
        if s in self.places or s in self.schedule.stored:
            src, src_row, moves = self.at(s, out.dtype, width)
        else:
            src, src_row, moves = self.shared_row(s, width, out.dtype), 0, False
        copy = self.copy

        def emit(lo: int, n: int) -> None:
            copy(dst + lo * row, row, src + lo * src_row if moves else src, src_row, row, 0, 0,
                 0, n)
        return emit

    # -- the run -----------------------------------------------------------
    def run(self) -> bool:
        return self.execute() and not self.error[0]


# The few-row kernel beat OpenBLAS's SGEMM at every row count measured from 2
# (`python bench/run.py smallgemm`); x's rows go in blocks of this many, so
# larger frontiers keep its per-row rate.
NT_BLOCK = 256


def kernels_row(x: Any, width: int, dtype: Any) -> np.ndarray:
    """A shared value as one contiguous row of `width` elements."""
    a = np.ascontiguousarray(np.asarray(x), dtype)
    if a.size != width:
        if a.size != 1:
            raise Unsupported(x)
        a = np.full(width, a.reshape(()), dtype)
    return a
