"""A native schedule's backward: `@post_bwd` over every height in one call.

`NativeBackward` is the interpreter's `Backward` with its loop replaced,
where the forward runs natively (`native_schedule.py`): the `_bwd` runs the
heights its `_fwd` ran, in blocks, groups and team as it did, reading each
thread's saved rows (`saved_at`), and its gradients' tables are kept
between calls as the forward's are. The last `_bwd` leaves the tables it
read zeroed (`CLEARED`), so a call zeroes only what it has not. Where the
numbering call runs the `_fwd` (`kernels/height_call`), the `_bwd` follows
it there (`ready`): Python runs it only where that call could not.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from recir.backend.array_address import data_address
from recir.backend.kept_plans import CLEAN, KeptPlan, KeptRows
from recir.backend.kernels.height_call import HeightCall
from recir.backend.native_loops import HeightLoop
from recir.backend.native_schedule import NativeSchedule
from recir.interpreter.frontier import Schedule
from recir.interpreter.frontier_grad import Backward
from recir.passes.schedule_loops import HEADER


FOLLOWING = "following"  # in the `_bwd` loop's layouts: its call after the `_fwd`'s


def seeds_of(cotangents: Sequence[np.ndarray | None], tables: Sequence[np.ndarray],
             batch: int) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The (cotangent, gradient table) pairs `HeightCall.seed` places, where
    every cotangent is a C-contiguous f32 array of the batch's rows of its
    table's row shape; else None (Python places them)."""
    seeds = [(c, d) for c, d in zip(cotangents, tables, strict=True) if c is not None]
    if not all(type(c) is np.ndarray and c.dtype == np.float32 and c.flags.c_contiguous
               and c.shape == (batch, *d.shape[1:]) for c, d in seeds):
        return None
    return seeds


