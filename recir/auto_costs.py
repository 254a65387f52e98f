"""The cost model of `batching="auto"` (`auto.py`): both modes' seconds for a batch.

The model reads the recursive function's IR once (`cell_cost`): a node's
products (the mean of its `scf.if` branches: a binary tree's nodes are half
leaves), in multiply-adds and in what the recursive code's dots take
(`row_units`: a vector multiply-add per lanes columns, the last masked, a
reduction); the weights a height streams (its largest branch's
matrices, a bilinear form's V as a matrix of its depth x rows vectors);
whether they stay in a core's L2; the recursion's fan-out. Per call
it reads the batch's node counts (each input tuple's longest structure
array; 1 without one). With the machine's costs (`policy.Costs`: `unit_s`,
a lane's multiply-add; the frontier's call, height and row costs and
L3's slowdown, stated defaults that `recir.tune()` may measure):

- recursive: nodes x a node's dots at `unit_s` x what L2 delivers a cycle
  (`policy.stream_factor`; the part of the weights, with a gradient's
  weight gradients, beyond L2's size x `l3_slowdown`); on a team as
  `policy.team_seconds` reckons it, its trees (or one tree's spawned
  subtrees) the tasks, but no faster than the tallest tree's nodes one
  after another (the span);
- frontier: `frontier_call_s` + heights x (`height_s` + the products'
  weights streamed once) + nodes x (`row_s` + a node's multiply-adds at
  `gemm_gain` times `unit_s`'s rate, the tile filled by the rows a height
  has on average); on a team each thread takes its share of every height's
  rows (or its own trees', `backend/height_groups.py`) and multiplies them
  by all of the height's weights: the tile is filled by a thread's rows a
  height, every thread streams the weights, and a height ends at a barrier;
  or the products' own teams split each by columns (each core's L2 its
  share of the weights, a team start each), whichever is cheaper: those
  products whose multiply-adds at a height's rows pay a warm team's start
  (`policy.team_min_work`), the others on the calling thread; in a
  gradient a product and its vecmat a height (`GRADIENT_TEAMS`).

Gradients: a product's backward is two products of its size (`vecmat`, the
weight gradient), so products count three times; a bilinear form's backward
over rows is three products of V's size (the left gradient's and the right
one's at a height's rows, V's with the rows as its depth: at the tile's full
gain), so it counts four times in the frontier. The frontier's weight
gradient adds a depth block of logged rows at a time (`row_logs`: at the
tile's full gain), so a height streams a weight's size twice (the product
and its vecmat): at L3's rate where a weight and the GEMMs' packed copy do
not fit L2 together (the weight's packed copy made once a call and kept
through its heights, `gemm_cached`). The frontier runs two
schedules, so its height and row costs count twice, but its call once (a
gradient's `_bwd` follows the `_fwd` in the same native call, repeated as
an inference's is: `backend/repeat_call`); the recursive
code adds a large weight's gradient by one GEMM (`policy.defer_outer_bytes`).

The number of heights is the one statistic a batch does not give cheaply
(it takes a walk of each tree): it is estimated from the largest tree's
node count n as the geometric mean of its bounds, a complete tree's
log_k(n) and a caterpillar's n / k levels (k the fan-out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any

from xdsl.dialects import scf
from xdsl.ir import Block

from recir.backend import policy
from recir.backend.policy import Costs
from recir.dialects import invoke, tmath

GRADIENT_PRODUCTS = 3  # a product, its vecmat and its weight gradient
GRADIENT_STREAMS = 2  # a height's passes over a weight's size: its product and vecmat
GRADIENT_WORKING_SET = 2  # a weight and the GEMMs' packed copy of it
GRADIENT_PASSES = 2  # the frontier's forward and backward schedules
# a product's teams a height in a gradient, its own and its vecmat's (its
# weight gradient is logged at a thin height and added a block at a time)
GRADIENT_TEAMS = 2


@dataclass(frozen=True)
class CellCost:
    """One invocation's static costs, read off the recursive IR."""

    products: float  # matrix multiply-adds, the mean of the branches
    product_units: float  # what they take the recursive code, in `unit_s` (`row_units`)
    gradient_units: float  # what their gradients take it, streaming weights
    gradient_gemm: float  # multiply-adds of weight gradients it adds by one GEMM
    weights: int  # matrix elements of the largest branch: what a height streams
    weight_bytes: int  # the bytes of all the cell's matrices and tensors
    # a row's multiply-adds of each matrix product of the largest branch:
    # those that pay a team at a height's rows start one (`Estimate.frontier`)
    product_sizes: tuple[int, ...]
    fan_out: int  # invoke sites of the recursive function
    # of `products`, bilinear forms' multiply-adds: their frontier gradient
    # runs one more product of V's size at a height's rows
    bilinear: float = 0.0


