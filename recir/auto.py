"""`batching="frontier"` and `"auto"` for `recir.compile` and `recir.value_and_grad`.

`"frontier"` is `invoke-to-frontier`'s batched IR compiled by the one
backend (`frontier_compile.py`, `frontier_gradients.py`). `"auto"` holds both
the recursive native code and the frontier form and runs each call through
the one a cost model says is faster for that batch (`Estimate`): the same
batch always gets the same mode, and nothing is timed during the calls.

The model reads the recursive function's IR once (`cell_cost`): a node's
matrix multiply-adds (the mean of its `scf.if` branches: a binary tree's
nodes are half leaves), the weights a height streams (its largest branch's
matrices), whether the weights stay in a core's L2, the per-row kernels
both modes run alike (a bilinear form: `ceil(cols / lanes)` vector
multiply-adds and a reduction per dot) and the recursion's fan-out. Per
call it reads the batch's node counts (each tree's longest structure
array; 1 per input tuple without one). With the machine's costs
(`policy.Costs`: `unit_s`, one vector multiply-add's time, and the frontier's
costs that `recir.tune()` may measure):

- recursive: nodes x a node's work at the matrix-vector rate (`unit_s`, or
  `stream_factor` times it where the weights are out of L2); on a team as
  `policy.team_seconds` reckons it, its trees (or one tree's spawned
  subtrees) the tasks;
- frontier: `frontier_call_s` + heights x (`height_s` + the products'
  weights streamed once at the matrix-vector rate) + nodes x (`row_s` +
  a node's work at `gemm_gain` times that rate, the tile filled by the
  rows a height has on average); on a team its products split, a warm team
  start each.

Gradients: each product's backward is two products of its size (its
`vecmat` and weight gradient), so the products' work and their streaming
count three times, and a height streams a weight's size four times (those
three and the gradient's write): at L3's rate where the weights, their
gradients and the GEMMs' packed copies of them do not fit L2 together, and
twice over where the weights alone do not (a pack reads a weight, writes
its copy and reads that, each from L3); the frontier runs two schedules (forward, backward), so
its call, height and row costs count twice. The recursive code adds a weight
gradient from logged outer products by one GEMM where the weight is large
(`policy.defer_outer_bytes`): that third runs at the GEMM rate there.

The number of heights is the one statistic a batch does not give cheaply
(it takes a walk of each tree): it is estimated from the largest tree's
node count n as the geometric mean of its bounds, a complete tree's
log_k(n) and a caterpillar's n / k levels (k the fan-out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.dialects import scf
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block

from recir.backend import policy
from recir.backend.policy import Costs
from recir.diagnostics import RecirError
from recir.dialects import invoke, tmath
from recir.frontier_compile import FrontierFunction, compile_frontier
from recir.frontier_gradients import FrontierGradFunction, value_and_grad_frontier

MODES = ("recursive", "frontier", "auto")
GRADIENT_PRODUCTS = 3  # a product, its vecmat and its weight gradient
GRADIENT_STREAMS = 4  # passes over a weight's size: those three, the gradient's write
GRADIENT_WORKING_SET = 3  # a weight, its gradient and the GEMMs' packed copy of it
GRADIENT_PASSES = 2  # the frontier's forward and backward schedules


@dataclass(frozen=True)
class CellCost:
    """One invocation's static costs, read off the recursive IR."""

    products: float  # matrix multiply-adds, the mean of the branches
    product_units: float  # what they take the recursive code, in `unit_s` (`row_units`)
    gradient_units: float  # what their gradients take it, streaming weights
    gradient_gemm: float  # multiply-adds of weight gradients it adds by one GEMM
    weights: int  # matrix elements of the largest branch: what a height streams
    weight_bytes: int  # the bytes of all the cell's matrices and tensors
    row_kernels: float  # units of kernels run row by row in both modes (bilinear)
    product_ops: int  # matrix products of the largest branch (team starts a height)
    fan_out: int  # invoke sites of the recursive function


MEAN, LARGEST = range(2)


