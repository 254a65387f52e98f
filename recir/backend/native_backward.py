"""A native schedule's backward: `@post_bwd` over every height in one call.

`NativeBackward` is the interpreter's `Backward` with its loop replaced,
where the forward runs natively (`native_schedule.py`): the `_bwd` runs the
heights its `_fwd` ran, in blocks, groups and team as it did, reading each
thread's saved rows (`saved_at`), and its gradients' tables are kept
between calls as the forward's are. The last `_bwd` leaves the tables it
read zeroed (`CLEARED`), so a call zeroes only what it has not.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from recir.backend.array_address import data_address
from recir.backend.kept_plans import CLEAN, KeptPlan, KeptRows
from recir.backend.native_loops import HeightLoop
from recir.backend.native_schedule import NativeSchedule
from recir.interpreter.frontier import Schedule
from recir.interpreter.frontier_grad import Backward
from recir.passes.schedule_loops import HEADER


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
             s.team_groups, s.total, s.most, s.shared_fields(loop, len(inputs)))
        loop.layouts[CLEAN] = loop.layouts["tables"][1].arrays  # every row read: zeroed
