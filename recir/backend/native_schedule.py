"""A native schedule's depths and heights, each in one call (`passes/schedule_loops.py`).

`NativeSchedule` and `NativeBackward` (`native_backward.py`) are the
interpreter's `Schedule` and `Backward` with their loops replaced. `@expand`
runs over every depth in one call (`native_loops.NativeExpansion`), which
appends each depth's children to tables that grow while too small, and the
height order follows in the same native call (`kernels/numbering`), with
the height loop's policy and then the `@post` or `_fwd` loop itself after
it once the loop has run (`policy`, `kernels/height_policy`,
`kernels/height_call`). `@post` (or `@post_fwd`, or `@post_bwd` from the
roots down) runs over every height in one call (`HeightLoop`), which reads each
height's rows from the whole tables and writes its results into them; a
`_fwd`'s saved rows go to one buffer per saved value, and each height's
(and team thread's) first row and count there to `saved_at`, which the
`_bwd`'s loop reads: it splits its heights as its `_fwd` did. A wide
height runs as several, a block of rows each (`in_blocks`). The
operands are the interpreter's, in its order (`Schedule.post`,
`Backward.post_backward`), whole where it slices: `height_spec` and
`expansion_spec` give their roles for the loops' code. The arrays the
schedule makes (tables, saved rows, the height order's children and stored
values, the gradients' tables) are kept from call to call with the height
loops' plans (`kept_plans`), and the operands it is given are checked once
a call for every loop that takes them (`shared_fields`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
from xdsl.dialects import func

from recir.backend import policy
from recir.backend.array_address import data_address
from recir.backend.frontier_schedule import FORWARD
from recir.backend.height_groups import group_table
from recir.backend.kernels.height_order_calls import Grouping, HeightOrder
from recir.backend.kernels.height_call import HeightCall
from recir.backend.kernels.height_policy import HeightPolicy, weights_of
from recir.backend.kernels.numbering import ORDER_PLAN, POLICY, numbering_kernel
from recir.backend.kept_plans import KeptPlan, KeptRows
from recir.backend.native_loops import HeightLoop, NativeExpansion, most_rows, row_tile
from recir.backend.schedule_specs import BACKWARD
from recir.interpreter.frontier import Schedule, dtype_of, row_shape
from recir.passes.gemm_target import host_target
from recir.passes.schedule_loops import HEADER

ORDER = "__order"  # the kept arrays of the height order: inv, children, stored values
NUMBERING = "__numbering"  # `numbering`'s key and plan
HEIGHT_ORDER = "__height_order"  # its kernel's calls (`kernels.height_order_calls.HeightOrder`)
THREADS = "__threads"  # the most threads of the function's height loops
# a team runs a batch's heights by groups of trees where that leaves a
# thread fewer rows (`height_groups`); False: every height split by rows
BY_GROUPS = True


@functools.cache
def block_rows(threads: int, per_row: int) -> int:
    """Rows a height loop takes at a time, where its functions take
    `per_row` bytes of scratch a row (the most their live temporaries take
    at once): each thread's block of them within its core's L2
    (`policy.l2_bytes`), so that an op's rows are still there when the next
    op reads them, but at least a block of the kernels' k (`Target.depth`: a
    whole block of its outer products, one pass over a gradient, `row_logs`,
    and many register tiles). A row's temporaries take kB to tens of kB, so
    a wide height's whole would stream through memory op after op."""
    fitting = policy.l2_bytes() // max(per_row, 1)
    return max(threads, 1) * max(host_target().depth, fitting)