@dataclass(frozen=True)
class BlockCost:
    """`CellCost`'s sums over a block: where an `scf.if` chooses, each
    field its branches' mean, but those of `LARGEST` the branch's with the
    most weights."""

    products: float = 0.0
    product_units: float = 0.0
    gradient_units: float = 0.0
    gradient_gemm: float = 0.0
    bilinear: float = 0.0
    weights: float = 0.0
    product_sizes: tuple[int, ...] = ()  # (added: concatenated)

    LARGEST = frozenset({"weights", "product_sizes"})

    def __add__(self, other: BlockCost) -> BlockCost:
        return BlockCost(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @staticmethod
    def branches(costs: list[BlockCost]) -> BlockCost:
        largest = max(costs, key=lambda c: (c.weights, len(c.product_sizes)))
        return BlockCost(**{f.name: getattr(largest, f.name) if f.name in BlockCost.LARGEST
                            else sum(getattr(c, f.name) for c in costs) / len(costs)
                            for f in fields(BlockCost)})


def row_units(rows: int, cols: int, lanes: int) -> float:
    """`unit_s` units of `rows` dot products of `cols` elements as the
    recursive code runs them (`vector_kernels.vector_dots`): a vector
    multiply-add per `lanes` columns, the last masked, and log2(lanes) steps
    that reduce the vector to its sum; a unit is a lane's share of a vector
    operation."""
    return rows * (-(-cols // lanes) + math.log2(lanes)) * lanes


def product_cost(rows: int, cols: int, lanes: int, deferred: bool) -> BlockCost:
    """A matrix-vector product's costs. Its gradient is a product of its size
    (`vecmat`) and the weight gradient's outer product, which reads and
    writes the gradient: four passes over a matrix's size, of which the
    outer product's two become a GEMM's multiply-adds where the recursive
    code logs them (`deferred`)."""
    macs, units = rows * cols, row_units(rows, cols, lanes)
    return BlockCost(products=macs, product_units=units,
                     gradient_units=(2 if deferred else 4) * units,
                     gradient_gemm=macs if deferred else 0.0, weights=macs,
                     product_sizes=(macs,))


def block_cost(block: Block, lanes: int, deferred: bool) -> BlockCost:
    """A block's costs; an `scf.if` counts its branches' mean work and its
    largest branch's weights."""
    total = BlockCost()
    for op in block.ops:
        if isinstance(op, tmath.MatvecOp):
            total += product_cost(*tmath.shape_of(op.matrix), lanes, deferred)
        elif isinstance(op, tmath.BilinearOp):  # V's rows times y: a product, both modes
            depth, rows, cols = tmath.shape_of(op.tensor)
            total += product_cost(depth * rows, cols, lanes, False) + BlockCost(
                bilinear=depth * rows * cols)
        elif isinstance(op, scf.IfOp):
            total += BlockCost.branches([block_cost(r.blocks[0], lanes, deferred)
                                         for r in op.regions if r.blocks])
        else:
            for region in op.regions:
                for inner in region.blocks:
                    total += block_cost(inner, lanes, deferred)
    return total


def cell_cost(module: Any) -> CellCost:
    """The costs of an invocation of the model's recursive function (the
    costliest, where there are several)."""
    lanes = policy.machine().lanes
    matrices = {op.matrix for op in module.walk() if isinstance(op, tmath.MatvecOp)}
    sizes = [4 * math.prod(tmath.shape_of(m)) for m in matrices]
    # the recursive gradient logs every outer product where the largest
    # weight reaches `defer_outer_bytes` (`convert-tmath-to-loops`)
    deferred = max(sizes, default=-1) >= policy.defer_outer_bytes()
    costs = []
    for sub in module.walk():
        if isinstance(sub, invoke.SubgraphOp):
            block = block_cost(sub.body.block, lanes, deferred)
            sites = sum(1 for op in sub.walk() if isinstance(op, invoke.InvokeOp))
            costs.append((block, sites))
    block, sites = max(costs, key=lambda c: c[0].product_units, default=(BlockCost(), 1))
    tensors = {op.tensor for op in module.walk() if isinstance(op, tmath.BilinearOp)}
    weight_bytes = sum(sizes) + sum(4 * math.prod(tmath.shape_of(t)) for t in tensors)
    return CellCost(block.products, block.product_units, block.gradient_units,
                    block.gradient_gemm, int(block.weights), weight_bytes,
                    block.product_sizes, max(sites, 1), block.bilinear)


def height_bounds(nodes: int, fan_out: int) -> tuple[float, float]:
    """The fewest and most levels a tree of `nodes` invocations has: a
    complete tree's log_k and a caterpillar's (one internal node a level)."""
    if fan_out < 2 or nodes < 3:
        return (float(max(nodes, 1)),) * 2
    return math.log(nodes * (fan_out - 1) + 1, fan_out), (nodes - 1) / fan_out + 1


def estimated_heights(nodes: int, fan_out: int) -> float:
    """The geometric mean of `height_bounds`."""
    low, high = height_bounds(nodes, fan_out)
    return math.sqrt(low * high)


class Estimate:
    """Both modes' predicted seconds for a batch, by the model above."""

    def __init__(self, cell: CellCost, costs: Costs, gradient: bool):
        self.cell, self.costs, self.gradient = cell, costs, gradient
        # a recursive gradient adds each outer product into its weight's
        # gradient, which then shares L2 with the weights (unless logged:
        # `gradient_gemm`)
        held = 2 if gradient and not cell.gradient_gemm else 1
        self.stream = policy.stream_factor(held * cell.weight_bytes, costs)

    def height_streams(self, cores: int = 1) -> float:
        """What a height's products stream, in weights' sizes at `unit_s`
        a vector (`policy.stream_factor`), with their columns split across
        `cores` (each core's L2 then holds its share of the weights)."""
        weight_bytes = self.cell.weight_bytes // max(cores, 1)
        alone = policy.stream_factor(weight_bytes, self.costs)
        if not self.gradient:
            return alone
        # the weights, their gradients and the packed copies compete for L2;
        # a product's weight is packed once a call (`gemm_cached`: the copy
        # kept through the loop's heights), and a thin height's vecmat reads
        # its weight in place (`gemm_kernels.broadcast_driver`): a stream each
        held = policy.stream_factor(GRADIENT_WORKING_SET * weight_bytes, self.costs)
        return GRADIENT_STREAMS * held

    def recursive(self, sizes: Sequence[int], threads: int, heights: float | None = None
                  ) -> float:
        """`heights`: the batch's (default: `estimated_heights`); on a team no
        faster than its tallest tree's nodes one after another (the span)."""
        cell, costs = self.cell, self.costs
        products = cell.product_units * self.stream
        if self.gradient:
            products = cell.gradient_units * self.stream \
                + cell.gradient_gemm / policy.gemm_gain(math.inf)
        node = products * costs.unit_s
        alone = sum(sizes) * node
        if threads < 2:
            return alone
        if heights is None:
            heights = estimated_heights(max(sizes, default=1), cell.fan_out)
        tasks = len(sizes) if len(sizes) > 1 else 2 ** policy.call_budget(
            alone / costs.unit_s, threads, costs) - 1
        team = policy.team_seconds(alone, threads, costs, max(tasks, 1))
        return min(alone, max(team, heights * node))

    def frontier(self, sizes: Sequence[int], threads: int, heights: float | None = None
                 ) -> float:
        """`heights`: the batch's (default: `estimated_heights`)."""
        cell, costs = self.cell, self.costs
        nodes = sum(sizes)
        if heights is None:
            heights = estimated_heights(max(sizes, default=1), cell.fan_out)
        passes = GRADIENT_PASSES if self.gradient else 1
        fixed = costs.frontier_call_s + passes * (heights * costs.height_s
                                                  + nodes * costs.row_s)
        weights = heights * cell.weights * costs.unit_s  # one stream of a height's weights

        def rows(per_height: float) -> float:  # products whose tile `per_height` rows fill
            gains = 1 / policy.gemm_gain(per_height)
            if not self.gradient:
                return nodes * cell.products * gains * costs.unit_s
            # a vecmat at a height's rows, a weight gradient a depth block of
            # logged rows at a time (`row_logs`); a bilinear form's right
            # gradient one more product at a height's rows
            gains += (GRADIENT_PRODUCTS - 2) / policy.gemm_gain(per_height) \
                + 1 / policy.gemm_gain(math.inf)
            macs = cell.products * gains + cell.bilinear / policy.gemm_gain(per_height)
            return nodes * macs * costs.unit_s

        products = weights * self.height_streams() + rows(nodes / heights)
        alone = fixed + products
        if threads < 2:
            return alone
        # each thread a share of every height's rows (or its own trees'), all
        # of the height's weights, a barrier a height
        by_rows = fixed + weights * self.height_streams() + policy.team_seconds(
            rows(nodes / (heights * threads)), threads, costs, 0) \
            + heights * passes * costs.warm_team_s
        # the products' own teams, where a height's rows pay one (a warm
        # team's start): each core its columns, a team start each; the
        # other products stay on the calling thread
        least = policy.team_min_work(threads, costs, warm=True)
        paying = [size for size in cell.product_sizes
                  if least >= 0 and nodes / heights * size >= least]
        shared = sum(paying) / max(sum(cell.product_sizes), 1)
        starts = heights * len(paying) * (GRADIENT_TEAMS if self.gradient else 1)
        by_columns = fixed + (1 - shared) * products + policy.team_seconds(
            shared * (weights * self.height_streams(threads) + rows(nodes / heights)), threads,
            costs, 0) + starts * costs.warm_team_s
        return min(alone, by_rows, by_columns)
