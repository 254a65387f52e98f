"""The backward of a native post segment (`native_post.py`), as one native run.

A Python backward pays its overhead per height, again on one core. After a gradient call's native forward every value's
rows are still in the tape's buffers, so the backward is laid out the same
way: the heights from the tallest down, each op of a height's region in
reverse as one step (one op a step: two ops of one forward step may add
into one cotangent), a barrier between steps. Records: a row kernel's
backward (it adds into its inputs' cotangents; a shared input's, a bias,
into a row per part), `dX += dY W` as SGEMM parts split by X's columns,
children's cotangent rows added into their rows of the results' cotangents
(`dres`), a concatenation's columns added back to its operands (children's
results read by a concat share its columns). Cotangents are buffers of the
batch's rows; a value the function returns has its result's rows. What
parameters get is handed to `grad.Backward` after the run: the products'
`Outer`s over each run of heights (one SGEMM each at its `finish`), the
embedding's `Rows`, the bias rows summed. Anything it does not take
returns None and the Python backward runs on the frames.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from recir.backend.array_address import data_address
from recir.batching import distinct, gemm, kernels, scatter, split
from recir.batching.execute import Frame
from recir.batching.native_post import Records, Region, Unsupported, nothing
from recir.batching.rules import Outer, Rows

Emit = Callable[[int, int], None]


class BiasRows:
    """Zeroed rows a row kernel's parts add a shared input's cotangent into,
    summed after the run: part k of every step adds into row k (parts of one
    step run at once; steps one after the other)."""

    def __init__(self, width: int, count: int, tag: Any):
        self.rows = np.zeros((count, width), np.float32)
        self.base, self.step = tag(data_address(self.rows)), 4 * width

    def row(self, part: int) -> int:
        return self.base + part * self.step


class Tape:
    """What a native forward leaves for its backward."""

    def __init__(self, post: Any, plan: Any, heights: list[tuple[int, int]], taken: list[int]):
        self.post, self.owners, self.shared_rows = post, plan.owners, plan.shared_rows
        self.places, self.weights = plan.places, plan.weights  # tagged (`Symbols`)
        self.lane, self.resolve = plan.lane, plan.sym.resolve
        self.heights, self.taken = heights, taken
        self.distinct = plan.distinct  # heights whose pair's product ran on distinct rows

    def frames(self, schedule: Any) -> None:
        """The frames the Python loop would have left (`Schedule.heights`),
        each height's values as views of the tape's buffers: for the Python
        backward where this one does not apply."""
        post, total = self.post, schedule.total
        views = {s: view(self.owners, self.places, self.resolve, s, total, *layout)
                 for region in post.regions for s, layout in region.layouts.items()
                 if s in self.places}
        for (lo, hi), k in zip(self.heights, self.taken, strict=True):
            frame = Frame(hi - lo, schedule.roots[lo:hi], base=schedule.lookup(lo, hi))
            sub = frame
            if post.pred is not None:
                sub = frame.child(None)
                record: list[tuple[Any, Any]] = [(None, None), (None, None)]
                record[k] = (None, sub)
                frame.subs[post.branch] = record
            sub.env.update((s, views[s][lo:hi]) for s in post.regions[k].layouts if s in views)
            schedule.heights.append((lo, hi, frame))


def view(owners: dict[int, np.ndarray], places: dict[int, tuple[int, int, bool]],
         resolve: Callable[[int], int], slot: int, total: int, shape: tuple[int, ...],
         dtype: Any) -> np.ndarray:
    """A (tagged) place's rows over the whole batch as an array."""
    tagged, row, _ = places[slot]
    base, owner = resolve(tagged), owners[slot]
    size = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
    flat = owner.reshape(-1).view(np.uint8)[base - data_address(owner):]
    return np.lib.stride_tricks.as_strided(flat, (total, size), (row, 1)).view(dtype).reshape(
        total, *shape)