def in_blocks(bounds: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray | None]:
    """`bounds` with each height of more than `rows` rows cut into as few
    near-equal blocks of at most `rows`: a height's rows depend only on
    lower heights', so its blocks run in any order, each as a height. With
    them, where any height is cut, each bound's piece (i64[bounds][4]: its
    height's first row and rows, which block of how many): a team's thread
    takes the same block of its own share of the height at each of them
    (`schedule_loops`), so that the rows it reads at the next height, their
    children, are mostly its own. (A few tens of heights: a loop over their
    list takes fewer steps than the NumPy calls over arrays that short.)"""
    if len(bounds) < 2 or int(bounds[-1] - bounds[0]) <= rows:  # no height has more
        return bounds, None
    edges, cut, pieces, wide = bounds.tolist(), [], [], False
    for lo, hi in pairwise(edges):
        n = hi - lo
        count = -(-n // rows) if n > rows else int(n > 0)  # (an empty height has no block)
        wide = wide or count > 1
        cut += [lo + n * j // count for j in range(count)]
        pieces += [(lo, n, j, count) for j in range(count)]
    if not wide:
        return bounds, None
    cut.append(edges[-1])
    return np.array(cut, np.int64), np.array(pieces, np.int64).reshape(-1, 4)


def operand_fields(loop: Any, values: Sequence[Any], keep: list[np.ndarray],
                   first: int) -> np.ndarray:
    """`values`' plan fields as `loop` takes them from its input `first` on
    (`NativeLoop.fields`, which checks them), scalars in their bytes."""
    found, scalars = loop.fields(values, keep, numbers=range(first, first + len(values)))
    fields = np.array(found, np.int64)
    loop.write_scalars(fields, 0, values, scalars, first)
    return fields


class NativeSchedule(Schedule):
    """`Schedule` whose `@expand` runs all depths (finding every
    invocation's height), and `@post` (or `_fwd`) all heights, in one call
    each, into arrays kept between calls (`kept_plans`)."""

    trees: np.ndarray | None = None  # the native expansion's: each row's tree (its root's row)
    team: tuple[int, int] = (1, 0)  # the `_fwd`'s threads and heights on them
    groups: np.ndarray | None = None  # each thread's rows of each height (`height_groups`)
    grouping: Grouping | None = None  # what the height order found by groups
    team_groups: np.ndarray | None = None  # the groups where the team runs by them
    team_pieces: np.ndarray | None = None  # each bound's piece where the team cuts heights
    most = 1  # the most rows a call of the height loops' functions takes (`most_rows`)
    fields: tuple[Any, np.ndarray] | None = None  # `shared_fields`' last, by the types
    numbered: tuple[HeightOrder, int] | None = None  # the order made with the expansion
    chosen: HeightPolicy | None = None  # where the height policy ran in that call
    called: HeightCall | None = None  # where the height loop's call followed it
    # a gradient's `_bwd` call made ready to follow the `_fwd`'s in the
    # numbering call, given the capacity and the order's kept arrays
    # (`NativeBackward.ready`); None: none follows
    then: Callable[[int, list[np.ndarray]], HeightCall | None] | None = None
    keep: list[np.ndarray]  # what the shared operands were converted to, alive through a call

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.keep = []
        self.loop_fn = self.post_fn  # the height loop's function (a gradient's `_fwd`)

    def callee(self, name: Any, why: str = "") -> func.FuncOp:
        key = name.root_reference.data if hasattr(name, "root_reference") else name
        found = self.interp.callees.get(key)
        return found if found is not None else super().callee(name, why)

    def kept(self, name: str, layouts: Any) -> KeptRows:
        """The function's arrays kept under `name` (made with `layouts`,
        a function of no arguments, the first time)."""
        kept = self.interp.kept.get(name)
        if kept is None:
            kept = self.interp.kept[name] = KeptRows(layouts())
        return kept

    def shared_fields(self, loop: Any, first: int) -> np.ndarray:
        """The shared operands' plan fields as `loop` takes them from its
        input `first` on (`NativeLoop.fields`, which checks them): found
        once a call for all the loops that take them as the same types."""
        key = (loop.native.name, first)
        types = self.interp.kept.get(key)
        if types is None:  # equal types, one object: compared by identity
            count = len(self.shared)
            found = tuple((loop.native.kinds[k], loop.inputs[k])
                          for k in range(first, first + count))
            types = self.interp.kept[key] = self.interp.kept.setdefault(found, found)
        if self.fields is not None and self.fields[0] is types:
            return self.fields[1]
        fields = operand_fields(loop, self.shared, self.keep, first)
        self.fields = (types, fields)
        return fields

    def renumber(self, children: list[np.ndarray], stored: list[np.ndarray],
                 levels: list[tuple[int, int]]) -> None:
        """As `Schedule.renumber`, into kept arrays (`children_kept`,
        `stored_kept`: room for more rows than the call's); after the native
        expansion, made in its call (`numbering`): what the order found."""
        self.children_by_depth = children
        total = self.total = levels[-1][1]
        kept, sites = self.order_rows(children, stored).at_least(total + 1), len(children)
        self.children_kept, self.stored_kept = kept[1:1 + sites], kept[1 + sites:]
        inv = kept[0][:total + 1]  # and -1 after the rows: no child's row
        self.inv = inv[:total]
        self.groups = self.grouping = self.pieces = None
        if self.chosen is not None:  # and the loop's policy after it
            self.numbered[0].check()
            self.bounds, self.groups, self.pieces = self.chosen.found()
        elif self.numbered is not None:  # the order made with the expansion
            kernel, threads = self.numbered
            starts, found = kernel.found(threads)
            if found is None:
                self.bounds = starts
            else:  # by height, then group (`height_groups`)
                starts = starts[:found.tallest * threads + 1]
                self.bounds = starts[::threads].copy()  # each height's first group's start
                if found.grouped and BY_GROUPS and len(levels) > 1:
                    self.groups, self.grouping = group_table(starts, threads), found
                elif found.gaps:
                    self.bounds = np.unique(self.bounds)
        else:
            perm, self.bounds = self.height_order(children, levels, total)
            inv[perm] = np.arange(total, dtype=np.int32)
            inv[total] = -1
            # rows in range by construction (`perm` is a permutation, a child a
            # row or -1, which wraps to inv[total]): taken without a buffer
            for c, out in zip(children, self.children_kept, strict=True):
                inv.take(c.take(perm), out=out[:total], mode="wrap")
            for v, out in zip(stored, self.stored_kept, strict=True):
                v.take(perm, axis=0, out=out[:total], mode="wrap")
        self.children = [out[:total] for out in self.children_kept]
        self.stored = [out[:total] for out in self.stored_kept]

    def order_rows(self, children: list[np.ndarray], stored: list[np.ndarray]) -> KeptRows:
        """The height order's kept arrays: the inverse, the children in order,
        the stored values in order."""
        return self.kept(ORDER, lambda: [(np.dtype(np.int32), ())] * (1 + len(children)) + [
            (s.dtype, s.shape[1:]) for s in stored])

    def order_kernel(self, children: list[np.ndarray], stored: list[np.ndarray]) -> HeightOrder:
        kernel = self.interp.kept.get(HEIGHT_ORDER)
        if kernel is None:
            kernel = self.interp.kept[HEIGHT_ORDER] = HeightOrder(len(children), [
                s.dtype.itemsize * int(np.prod(s.shape[1:])) for s in stored], self.interp.folder)
        return kernel

    def team_threads(self) -> int:
        """The threads the height loops are compiled for."""
        threads = self.interp.kept.get(THREADS)
        if threads is None:
            threads = self.interp.kept[THREADS] = max(
                (loop.threads for loop in self.interp.loops.values()
                 if isinstance(loop, HeightLoop)), default=1)
        return threads

    def expand(self, n: int
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[int, int]]]:
        loop: NativeExpansion | None = self.interp.loops.get(self.expand_fn.sym_name.data)
        if loop is None or self.expand_fwd is not None:  # a differentiated expansion
            return super().expand(n)
        children, stored, levels, _, self.trees = loop(
            self, self.roots, self.shared, self.shared_fields(loop, loop.spec.moving),
            self.numbering)
        return children, stored, levels

    def numbering(self, plan: np.ndarray, tables: tuple[Any, ...]) -> Callable[[int, int], None]:
        """The expansion's call (its plan and kept `tables`) with the height
        order after it, in one native call (`kernels/numbering`): the
        order's kept arrays and plan made for as many rows as the tables
        hold, once per capacity (`renumber` reads what it found); and, where
        the height loop has run before, its policy after the order and then
        the loop itself (`kernels/height_policy`, `kernels/height_call`:
        `chosen`, `called`)."""
        _, children, stored, _, heights, trees = tables
        capacity, batch = int(plan[0]), len(self.roots[0])
        order = self.order_rows(children, stored).at_least(capacity + 1)
        kernel = self.order_kernel(children, stored)
        threads = self.team_threads()
        team = threads if threads >= 2 and batch >= 2 else 0
        kept = self.interp.kept.get(NUMBERING)  # (plan, order, team, numbering's plan, policies)
        if kept is None or kept[0] is not plan or kept[1] is not order or kept[2] != team or (
                kept[3][ORDER_PLAN] != data_address(kernel.plan)):
            sites = len(children)
            order_plan = kernel.kept_plan(capacity, int(plan[1]), team, row_tile(), heights,
                                          trees, order[0], children, order[1:1 + sites], stored,
                                          order[1 + sites:])
            expansion = self.interp.loops[self.expand_fn.sym_name.data]
            fields = np.array([expansion.address, data_address(plan), kernel.address,
                               data_address(order_plan), team, 0, 0, 0], np.int64)
            kept = self.interp.kept[NUMBERING] = (plan, order, team, fields, {})
        fields = kept[3]
        self.chosen, self.called = self.policy(kept[4], kernel, team, capacity, int(plan[1]))
        fields[POLICY:] = (0, 0, 0) if self.chosen is None else (
            self.chosen.address, data_address(self.chosen.plan),
            0 if self.called is None else data_address(self.called.plan))
        self.numbered = (kernel, team)
        at, number = data_address(fields), numbering_kernel(self.interp.folder)
        if self.called is None:
            return lambda ctx, _: number(ctx, at)
        called, sites = self.called, len(children)
        tables = called.post.rows.at_least(capacity)[:called.post.tables]
        # the loop's operands as `post` gives them, kept arrays at the capacity
        called.ready((*order[1 + sites:], *order[1:1 + sites], *tables, *self.shared),
                     called.post.rows.at_least(capacity), capacity, self.keep,
                     self.shared_fields(called.loop, called.loop.kept.shared.start))
        following = self.then(capacity, order) if self.then is not None else None
        if following is not None:
            called.then(following)
        expansion = self.interp.loops[self.expand_fn.sym_name.data]
        return lambda ctx, _: called.run(lambda: number(ctx, at), expansion.teams[1])

    def policy(self, policies: dict, kernel: HeightOrder, team: int, capacity: int,
               levels: int) -> tuple[HeightPolicy | None, HeightCall | None]:
        """The height policy for the loop this schedule runs (`loop_fn`),
        and the loop's call after it where the loop takes kept arrays alone
        (it neither zeroes what it reads nor adds into copies), made once per
        numbering plan (for `capacity` rows of at most `levels` heights);
        None before the loop's first call, whose `Post` the policy needs, or
        where its team is not the order's."""
        loop = self.interp.loops.get(self.loop_fn.sym_name.data)
        post = loop.layouts if isinstance(loop, HeightLoop) else None
        if not isinstance(post, Post) or (team and loop.threads != team):
            return None, None
        key = (loop.native.name, BY_GROUPS)
        found = policies.get(key)
        if found is None:
            chosen = HeightPolicy(kernel.plan, capacity, levels, team, BY_GROUPS, row_tile(),
                                  post.block, post.weights, self.interp.folder)
            called = None if loop.clears or loop.copied else HeightCall(loop, post, chosen)
            found = policies[key] = (chosen, called)
        return found

    def post(self, children: list[np.ndarray], stored: list[np.ndarray],
             bounds: np.ndarray, total: int, post_fn: func.FuncOp | None = None
             ) -> list[np.ndarray]:
        """As `Schedule.post`, over `self.children_kept` and `self.stored_kept`
        (which `children` and `stored` are the first rows of)."""
        function = post_fn or self.post_fn
        loop: HeightLoop | None = self.interp.loops.get(function.sym_name.data)
        if loop is None:
            return super().post(children, stored, bounds, total, post_fn)
        post: Post = loop.layouts or self.first_post(function, loop)
        bounds = self.choose(function, loop, post, bounds)
        self.bounds = bounds
        arrays = post.rows.at_least(total)
        self.tables_kept, self.saved_kept = arrays[:post.tables], arrays[post.tables:]
        # each height's (and thread's) first row and count of each saved value
        shape = (len(bounds) - 1, self.team[0], len(self.saved_kept), 2)
        count = shape[0] * shape[1] * shape[2] * 2
        saved_at = post.saved_at.at_least(count)[0][:count]
        self.saved_at = saved_at.reshape(shape)
        self.frames = []
        if self.called is not None and function is self.loop_fn and self.called.done(
                self.team[0]):  # run in the numbering call
            return [t[:total] for t in self.tables_kept]
        saved_at.fill(0)
        loop(bounds, (*self.stored_kept, *self.children_kept, *self.tables_kept, *self.shared),
             arrays, self.saved_at, *self.team, self.team_groups, total, self.most,
             self.shared_fields(loop, loop.kept.shared.start), self.team_pieces)
        return [t[:total] for t in self.tables_kept]

    def choose(self, function: func.FuncOp, loop: HeightLoop, post: Post,
               bounds: np.ndarray) -> np.ndarray:
        """The loop's team, groups and most rows (`team`, `team_groups`,
        `most`) and its bounds: as the numbering call chose them (`chosen`),
        or here. Groups (a thread's own trees, no barrier between heights)
        however many rows a thread's group holds: each call's scratch is
        sized by them (`native_loops.most_rows`), and the barriers of a
        height cut into blocks cost more than a group's rows beyond its
        block; the `_bwd` (`NativeBackward`) runs the same blocks, groups
        and team."""
        self.team, self.team_groups, self.team_pieces = (1, 0), None, None
        if self.chosen is not None and function is self.loop_fn:
            self.team, self.most, grouped = self.chosen.choice()
            self.team_groups = self.groups if grouped else None
            self.team_pieces = None if grouped or self.team[0] < 2 else self.pieces
            return bounds
        if self.grouping is not None:
            self.team = loop.team_size(bounds, post.backward, self.grouping.largest)
            self.team_groups = self.groups if self.team[0] > 1 else None
        if self.team_groups is None:
            bounds, pieces = in_blocks(bounds, post.block)
            self.team = loop.team_size(bounds, post.backward)
            self.team_pieces = pieces if self.team[0] > 1 else None
            self.most = most_rows(bounds, *self.team, None)
        else:
            self.most = max(self.grouping.most, 1)
        return bounds

    def first_post(self, function: func.FuncOp, loop: HeightLoop) -> Post:
        """`loop`'s `Post` and its `KeptPlan`: the stored values, children and
        tables its schedule keeps, then the shared operands."""
        post = Post(self, function, loop)
        owned = len(self.stored_kept) + len(self.children_kept) + post.tables
        loop.kept = KeptPlan(loop, HEADER, range(owned), range(owned, owned + len(self.shared)))
        loop.layouts = post  # last: a call stopped before here makes both again
        return post


class Post:
    """What the calls of a `@post` (or `_fwd`) loop share: its tables' and
    saved values' kept arrays, its saved_at's, the loop of its `_bwd` and
    the rows a height runs at a time (`block_rows`)."""

    def __init__(self, schedule: NativeSchedule, function: func.FuncOp, loop: HeightLoop):
        tables = [(dtype_of(t), row_shape(t))
                  for t in schedule.post_fn.function_type.outputs.data]
        saved = [(dtype_of(t), row_shape(t))
                 for t in function.function_type.outputs.data[len(tables):]]
        self.tables, self.rows = len(tables), KeptRows([*tables, *saved])
        self.saved_at = KeptRows([(np.dtype(np.int64), ())])
        name = function.sym_name.data
        self.backward = schedule.interp.loops.get(
            name[:-len(FORWARD)] + BACKWARD) if name.endswith(FORWARD) else None
        backward_row = self.backward.native.per_row if self.backward else 0
        self.block = block_rows(loop.threads, max(loop.native.per_row, backward_row))
        self.weights = weights_of(loop, self.backward)  # (`kernels/height_policy`)