class NativeBackward(Backward):
    """`Backward` whose `@post_bwd` runs all heights in one call, its
    gradients' tables kept between calls as the forward's are."""

    def __init__(self, schedule: Schedule, facts: Any = None):
        super().__init__(schedule, facts)
        # `@post_bwd`'s loop, where the forward runs natively
        self.loop: HeightLoop | None = None
        if isinstance(schedule, NativeSchedule):
            schedule.loop_fn = self.post_fwd  # the loop its numbering call may run
            loops = schedule.interp.loops
            if self.post_fwd.sym_name.data in loops:
                self.loop = loops.get(self.post_bwd.sym_name.data)
        self.kept: dict[str, list[Any]] = {}  # `zeroed`'s arrays, whole, for the plan
        self.following: HeightCall | None = None  # made ready for this call (`ready`)

    def run(self, cotangents: list[np.ndarray | None], into: list[Any] | None = None
            ) -> list[np.ndarray | None]:
        s = self.s
        if not isinstance(s, NativeSchedule) or self.loop is None or self.top_down:
            return super().run(cotangents, into)
        s.then = lambda capacity, order: self.ready(cotangents, capacity, order)
        try:
            return super().run(cotangents, into)
        finally:
            s.then = None  # no cycle through it: the call's arrays go with its frames

    def ready(self, cotangents: list[np.ndarray | None], capacity: int,
              order: list[np.ndarray]) -> HeightCall | None:
        """The `_bwd`'s call after the `_fwd`'s in the numbering call, over
        the kept arrays at `capacity` rows (`order`: the height order's),
        its gradients' tables zeroed and the cotangents placed at the roots
        there (`HeightCall.seed`); None where Python must run it (before
        its first call, or where the stored values have gradients)."""
        s, loop = self.s, self.loop
        assert isinstance(s, NativeSchedule) and loop is not None
        called, layouts = s.called, loop.layouts
        self.following = None  # (an expansion's first try may have made one)
        if called is None or loop.kept is None or not layouts or "tables" not in layouts or any(
                kind == "stored" for kind, _ in self.accumulated):
            return None
        floats, kept_rows = layouts["tables"]
        arrays = kept_rows.at_least(capacity)
        if layouts.get(CLEAN) is not arrays:
            for array in arrays:
                ctypes.memset(data_address(array), 0, array.nbytes)
        layouts[CLEAN] = None  # until the `_bwd` has run (`backward`)
        batch, d_tables = len(s.roots[0]), [None] * called.post.tables
        for k, array in zip(floats, arrays, strict=True):
            d_tables[k] = array
        seeds = seeds_of(cotangents, arrays, batch)
        if seeds is None:
            return None
        kept, sites = called.post.rows.at_least(capacity), s.sites
        inputs = (*kept[called.post.tables:], None, *arrays, *order[1 + sites:],
                  *order[1:1 + sites], *kept[:called.post.tables])
        found = layouts.get(FOLLOWING)
        if found is None or found[0] is not s.chosen:
            found = layouts[FOLLOWING] = (s.chosen, HeightCall(loop, called.post, s.chosen,
                                                               saves=False))
        following = self.following = found[1]
        following.ready((*inputs, *s.shared, *self.accumulators(d_tables, [])), [], capacity,
                        s.keep, s.shared_fields(loop, len(inputs)))
        loop.place_copies(loop.kept.plan, loop.threads)
        following.seed(batch, order[0], seeds)
        return following

    def backward(self, tables: list[np.ndarray], cotangents: list[np.ndarray | None],
                 batch: int) -> list[np.ndarray | None]:
        following, loop = self.following, self.loop
        if following is None or loop is None:
            return super().backward(tables, cotangents, batch)
        ran = following.done(self.s.team[0])
        # the tables zeroed (`ready`), and by the `_bwd` once it has read them
        loop.layouts[CLEAN] = loop.layouts["tables"][1].arrays
        if not ran:
            return super().backward(tables, cotangents, batch)
        return [None] * len(self.s.stored)

    def zeroed(self, values: list[np.ndarray], what: str) -> list[np.ndarray | None]:
        loop = self.loop
        if loop is None:
            return super().zeroed(values, what)
        rows = loop.layouts.get(what) if loop.layouts else None
        if rows is None:  # the f32 ones' positions and kept arrays
            loop.layouts = loop.layouts or {}
            floats = [k for k, v in enumerate(values) if v.dtype == np.float32]
            rows = loop.layouts[what] = (floats, KeptRows([
                (values[k].dtype, values[k].shape[1:]) for k in floats]))
        floats, kept_rows = rows
        total = self.s.total
        arrays = kept_rows.at_least(total)
        # the results' tables as the last `_bwd` left them: zeroed (`CLEARED`)
        clean = what == "tables" and loop.layouts.get(CLEAN) is arrays
        loop.layouts[CLEAN] = None  # written from here until the `_bwd` has read them
        kept: list[Any] = [None] * len(values)
        for k, array in zip(floats, arrays, strict=True):
            if not clean:  # as bytes: a memset, faster than NumPy's fill; a
                # table wholly (the `_bwd` zeroes only the rows a call uses)
                ctypes.memset(data_address(array), 0, (array if what == "tables" else
                                                       array[:total]).nbytes)
            kept[k] = array
        self.kept[what] = kept
        return [None if a is None else a[:total] for a in kept]

    def post_backward(self, d_tables: list[Any], d_stored: list[Any]) -> None:
        s, loop = self.s, self.loop
        if loop is None or not isinstance(s, NativeSchedule):
            return super().post_backward(d_tables, d_stored)
        d_tables, d_stored = self.kept["tables"], self.kept["stored"]  # whole
        accs = self.accumulators(d_tables, d_stored)
        d_results = [d for d in d_tables if d is not None]
        inputs = (*s.saved_kept, None, *d_results, *s.stored_kept, *s.children_kept,
                  *s.tables_kept)
        if loop.kept is None:  # all but the shared values and their gradients
            loop.kept = KeptPlan(loop, HEADER, [
                *range(len(inputs)), *(len(inputs) + len(s.shared) + j for j, (kind, _) in
                                       enumerate(self.accumulated) if kind != "shared")],
                range(len(inputs), len(inputs) + len(s.shared)))
        loop(s.bounds, (*inputs, *s.shared, *accs), [], s.saved_at, *s.team,
             s.team_groups, s.total, s.most, s.shared_fields(loop, len(inputs)), s.team_pieces)
        loop.layouts[CLEAN] = loop.layouts["tables"][1].arrays  # every row read: zeroed