class Sweep(Records):
    """The records of one backward, then the run and the parameters' parts."""

    def __init__(self, tape: Tape, schedule: Any, backward: Any, dres: list[Any]):
        super().__init__(tape.post, tape.lane.symbols)
        self.tape, self.schedule, self.backward = tape, schedule, backward
        self.total = schedule.total
        self.dres = dres
        self.cot: dict[int, tuple[int, int, bool]] = {}
        self.cot_owner: dict[int, np.ndarray] = {}
        self.bias: dict[int, BiasRows] = {}  # a shared input's rows, one per part
        self.scatter = split.address(scatter.kernel())  # dst[index[i]] += src[i]
        self.arange: np.ndarray | None = None
        self.zeroed: list[tuple[int, int]] = []  # kept cotangent buffers, by region
        self.no_error = np.zeros(1, np.int64)  # (zeroing copies no index)

    # -- cotangent buffers ----------------------------------------------------
    def place(self, region: Region) -> None:
        for s, (shape, dtype) in region.layouts.items():
            if s in region.alias or np.dtype(dtype) != np.float32:
                continue
            position = region.direct.get(s)
            if position is not None:
                out = self.dres[position]
                if out is None:
                    raise Unsupported(s)
                self.cot[s], self.cot_owner[s] = (self.dres_at(position), out.strides[0],
                                                  True), out
            elif s not in self.cot:
                buf = self.tape.post.buffer(s, shape, np.float32, self.total,
                                            self.tape.lane.cotangents)
                self.cot[s] = (self.sym(("cotangent", s), data_address(buf)), buf.strides[0], True)
                self.cot_owner[s] = buf
                self.zeroed.append((s, self.tape.post.regions.index(region)))
        for s, (concat, column) in region.alias.items():
            if s in self.cot or concat not in self.cot:
                continue
            base, row, moves = self.cot[concat]
            self.cot[s], self.cot_owner[s] = (base + column, row, moves), self.cot_owner[concat]

    def value(self, slot: int, dtype: Any, width: int) -> None:
        """Make sure a forward value's place is known (a stored one's is added)."""
        if slot not in self.tape.places:
            stored = self.schedule.stored.get(slot)
            if stored is None or stored.dtype != dtype or not stored.flags.c_contiguous:
                raise Unsupported(slot)
            self.tape.places[slot] = (self.sym(("stored", slot), data_address(stored)),
                                      stored.itemsize * width, True)
            self.tape.owners[slot] = stored

    def dres_at(self, position: int) -> int:
        return self.sym(("dres", position), data_address(self.dres[position]))

    def zero(self) -> None:
        """The first step: clear the kept cotangent buffers' rows of the heights
        that use them, split across the team (a fresh zeroed buffer per call
        is written by one thread)."""
        runs = height_runs(self.tape)
        width = max((self.cot_owner[s][0].size for s, _ in self.zeroed), default=0)
        zeros = self.keep_zeros = np.zeros(width, np.float32)
        src, err = data_address(zeros), data_address(self.no_error)
        for s, k in self.zeroed:  # (direct records: real addresses)
            buf = self.cot_owner[s]
            dst, row, size = data_address(buf), buf.strides[0], 4 * buf[0].size
            for region, lo, hi in runs:
                if region != k:
                    continue
                for a, b in split.ranges(hi - lo, self.threads):
                    self.add([split.COPY, 0, dst + (lo + a) * row, row, src, 0, size, 0, 0, 0,
                              b - a, err])
        self.end_step()

    # -- each op in reverse: prepared once a call, records per height ---------
    def place_of(self, places: dict[int, tuple[int, int, bool]], slot: int) -> tuple[int, int,
                                                                                  bool]:
        if slot not in places:
            raise Unsupported(slot)  # a float value this sweep keeps no cotangent of
        return places[slot]

    def rows(self, op: Any, region: Region) -> Emit:
        group, ins_layout = op.extra
        compiled = self.runner.kernels
        fn, threads = compiled.compiled[id(group)][1].address, compiled.threads
        ins, dins = [], []  # (address, row bytes, moves); a din of None: a bias row
        for s, (batched, width, dtype) in zip(op.ins, ins_layout, strict=True):
            floats = np.dtype(dtype) == np.float32
            if batched:
                self.value(s, dtype, width)
                ins.append(self.tape.places[s])
                dins.append(self.place_of(self.cot, s) if floats else (0, 0, False))
            else:
                x = self.tape.shared_rows.get(s)
                if x is None:
                    raise Unsupported(s)
                ins.append((self.sym(("shared", s), data_address(x)), 0, False))
                dins.append(self.bias_rows(s, width) if floats else (0, 0, False))
        douts = [self.place_of(self.cot, s) for s in op.outs]
        if 2 * len(ins) + len(douts) > split.MAX_POINTERS:
            raise Unsupported(op)
        places, values = [*ins, *douts, *dins], len(ins) + len(douts)

        def emit(lo: int, n: int) -> None:
            at = [(p + lo * row if moves else p, row) for p, row, moves in places[:values]]
            for part, (a, b) in enumerate(split.ranges(n, threads(group, n))):
                pointers = [p + a * row for p, row in at]
                for d in dins:
                    if isinstance(d, BiasRows):
                        pointers.append(d.row(part))
                    else:
                        pointers.append(d[0] + (lo + a) * d[1] if d[0] else 0)
                self.row_kernels.append(len(self.offsets))
                self.add([split.ROWS + len(pointers), fn, self.contexts, b - a, *pointers])
                self.contexts += 1
        return emit

    def bias_rows(self, slot: int, width: int) -> BiasRows:
        """Rows a shared input's cotangent is added into, one per part."""
        found = self.bias.get(slot)
        if found is None:
            found = self.bias[slot] = BiasRows(width, self.threads,
                                               lambda at: self.sym(("bias", slot), at))
        return found

    def product(self, op: Any, region: Region) -> Emit:
        w = self.tape.weights.get(op.ins[0])
        if w is None:
            raise Unsupported(op)
        wp, rows, k, ldw = w
        dy, dy_row, _ = self.place_of(self.cot, op.outs[0])
        dx, dx_row, _ = self.place_of(self.cot, op.ins[1])
        add, threads = self.add, self.threads

        def emit(lo: int, n: int) -> None:
            parts = threads if n * rows * k >= kernels.SPLIT_FLOPS else 1
            for part in gemm.nn_parts(n, k, rows, dy + lo * dy_row, dy_row // 4, wp, ldw,
                                      dx + lo * dx_row, dx_row // 4, 1, parts):
                add(part)
        return emit

    def distinct_product(self, found: distinct.Distinct) -> Emit:
        """The pair's `dX = dY W` on the height's distinct rows: each row's dY
        added into its distinct row first (parts by columns: no two add into
        one element), then the product; what the parameters get from them is
        added in `parameters`."""
        wp, rows, k, ldw = self.tape.weights[found.pair.product.ins[0]]
        dy, dy_row, _ = self.place_of(self.cot, found.pair.product.outs[0])
        count = len(found.values)
        found.dy = np.zeros((count, rows), np.float32)
        found.dx = np.empty((count, k), np.float32)
        dy_at, dx_at, inverse = data_address(found.dy), data_address(found.dx), data_address(found.inverse)
        add, threads, fn = self.add, self.threads, self.scatter

        def emit(lo: int, n: int) -> None:
            for a, b in split.ranges(rows, threads, 16):
                add([split.ADD, fn, n, b - a, inverse, dy + lo * dy_row + 4 * a, dy_row // 4,
                     dy_at + 4 * a, rows])
            self.end_step()
            parts = threads if count * rows * k >= kernels.SPLIT_FLOPS else 1
            for part in gemm.nn_parts(count, k, rows, dy_at, rows, wp, ldw, dx_at, k, 0, parts):
                add(part)
        return emit

    def concat(self, op: Any, region: Region) -> Emit:
        src, src_row, _ = self.place_of(self.cot, op.outs[0])
        adds, column = [], 0
        for s, width in zip(op.ins, op.extra, strict=True):
            if s not in region.alias:  # else its cotangent is these columns
                dst, dst_row, _ = self.place_of(self.cot, s)
                adds.append((dst, dst_row, src + column, width))
            column += 4 * width
        add, rows, fn = self.add, self.identity(), self.scatter

        def emit(lo: int, n: int) -> None:  # dst row lo + i += src row i
            for dst, dst_row, at, width in adds:
                add([split.ADD, fn, n, width, rows + 8 * lo, at + lo * src_row,
                     src_row // 4, dst, dst_row // 4])
        return emit

    def invoke(self, op: Any, region: Region) -> Emit:
        children = self.sym(("children", op.extra), data_address(self.schedule.child[op.extra]))
        adds = [(self.dres_at(k), d.strides[0], *self.place_of(self.cot, s)[:2])
                for k, (s, d) in enumerate(zip(op.outs, self.dres, strict=True))
                if d is not None and s in self.cot]
        add, fn = self.add, self.scatter

        def emit(lo: int, n: int) -> None:  # dres row child[i] += the child's row i
            for dst, row, src, src_row in adds:
                add([split.ADD, fn, n, row // 4, children + 8 * lo, src + lo * src_row,
                     src_row // 4, dst, row // 4])
        return emit

    def identity(self) -> int:
        """The address of 0, 1, ..., total - 1 (int64): rows added in place."""
        if self.arange is None:
            self.arange = np.arange(self.total, dtype=np.int64)
        return self.sym("identity", data_address(self.arange))

    def gather(self, op: Any, region: Region) -> Emit:
        return nothing  # the embedding's rows, after the run (`parameters`)

    def pick(self, op: Any, region: Region) -> Emit:
        return nothing  # integers

    # -- the run ----------------------------------------------------------------
    def parameters(self) -> None:
        """What the parameters get, handed to the Python backward's `add_uniform`."""
        backward, tape = self.backward, self.tape
        runs = height_runs(tape)
        apart = distinct.without(runs, tape.distinct)  # a pair's rows but distinct heights
        for k, region in enumerate(tape.post.regions):
            for op in region.ops:
                paired = region.pair is not None and op in (region.pair.gather,
                                                            region.pair.product)
                for _, lo, hi in (r for r in (apart if paired else runs) if r[0] == k):
                    self.parameter(op, region, lo, hi)
        for found in tape.distinct.values():
            backward.add_uniform(found.pair.product.ins[0], Outer(found.dy, found.x))
            backward.add_uniform(found.pair.gather.ins[0], Rows(found.values, found.dx))
        for slot, rows in self.bias.items():
            backward.add_uniform(slot, rows.rows.sum(axis=0))

    def parameter(self, op: Any, region: Region, lo: int, hi: int) -> None:
        """A product's or a gather's part for rows lo..hi."""
        backward, tape, total = self.backward, self.tape, self.total
        if op.kind == "product" and op.ins[1] in tape.places:
            shape, dtype = layout_of(tape.post, op.ins[1])
            x = view(tape.owners, tape.places, tape.resolve, op.ins[1], total, shape, dtype)
            dy = self.cot_view(region, op.outs[0])
            backward.add_uniform(op.ins[0], Outer(dy[lo:hi], x[lo:hi]))
        elif op.kind == "gather":
            index = self.schedule.stored.get(op.ins[1])
            if index is None:
                index = view(tape.owners, tape.places, tape.resolve, op.ins[1], total, (),
                             np.int32)
            backward.add_uniform(op.ins[0], Rows(index[lo:hi],
                                                 self.cot_view(region, op.outs[0])[lo:hi]))

    def cot_view(self, region: Region, slot: int) -> np.ndarray:
        shape, _ = region.layouts[slot]
        return view(self.cot_owner, self.cot, self.sym.resolve, slot, self.total, shape,
                    np.float32)


def height_runs(tape: Tape) -> list[tuple[int, int, int]]:
    """(region, first row, end row) of each run of heights taking one region."""
    runs: list[tuple[int, int, int]] = []
    for (lo, hi), k in zip(tape.heights, tape.taken, strict=True):
        if runs and runs[-1][0] == k and runs[-1][2] == lo:
            runs[-1] = (k, runs[-1][1], hi)
        else:
            runs.append((k, lo, hi))
    return runs


def layout_of(post: Any, slot: int) -> tuple[tuple[int, ...], Any]:
    for region in post.regions:
        if slot in region.layouts:
            return region.layouts[slot]
    raise Unsupported(slot)


def backward(tape: Tape, backward: Any, schedule: Any, dres: list[Any]) -> bool | None:
    """Add the cotangents of a native forward's call into `dres` and the
    parameters' gradients into `backward`. False (nothing added) where it
    does not apply; None if a kernel's check failed (`dres` half added)."""
    sweep = Sweep(tape, schedule, backward, dres)
    try:
        for region in tape.post.regions:
            if region.copies:
                raise Unsupported(region)
            sweep.place(region)
        sweep.zero()
        steps = [[[getattr(sweep, op.kind)(op, region)] for op in reversed(region.ops)]
                 for region in tape.post.regions]  # program order is a topological one
        for (lo, hi), k in reversed(list(zip(tape.heights, tape.taken, strict=True))):
            found = tape.distinct.get(lo)
            if found is None:
                sweep.planned(("grad", k), steps[k], lo, hi - lo)
                continue
            ops = tape.post.regions[k].ops
            at = len(ops) - 1 - ops.index(found.pair.product)
            sweep.once([*steps[k][:at], [sweep.distinct_product(found)], *steps[k][at + 1:]],
                       lo, hi - lo)
    except Unsupported:
        return False
    if not sweep.execute():
        return None  # a kernel's check failed after some rows were added
    sweep.parameters()
    return True