@dataclass(frozen=True)
class BlockCost:
    """`CellCost`'s sums over a block: each field a branch's `MEAN` or its
    `LARGEST` (the one with the most weights) where an `scf.if` chooses."""

    products: float = 0.0
    product_units: float = 0.0
    gradient_units: float = 0.0
    gradient_gemm: float = 0.0
    row_kernels: float = 0.0
    weights: float = 0.0
    product_ops: float = 0.0

    KINDS = (MEAN,) * 5 + (LARGEST,) * 2

    def __add__(self, other: BlockCost) -> BlockCost:
        return BlockCost(*(a + b for a, b in zip(self.fields(), other.fields(), strict=True)))

    def fields(self) -> tuple[float, ...]:
        return (self.products, self.product_units, self.gradient_units, self.gradient_gemm,
                self.row_kernels, self.weights, self.product_ops)

    @staticmethod
    def branches(costs: list[BlockCost]) -> BlockCost:
        largest = max(costs, key=lambda c: (c.weights, c.product_ops)).fields()
        return BlockCost(*(sum(c.fields()[k] for c in costs) / len(costs) if kind == MEAN
                           else largest[k] for k, kind in enumerate(BlockCost.KINDS)))


def row_units(rows: int, cols: int, lanes: int) -> float:
    """`unit_s` units of `rows` dot products of `cols` elements as the
    recursive code runs them (`tmath_kernels.dots`): cols // lanes vector
    multiply-adds, the cols % lanes left over one at a time, and log2(lanes)
    steps that reduce the vector to its sum; a unit is a lane's share of a
    vector operation."""
    return rows * (cols // lanes + cols % lanes + math.log2(lanes)) * lanes


def product_cost(rows: int, cols: int, lanes: int) -> BlockCost:
    """A matrix-vector product's costs. Its gradient is a product of its size
    (`vecmat`) and the weight gradient's outer product, which reads and
    writes the gradient: four passes over a matrix's size, of which the
    outer product's two become a GEMM's multiply-adds where the recursive
    code logs it (`policy.defer_outer_bytes`)."""
    macs, units = rows * cols, row_units(rows, cols, lanes)
    deferred = 4 * macs >= policy.defer_outer_bytes()
    return BlockCost(macs, units, (2 if deferred else 4) * units, macs if deferred else 0.0,
                     0.0, macs, 1)


def block_cost(block: Block, lanes: int) -> BlockCost:
    """A block's costs; an `scf.if` counts its branches' mean work and its
    largest branch's weights."""
    total = BlockCost()
    for op in block.ops:
        if isinstance(op, tmath.MatvecOp):
            total += product_cost(*tmath.shape_of(op.matrix), lanes)
        elif isinstance(op, tmath.BilinearOp):  # each row's dots, in both modes
            depth, rows, cols = tmath.shape_of(op.tensor)
            total += BlockCost(row_kernels=row_units(depth * rows, cols, lanes))
        elif isinstance(op, scf.IfOp):
            total += BlockCost.branches([block_cost(r.blocks[0], lanes) for r in op.regions
                                         if r.blocks])
        else:
            for region in op.regions:
                for inner in region.blocks:
                    total += block_cost(inner, lanes)
    return total


def cell_cost(module: Any) -> CellCost:
    """The costs of an invocation of the model's recursive function (the
    costliest, where there are several)."""
    lanes = policy.machine().lanes
    costs = []
    for sub in module.walk():
        if isinstance(sub, invoke.SubgraphOp):
            block = block_cost(sub.body.block, lanes)
            sites = sum(1 for op in sub.walk() if isinstance(op, invoke.InvokeOp))
            costs.append((block, sites))
    block, sites = max(costs, key=lambda c: c[0].product_units + c[0].row_kernels,
                       default=(BlockCost(), 1))
    weights = {op.matrix for op in module.walk() if isinstance(op, tmath.MatvecOp)}
    weights |= {op.tensor for op in module.walk() if isinstance(op, tmath.BilinearOp)}
    weight_bytes = sum(4 * math.prod(tmath.shape_of(w)) for w in weights)
    return CellCost(block.products, block.product_units, block.gradient_units,
                    block.gradient_gemm, int(block.weights), weight_bytes, block.row_kernels,
                    int(block.product_ops), max(sites, 1))


def estimated_heights(nodes: int, fan_out: int) -> float:
    """Levels of a tree of `nodes` invocations: the geometric mean of a
    complete tree's (log_k) and a caterpillar's (one internal node a level)."""
    if fan_out < 2 or nodes < 3:
        return float(max(nodes, 1))
    low = math.log(nodes * (fan_out - 1) + 1, fan_out)
    high = (nodes - 1) / fan_out + 1
    return math.sqrt(low * high)


class Estimate:
    """Both modes' predicted seconds for a batch, by the model above."""

    def __init__(self, cell: CellCost, costs: Costs, gradient: bool):
        self.cell, self.costs, self.gradient = cell, costs, gradient
        self.stream = policy.stream_factor(cell.weight_bytes, costs)

    def height_streams(self, cores: int) -> float:
        """What a height's products stream, in weights' sizes at the L2
        rate, with their columns split across `cores` (each core's L2 then
        holds its share of the weights)."""
        weight_bytes = self.cell.weight_bytes // max(cores, 1)
        alone = policy.stream_factor(weight_bytes, self.costs)
        if not self.gradient:
            return alone
        # the weights, their gradients and the packed copies compete for L2
        held = policy.stream_factor(GRADIENT_WORKING_SET * weight_bytes, self.costs)
        return GRADIENT_STREAMS * held * (2 if alone > 1 else 1)

    def recursive(self, sizes: Sequence[int], threads: int) -> float:
        cell, costs = self.cell, self.costs
        products = cell.product_units * self.stream
        if self.gradient:
            products = cell.gradient_units * self.stream \
                + cell.gradient_gemm / policy.gemm_gain(math.inf)
        kernels = cell.row_kernels * (GRADIENT_PRODUCTS if self.gradient else 1)
        alone = sum(sizes) * (products + kernels) * costs.unit_s
        if threads < 2:
            return alone
        tasks = len(sizes) if len(sizes) > 1 else 2 ** policy.call_budget(
            alone / costs.unit_s, threads, costs) - 1
        return min(alone, policy.team_seconds(alone, threads, costs, max(tasks, 1)))

    def frontier(self, sizes: Sequence[int], threads: int) -> float:
        cell, costs = self.cell, self.costs
        nodes = sum(sizes)
        heights = estimated_heights(max(sizes, default=1), cell.fan_out)
        products = GRADIENT_PRODUCTS if self.gradient else 1
        passes = GRADIENT_PASSES if self.gradient else 1
        fixed = passes * (costs.frontier_call_s + heights * costs.height_s
                          + nodes * costs.row_s)
        streamed = heights * cell.weights * costs.unit_s  # one stream of its weights
        rows = nodes * (cell.products * products / policy.gemm_gain(nodes / heights)
                        + cell.row_kernels * products) * costs.unit_s
        alone = fixed + streamed * self.height_streams(1) + rows
        if threads < 2:
            return alone
        starts = heights * passes * cell.product_ops * products
        split = streamed * self.height_streams(threads) + rows
        team = fixed + policy.team_seconds(split, threads, costs, 0) + starts * costs.warm_team_s
        return min(alone, team)


class Auto:
    """`auto`'s choice for one compiled model: its cell's costs, the
    machine's costs (`costs`, replaceable), and the batch's node counts."""

    def __init__(self, model: Any, batched: Any, gradient: bool, cache_dir: Any = None):
        self.batched = batched
        self.cell = cell_cost(model.module)
        self.costs = policy.costs(cache_dir)
        self.gradient = gradient
        self.estimate: Estimate | None = None
        inputs = list(batched.original.function_type.inputs)[:len(model.input_names)] \
            if batched is not None else []
        self.structures = [k for k, t in enumerate(inputs)
                           if isinstance(t, TensorType) and any(d < 0 for d in t.get_shape())]

    def sizes(self, batch: Sequence[Sequence[Any]]) -> list[int]:
        """Each input tuple's invocations: its longest structure array's length."""
        structures = self.structures
        return [max((len(inputs[j]) for j in structures), default=1) for inputs in batch]

    def seconds(self, batch: Sequence[Sequence[Any]], threads: int, frontier_threads: int
                ) -> dict[str, float]:
        """Each mode's predicted time for `batch`, the recursive code on
        `threads`, the frontier's products on up to `frontier_threads`."""
        estimate = self.estimate
        if estimate is None or estimate.costs is not self.costs:  # (`costs` replaced)
            estimate = self.estimate = Estimate(self.cell, self.costs, self.gradient)
        sizes = self.sizes(batch)
        return {"recursive": estimate.recursive(sizes, threads),
                "frontier": estimate.frontier(sizes, frontier_threads)}

    def mode(self, batch: Sequence[Sequence[Any]], threads: int, frontier_threads: int
             ) -> str:
        if self.batched is None or not batch:
            return "recursive"
        seconds = self.seconds(batch, threads, frontier_threads)
        return "frontier" if seconds["frontier"] < seconds["recursive"] else "recursive"


class AutoFunction:
    """`batching="auto"`: recursive native code or the frontier, per call."""

    def __init__(self, model: Any, native: Any, batched: FrontierFunction | None,
                 cache_dir: Any = None):
        self.native, self.batched = native, batched
        self.auto = Auto(model, batched, False, cache_dir)

    def choose(self, batch: Sequence[Sequence[Any]]) -> str:
        native = self.native
        return self.auto.mode(batch, native.threads if native.team else 1, native.threads)

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        return self.batch([inputs])[0]

    def batch(self, batch: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        if self.choose(batch) == "frontier":
            return self.batched.batch(batch)  # type: ignore[union-attr]
        return self.native.batch(batch)


class AutoGradFunction:
    """`value_and_grad(batching="auto")`: the recursive gradient code or the
    frontier's batched backward, per batch, by the same model."""

    def __init__(self, model: Any, recursive: Any, batched: FrontierGradFunction | None,
                 cache_dir: Any = None):
        self.recursive, self.batched = recursive, batched
        self.auto = Auto(model, batched, True, cache_dir)
        self.params = recursive.params

    def choose(self, batch: Sequence[Sequence[Any]], threads: int) -> str:
        """By the recursive code on `threads` (a team's or the pool's) and
        the frontier on the function's."""
        native = self.recursive.native
        return self.auto.mode(batch, threads, native.threads if native is not None else 1)

    def __call__(self, *inputs: Any, into: dict[str, Any] | None = None) -> Any:
        return self.recursive(*inputs, into=into)

    def batch(self, batch: Sequence[Sequence[Any]], into: dict[str, Any] | None = None,
              threads: int | None = None) -> Any:
        """`threads` (default: the function's) for the recursive code."""
        native = self.recursive.native
        threads = threads or (native.threads if native is not None else 1)
        if self.choose(batch, threads) == "frontier":
            return self.batched.batch(batch, into)  # type: ignore[union-attr]
        return self.recursive.batch(batch, into, threads)


def checked_mode(batching: str) -> None:
    if batching not in MODES:
        raise RecirError(f"error: unknown batching '{batching}' (choose from {MODES})")


def frontier_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k in ("cache_dir", "threads")}


def frontier_or_none(build: Any, *args: Any, **options: Any) -> Any:
    """`build`'s frontier form, or None for a recursion `invoke-to-frontier`
    cannot batch (then `auto` runs the recursive code only)."""
    try:
        return build(*args, **frontier_options(options))
    except RecirError:
        return None


def compile_batched(model: Any, batching: str, **options: Any) -> Any:
    """`recir.compile(model, batching="frontier" | "auto")`."""
    from recir import pipeline

    checked_mode(batching)
    if batching == "frontier":
        return compile_frontier(model, **frontier_options(options))
    batched = frontier_or_none(compile_frontier, model, **options)
    return AutoFunction(model, pipeline.compile(model, **options), batched,
                        options.get("cache_dir"))


def value_and_grad_batched(model: Any, loss: int, batching: str, **options: Any) -> Any:
    """`recir.value_and_grad(model, batching="frontier" | "auto")`."""
    from recir import gradients as api

    checked_mode(batching)
    if batching == "frontier":
        return value_and_grad_frontier(model, loss, **frontier_options(options))
    batched = frontier_or_none(value_and_grad_frontier, model, loss, **options)
    return AutoGradFunction(model, api.value_and_grad(model, loss, **options), batched,
                            options.get("cache_dir"))
