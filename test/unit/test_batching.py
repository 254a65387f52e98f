"""`batching="frontier"` and `"auto"` against the recursive native path and
the NumPy references: outputs and gradients of all four models, on random,
single-leaf and linear trees and on batches mixing them; `auto`'s choice;
unsupported shapes are located errors."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import recir
from recir import auto as recir_auto
from recir import auto_costs as auto_model
from recir.auto import AutoFunction
from recir.backend import policy
from recir.data import make_treebank
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.frontier_gradients import FrontierGradFunction
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn

TREE_MODELS = [tree_rnn, rntn, tree_lstm]


def rel(got, expected) -> float:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-30))


def single_leaf() -> Tree:
    return Tree(left=[-1], right=[-1], word=[7], label=[3])


def mixed_trees() -> list[Tree]:
    return [single_leaf(), *make_treebank(3, "linear", num_leaves=9, seed=2),
            *make_treebank(6, seed=3), *make_treebank(2, "balanced", num_leaves=16, seed=4),
            single_leaf()]


def tree_args(tree: Tree) -> tuple:
    return (tree.left, tree.right, tree.word, tree.label, tree.root)


@pytest.mark.parametrize("model", TREE_MODELS, ids=lambda m: m.__name__.split(".")[-1])
def test_tree_models_match_recursive_native_path(model):
    params = model.init_params(np.random.default_rng(0), vocab=100)
    traced = model.trace_model(params)
    native = recir.compile(traced, threads=1)
    batched = recir.compile(traced, batching="frontier")
    trees = mixed_trees()
    outs = batched.batch([tree_args(t) for t in trees])
    for tree, (h, loss) in zip(trees, outs, strict=True):
        h_nat, loss_nat = native(*tree_args(tree))
        h_ref, loss_ref = model.reference(tree, tree.root, params)
        assert rel(h, h_nat) <= 1e-5 and rel(h, h_ref) <= 1e-5
        assert loss == pytest.approx(loss_nat, rel=1e-5)
        assert loss == pytest.approx(loss_ref, rel=1e-5)
    h1, loss1 = batched(*tree_args(trees[4]))  # one tree: batching within it
    assert rel(h1, outs[4][0]) <= 1e-6 and loss1 == pytest.approx(outs[4][1], rel=1e-6)


@pytest.mark.parametrize("model", TREE_MODELS, ids=lambda m: m.__name__.split(".")[-1])
def test_tree_model_gradients_match_value_and_grad(model):
    params = model.init_params(np.random.default_rng(1), vocab=100)
    traced = model.trace_model(params)
    reference = recir.value_and_grad(traced)
    batched = recir.value_and_grad(traced, batching="frontier")
    assert isinstance(batched, FrontierGradFunction)
    trees = mixed_trees()
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    losses = [reference(*tree_args(t), into=expected)[0][1] for t in trees]
    outs, grads = batched.batch([tree_args(t) for t in trees])
    assert [o[1] for o in outs] == pytest.approx(losses, rel=1e-5)
    for name in params:
        assert rel(grads[name], expected[name]) <= 1e-5, name


def td_inputs(n: int) -> list[tuple]:
    return [(np.random.default_rng(k).standard_normal(8).astype(np.float32), d)
            for k, d in zip(range(n), [0, 1, 3, 6, 6, 5, 2, 6, 4, 6][:n] * 3, strict=False)]


def test_top_down_tree_lstm_matches_native_and_reference():
    params = td_tree_lstm.init_params(np.random.default_rng(3))
    traced = td_tree_lstm.trace_model(params)
    native = recir.compile(traced, threads=1)
    batched = recir.compile(traced, batching="frontier", threads=1)
    inputs = td_inputs(10)
    sizes = set()
    for (x, depth), (count, total) in zip(inputs, batched.batch(inputs), strict=True):
        n_nat, t_nat = native(x, depth)
        n_ref, t_ref = td_tree_lstm.reference(x, depth, params)
        assert count == n_nat == n_ref
        assert total == pytest.approx(t_nat, rel=1e-5, abs=1e-5)
        assert total == pytest.approx(t_ref, rel=1e-5, abs=1e-5)
        sizes.add(count)
    assert len(sizes) > 2  # trees of different shapes grew side by side


def test_top_down_tree_lstm_gradients():
    params = td_tree_lstm.init_params(np.random.default_rng(3))
    traced = td_tree_lstm.trace_model(params)
    reference = recir.value_and_grad(traced, loss=1)
    batched = recir.value_and_grad(traced, loss=1, batching="frontier", threads=1)
    inputs = td_inputs(10)
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    for x, depth in inputs:
        reference(x, depth, into=expected)
    _, grads = batched.batch(inputs)
    for name in params:
        if np.abs(expected[name]).max() == 0:
            assert np.abs(grads[name]).max() == 0
            continue
        assert rel(grads[name], expected[name]) <= 1e-5, name


def test_into_accumulates_and_params_are_read_by_reference():
    params = tree_rnn.init_params(np.random.default_rng(0), vocab=100)
    traced = tree_rnn.trace_model(params)
    batched = recir.value_and_grad(traced, batching="frontier", threads=1)
    tree = make_treebank(1, seed=5)[0]
    _, once = batched(*tree_args(tree))
    into = {k: np.zeros_like(v) for k, v in params.items()}
    batched(*tree_args(tree), into=into)
    batched(*tree_args(tree), into=into)
    assert rel(into["w"], 2 * once["w"]) <= 1e-6
    forward = recir.compile(traced, batching="frontier", threads=1)
    before = forward(*tree_args(tree))[1]
    traced.params["w_out"] *= 2  # in place, as optimizers do
    assert forward(*tree_args(tree))[1] != pytest.approx(before)


def test_assigning_a_parameter_reaches_every_compiled_path():
    """Compiled code binds the traced arrays: an assigned value is copied
    into them (a new array used to be read by the interpreter and the
    recursive gradient but not by compiled forwards or the frontier)."""
    params = tree_rnn.init_params(np.random.default_rng(0), vocab=100)
    traced = tree_rnn.trace_model(params)
    tree = make_treebank(1, seed=5)[0]
    paths = {"recursive": recir.compile(traced, threads=1),
             "frontier": recir.compile(traced, batching="frontier", threads=1),
             "grad": recir.value_and_grad(traced, threads=1),
             "grad-frontier": recir.value_and_grad(traced, batching="frontier", threads=1)}
    new = (np.random.default_rng(1).standard_normal(params["w"].shape)).astype(np.float64)
    traced.params["w"] = new
    expected = tree_rnn.reference(tree, tree.root, {**traced.params, "w": new})[1]
    outputs = {name: f(*tree_args(tree)) for name, f in paths.items()}
    losses = {name: float((out[0] if "grad" in name else out)[1]) for name, out in outputs.items()}
    losses["interpreter"] = float(traced.run(*tree_args(tree))[1])
    for name, loss in losses.items():
        assert loss == pytest.approx(expected, rel=1e-5), name
    with pytest.raises(RecirError, match=r"parameter 'w' has shape \(8, 16\), got \(8, 8\)"):
        traced.params["w"] = np.ones((8, 8), np.float32)
    with pytest.raises(RecirError, match="no parameter 'v'"):
        traced.params["v"] = new
    with pytest.raises(RecirError, match="parameters are fixed"):
        del traced.params["b"]
    assert set(traced.params) == set(params)
    traced.params |= {"b": np.full(params["b"].shape, 0.5)}  # as update() does
    traced.params["b_out"] = 0.0  # a number fills the array
    assert (traced.params["b"] == 0.5).all() and not traced.params["b_out"].any()
    with pytest.raises(RecirError, match=r"^error: @tree_rnn takes 5 inputs \(left, right, "
                                         r"word, label, root\), got 2$"):
        traced.run(*tree_args(tree)[:2])  # (it counted the parameters: 10 arguments, got 7)
    # float64 arrays given to a TracedModel: compiled code bound float32 copies and
    # missed the in-place updates the interpreter saw
    wide = recir.TracedModel(traced.module, traced.entry, traced.input_names,
                             {k: v.astype(np.float64) for k, v in traced.params.items()})
    forward = recir.compile(wide, threads=1)
    forward(*tree_args(tree))
    wide.params["w"] *= 2  # in place, as optimizers do
    expected = tree_rnn.reference(tree, tree.root, wide.params)[1]
    assert forward(*tree_args(tree))[1] == pytest.approx(expected, rel=1e-5)
    assert wide.run(*tree_args(tree))[1] == pytest.approx(expected, rel=1e-5)


def test_options_the_frontier_cannot_honour_are_refused():
    """The frontier took only `cache_dir` and `threads` and dropped the rest
    silently: a misspelt option, a `max_depth` safety bound, the interpreter."""
    traced = tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0), vocab=100))
    for batching in ("frontier", "auto"):
        with pytest.raises(TypeError, match="compile.. got an unexpected keyword argument "
                                            "'thread'"):
            recir.compile(traced, batching=batching, thread=1)
        with pytest.raises(TypeError, match="value_and_grad.. got an unexpected keyword "
                                            "argument 'thread'"):
            recir.value_and_grad(traced, batching=batching, thread=1)
    for function in (recir.compile, recir.value_and_grad):  # (as `auto`'s recursive code)
        with pytest.raises(RecirError, match="max_depth bounds the recursive code's calls"):
            function(traced, batching="frontier", max_depth=100)
    with pytest.raises(RecirError, match="engine='interpret' runs the recursive form"):
        recir.value_and_grad(traced, batching="frontier", engine="interpret")
    for batching in ("recursive", "frontier", "auto"):  # ("no" was read as true)
        with pytest.raises(RecirError, match="fuse must be True or False, got 'no'"):
            recir.compile(traced, batching=batching, fuse="no", threads=1)
        with pytest.raises(RecirError, match="fuse must be True or False, got 0"):
            recir.value_and_grad(traced, batching=batching, fuse=0, threads=1)


def nested_model():
    """f(i) = i <= 0 ? 0 : f(f(i - 1) - 1): an argument needs a recursive result."""
    with recir.trace("nested") as m:
        n = m.input("n", recir.i32)
        with recir.SubGraph("f", [recir.i32], [recir.i32]) as f:
            (i,) = f.inputs
            f.output(recir.cond(i <= 0, lambda: i * 0, lambda: f(f(i - 1) - 1)))
        m.output(f(n))
    return m.traced


def test_unbatchable_recursion_is_a_located_error_and_auto_falls_back():
    traced = nested_model()
    with pytest.raises(RecirError, match="invoke.invoke' op cannot be batched"):
        recir.compile(traced, batching="frontier", threads=1)
    auto = recir.compile(traced, batching="auto", threads=1)
    assert isinstance(auto, AutoFunction) and auto.batched is None
    assert auto(3)[0] == 0
    with pytest.raises(RecirError, match="unknown batching"):
        recir.compile(traced, batching="sideways")


def test_a_subgraph_that_never_invokes_itself_is_named_so():
    """A subgraph without recursion has nothing for the frontier to batch:
    the error says so, at the entry's call (it used to say its recursion
    never ends); `auto` runs the plain code."""
    with recir.trace("plain") as m:
        n = m.input("n", recir.i32)
        with recir.SubGraph("g", [recir.i32], [recir.i32]) as g:
            g.output(g.inputs[0] * 2 + 1)
        m.output(g(n))
    with pytest.raises(RecirError, match="@g never invokes itself") as caught:
        recir.compile(m.traced, batching="frontier", threads=1)
    assert "test_batching.py" in str(caught.value)
    auto = recir.compile(m.traced, batching="auto", threads=1)
    assert auto.batched is None and auto(20)[0] == 41


def chain(nodes: int) -> tuple:
    """A linear tree's inputs: `nodes` invocations for `auto` to count."""
    tree = make_treebank(1, "linear", num_leaves=(nodes + 1) // 2, seed=1)[0]
    assert tree.num_nodes == nodes
    return tree_args(tree)


def dot_units(rows: int, cols: int) -> float:
    """`rows` dots of `cols` as the recursive code runs them, in lanes' units:
    a vector a `lanes` columns (the last masked) and a reduction."""
    lanes = policy.machine().lanes
    return rows * (math.ceil(cols / lanes) + math.log2(lanes)) * lanes


def forced(auto, mode: str):
    """`auto`'s model with costs that make `mode` the cheaper for any batch:
    a frontier call of a second, or one of nothing."""
    slow = 1.0 if mode == "recursive" else 0.0
    auto.costs = replace(auto.costs, frontier_call_s=slow, height_s=0.0, row_s=0.0)


def test_auto_reads_its_cell_off_the_recursive_ir():
    """A node's products are its branches' mean (leaf: w_leaf, w_out;
    internal: u, w_out), a height streams the larger branch's weights, a
    bilinear tensor a product of its rows."""
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=24, embed=16, vocab=100)
    cell = auto_model.cell_cost(tree_lstm.trace_model(params).module)
    leaf, inner, out = (72, 16), (120, 48), (5, 24)
    assert cell.products == (math.prod(leaf) + math.prod(inner)) / 2 + math.prod(out)
    assert cell.product_units == pytest.approx(
        (dot_units(*leaf) + dot_units(*inner)) / 2 + dot_units(*out))
    assert cell.weights == math.prod(inner) + math.prod(out)
    assert cell.product_sizes == (math.prod(inner), math.prod(out))
    assert cell.weight_bytes == 4 * sum(v.size for k, v in params.items()
                                        if k in ("w_leaf", "u", "w_out"))
    assert cell.fan_out == 2
    d25 = rntn.init_params(np.random.default_rng(0), hidden=25, vocab=100)
    cell = auto_model.cell_cost(rntn.trace_model(d25).module)
    # internal nodes' (half): V's 25 x 50 rows of 50 as one product
    tensor, inner, out = (25 * 50, 50), (25, 50), (5, 25)
    assert cell.products == (math.prod(tensor) + math.prod(inner)) / 2 + math.prod(out)
    assert cell.product_units == pytest.approx(
        (dot_units(*tensor) + dot_units(*inner)) / 2 + dot_units(*out))
    assert cell.bilinear == math.prod(tensor) / 2


def test_auto_estimates_follow_the_costs():
    """Both modes' seconds by the model's terms: the frontier's call cost
    counts once, its height and row costs once (twice for gradients: two
    schedules in the one call), products at the
    GEMM tile's gain (three for gradients, four for a bilinear form's),
    weights out of L2 slow the recursive products by `l3_slowdown` (a
    gradient's with its gradient), a team takes at least the span."""
    cell = auto_model.CellCost(products=1e5, product_units=2e5, gradient_units=8e5,
                               gradient_gemm=0.0, weights=1e5, weight_bytes=4,
                               product_sizes=(100000,), fan_out=2)
    costs = policy.Costs(1e-11, 1e-6, 50e-6)
    sizes = [37] * 5
    base = auto_model.Estimate(cell, costs, False)
    from_l2 = policy.stream_factor(cell.weight_bytes, costs)  # (a vector's bytes from L2)
    assert base.recursive(sizes, 1) == pytest.approx(sum(sizes) * 2e5 * 1e-11 * from_l2)
    later = auto_model.Estimate(cell, replace(costs, frontier_call_s=costs.frontier_call_s
                                               + 1e-3), False)
    assert later.frontier(sizes, 1) == pytest.approx(base.frontier(sizes, 1) + 1e-3)
    grad = auto_model.Estimate(cell, replace(costs, frontier_call_s=costs.frontier_call_s
                                              + 1e-3), True)
    assert grad.frontier(sizes, 1) - auto_model.Estimate(cell, costs, True).frontier(
        sizes, 1) == pytest.approx(1e-3)
    taller = auto_model.Estimate(cell, replace(costs, height_s=costs.height_s + 1e-4), True)
    assert taller.frontier(sizes, 1, heights=7) - auto_model.Estimate(cell, costs, True).frontier(
        sizes, 1, heights=7) == pytest.approx(2 * 7e-4)
    # the frontier's products at the tile's gain of a height's rows; a
    # gradient's vecmat there too, its weight gradient at the full gain
    rows = sum(sizes) / auto_model.estimated_heights(37, 2)
    more = replace(cell, products=2e5)
    for gradient, gains in ((False, 1 / policy.gemm_gain(rows)),
                            (True, 2 / policy.gemm_gain(rows) + 1 / policy.gemm_gain(math.inf))):
        plain, larger = (auto_model.Estimate(c, costs, gradient) for c in (cell, more))
        added = larger.frontier(sizes, 1) - plain.frontier(sizes, 1)
        assert added == pytest.approx(sum(sizes) * 1e5 * gains * 1e-11)
    # a bilinear form's frontier gradient: a fourth product (its right
    # gradient) at a height's rows; its inference and recursive code as a product's
    tensor = replace(cell, bilinear=1e5)
    for gradient, gains in ((False, 0.0), (True, 1 / policy.gemm_gain(rows))):
        plain, bilinear = (auto_model.Estimate(c, costs, gradient) for c in (cell, tensor))
        added = bilinear.frontier(sizes, 1) - plain.frontier(sizes, 1)
        assert added == pytest.approx(sum(sizes) * 1e5 * gains * 1e-11)
        assert bilinear.recursive(sizes, 1) == plain.recursive(sizes, 1)
    # weights four times L2's size: three quarters of them from L3
    big = auto_model.Estimate(replace(cell, weight_bytes=4 * policy.machine().l2_bytes),
                              costs, False)
    assert big.recursive(sizes, 1) == pytest.approx(
        (1 + 0.75 * (costs.l3_slowdown - 1)) * base.recursive(sizes, 1))
    shared = replace(costs, share=0.0)  # a second thread that gets no core
    assert auto_model.Estimate(cell, shared, False).recursive(sizes, 2) == \
        base.recursive(sizes, 1)
    assert auto_model.Estimate(cell, costs, False).recursive(sizes, 2) < \
        base.recursive(sizes, 1)
    # on a team, no faster than the tallest tree's nodes one after another
    node = 2e5 * 1e-11 * from_l2
    assert base.recursive([37], 64, heights=30) == pytest.approx(30 * node)
    # a recursive gradient's weights and their gradient share L2, unless
    # its outer products are logged (`gradient_gemm`)
    l2 = policy.machine().l2_bytes  # weights that fill L2: with their gradient, half out
    for logged, slower in ((0.0, 1 + 0.5 * (costs.l3_slowdown - 1)), (1e5, 1.0)):
        fits = replace(cell, gradient_gemm=logged)
        held = auto_model.Estimate(replace(fits, weight_bytes=l2), costs, True)
        small = auto_model.Estimate(fits, costs, True)
        assert held.recursive(sizes, 1) - small.recursive(sizes, 1) == pytest.approx(
            (slower - 1) * sum(sizes) * 8e5 * 1e-11 * from_l2)


def test_a_frontier_by_columns_starts_a_team_for_each_product_that_pays_one():
    """Split by columns, a height starts a team for each product whose
    multiply-adds at its rows reach a warm team's (`team_min_work`), two
    in a gradient (the product and its vecmat); the others stay whole on
    the calling thread: with none that pays, the frontier is one thread's."""
    costs = policy.Costs(1e-11, 1e-6, 50e-6, warm_team_s=2e-6)
    least = policy.team_min_work(2, costs, warm=True)
    sizes, heights = [40], 10.0  # 4 rows a height
    big, small = 4 * least, least // 8  # a row's multiply-adds: pays / does not
    cell = auto_model.CellCost(products=big + small, product_units=1.0, gradient_units=1.0,
                               gradient_gemm=0.0, weights=big + small, weight_bytes=4,
                               product_sizes=(big, small), fan_out=2)
    for gradient, teams in ((False, 1), (True, 2)):
        estimate = auto_model.Estimate(cell, costs, gradient)
        dearer = auto_model.Estimate(cell, replace(costs, warm_team_s=3e-6), gradient)
        assert dearer.frontier(sizes, 2, heights) - estimate.frontier(sizes, 2, heights) \
            == pytest.approx(heights * teams * 1e-6)
    alone = replace(cell, products=small, weights=small, product_sizes=(small,))
    estimate = auto_model.Estimate(alone, costs, True)
    assert estimate.frontier(sizes, 2, heights) == estimate.frontier(sizes, 1, heights)


@pytest.mark.parametrize("lanes", [16, 8])
def test_a_heights_weights_stream_at_l2s_rate_and_l3s_beyond_it(monkeypatch, lanes):
    """A height's weight streams in `unit_s` per weight vector: L2 gives 32
    bytes a cycle, half a 16-lane vector; a gradient's two passes with the
    part of a weight and its packed copy beyond L2 at L3's rate (3 here),
    once a height however large the weight (its copy packed once a call)."""
    l2 = 1 << 20
    monkeypatch.setattr(policy, "machine", lambda: policy.Machine(2, l2, lanes, 2e9))
    costs = policy.Costs(1e-11, 1e-6, 50e-6, l3_slowdown=3.0)
    from_l2 = {16: 2.0, 8: 1.0}[lanes]
    cell = auto_model.CellCost(products=1e5, product_units=2e5, gradient_units=8e5,
                               gradient_gemm=0.0, weights=1e5, weight_bytes=4,
                               product_sizes=(100000,), fan_out=2)
    # (weight bytes: inference's, training's); a copy beside the weight doubles its bytes
    expected = {4: (from_l2, 2 * from_l2),
                l2 // 2: (from_l2, 2 * from_l2),  # weight and copy fill L2
                l2: (from_l2, 2 * from_l2 * 2.0),  # the pair half out of L2
                2 * l2: (from_l2 * 2.0, 2 * from_l2 * 2.5)}  # three quarters out
    for weight_bytes, (infer, train) in expected.items():
        sized = replace(cell, weight_bytes=weight_bytes)
        assert auto_model.Estimate(sized, costs, False).height_streams() == infer
        assert auto_model.Estimate(sized, costs, True).height_streams() == train
    # split by columns across 4 cores: each core's L2 holds its quarter
    assert auto_model.Estimate(replace(cell, weight_bytes=8 * l2), costs,
                               True).height_streams(4) == 2 * from_l2 * 2.5
    assert auto_model.Estimate(replace(cell, weight_bytes=2 * l2), costs,
                               True).height_streams(4) == 2 * from_l2


def test_auto_heights_lie_between_a_complete_tree_and_a_caterpillar():
    for nodes in (3, 37, 255, 4095):
        heights = auto_model.estimated_heights(nodes, 2)
        assert math.log2(nodes + 1) <= heights <= (nodes + 1) / 2
    assert auto_model.estimated_heights(1, 2) == 1
    assert auto_model.estimated_heights(40, 1) == 40  # a list: a level a node


def test_auto_walks_the_heights_of_trees_it_can_read():
    """TreeLSTM's children are `left[i]`, `right[i]`: a batch's heights are
    its tallest tree's levels; arrays that make no tree give none."""
    params = tree_lstm.init_params(np.random.default_rng(0), vocab=100)
    traced = tree_lstm.trace_model(params)
    assert recir_auto.child_arrays(traced.module, 5) == ([0, 1], 4)
    complete = make_treebank(2, "balanced", num_leaves=32, seed=1)
    assert recir_auto.tree_levels([complete[0].left, complete[0].right], complete[0].root) == 6
    assert recir_auto.tree_levels([chain(201)[0], chain(201)[1]], chain(201)[4]) == 101
    assert recir_auto.tree_levels([np.array([1, -1]), np.array([0, -1])], 0) is None  # a cycle
    assert recir_auto.tree_levels([np.array([5]), np.array([-1])], 0) is None  # out of range
    assert recir_auto.child_arrays(nested_model().module, 1) is None  # f(f(i - 1) - 1)


def test_auto_picks_the_mode_the_model_predicts_faster():
    """`auto` takes the mode of fewer predicted seconds, by the batch's
    nodes (the frontier for one big tree as for many small ones); with the
    frontier's call cost moved past the difference the pick flips; either
    mode's results equal the references."""
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=64, vocab=100)
    params = {k: v / 8 if v.ndim == 2 else v for k, v in params.items()}  # not chaotic
    auto = recir.compile(tree_lstm.trace_model(params), batching="auto", threads=1)
    assert isinstance(auto, AutoFunction)
    trees = make_treebank(20, seed=6)
    batch = [tree_args(t) for t in trees]
    for inputs in ([chain(3)], [chain(201)], [chain(61)] * 3, batch):
        seconds = auto.auto.seconds(inputs, 1, 1)
        assert auto.choose(inputs) == min(seconds, key=seconds.__getitem__)
    costs = auto.auto.costs
    auto.auto.costs = replace(costs, frontier_call_s=0.0)
    seconds = auto.auto.seconds(batch, 1, 1)
    gap = seconds["recursive"] - seconds["frontier"]  # what a call may cost the frontier
    assert gap > 0
    for call_s, mode in ((gap - 1e-6, "frontier"), (gap + 1e-6, "recursive")):
        auto.auto.costs = replace(costs, frontier_call_s=call_s)
        assert auto.choose(batch) == mode
    for mode in ("frontier", "recursive"):
        forced(auto.auto, mode)
        assert auto.choose(batch) == mode
        outs = auto.batch(batch)
        for tree, (_, loss) in zip(trees, outs, strict=True):
            assert loss == pytest.approx(tree_lstm.reference(tree, tree.root, params)[1],
                                         rel=1e-5)
    tall = [chain(201)]  # the frontier's heights walked: 101, not estimated
    assert auto.auto.heights(tall) == 101
    seconds = auto.auto.seconds(tall, 1, 1)
    assert seconds["frontier"] == auto.auto.model().frontier([201], 1, 101)
    team = recir.compile(tree_lstm.trace_model(params), batching="auto", threads=2)
    seconds = team.auto.seconds(batch, 2 if team.recursive.team else 1, 2)
    assert team.choose(batch) == min(seconds, key=seconds.__getitem__)


def test_auto_compiles_the_recursive_code_when_a_batch_first_needs_it():
    """`auto` with a frontier form builds its recursive code at the first
    batch the model gives it, with the threads it predicted for: batches
    the frontier runs never compile it."""
    params = tree_lstm.init_params(np.random.default_rng(1), hidden=16, vocab=100)
    traced = tree_lstm.trace_model(params)
    batch = [tree_args(t) for t in make_treebank(10, seed=8)]
    for auto in (recir.compile(traced, batching="auto", threads=2),
                 recir.value_and_grad(traced, batching="auto", threads=2)):
        forced(auto.auto, "frontier")
        auto.batch(batch)
        assert auto.built is None
        forced(auto.auto, "recursive")
        auto.batch(batch)
        assert auto.built is not None
        built = auto.built if not auto.gradient else auto.built.native
        assert auto.threads == built.threads


def test_an_empty_auto_batch_compiles_nothing():
    """An empty batch has nothing to run: `auto` gives it to the frontier
    form, so no recursive code is compiled for it; its results are the
    recursive code's (no outputs, zero gradients)."""
    params = tree_lstm.init_params(np.random.default_rng(1), hidden=16, vocab=100)
    traced = tree_lstm.trace_model(params)
    auto = recir.compile(traced, batching="auto", threads=1)
    assert auto.batch([]) == [] and auto.built is None
    auto = recir.value_and_grad(traced, batching="auto", threads=1)
    outputs, grads = auto.batch([])
    assert auto.built is None and outputs == []
    assert all(not g.any() for g in grads.values())
    assert sorted(grads) == sorted(params)


def test_auto_training_picks_by_the_same_model():
    """`value_and_grad(batching="auto")`: the mode of fewer predicted
    seconds (the recursive code on the call's threads), gradients as the
    recursive code's either way."""
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=32, vocab=100)
    params = {k: v / 8 if v.ndim == 2 else v for k, v in params.items()}
    traced = tree_lstm.trace_model(params)
    auto = recir.value_and_grad(traced, batching="auto", threads=2)
    assert auto.auto.gradient and auto.auto.cell == auto_model.cell_cost(traced.module)
    trees = make_treebank(20, seed=6)
    batch = [tree_args(t) for t in trees]
    for threads in (1, 2):
        seconds = auto.auto.seconds(batch, threads, auto.recursive.native.threads)
        assert auto.choose(batch, threads) == min(seconds, key=seconds.__getitem__)
    want_out, want = recir.value_and_grad(traced).batch(batch)
    for mode, threads in (("frontier", 1), ("recursive", 2)):
        forced(auto.auto, mode)
        assert auto.choose(batch, threads) == mode
        outs, grads = auto.batch(batch, threads=threads)
        for (_, loss), (_, loss2) in zip(want_out, outs, strict=True):
            assert loss2 == pytest.approx(loss, rel=1e-5)
        for name, g in want.items():
            assert rel(grads[name], g) <= 1e-5, name  # relative to the array's scale
    with pytest.raises(RecirError, match="unknown batching"):
        recir.value_and_grad(traced, batching="sideways")


@pytest.mark.parametrize("gradients", [False, True], ids=["infer", "train"])
def test_a_batch_leaves_no_reference_cycles(gradients):
    """A batch's frames hold its arrays: in a cycle they would live until the
    cyclic collector runs, and each batch would fault in fresh heap pages."""
    import gc

    params = tree_lstm.init_params(np.random.default_rng(5), vocab=100)
    traced = tree_lstm.trace_model(params)
    fn = (recir.value_and_grad(traced, batching="frontier") if gradients
          else recir.compile(traced, batching="frontier"))
    inputs = [tree_args(t) for t in mixed_trees()]
    for _ in range(2):  # (a function's second call makes the height policy's kernel)
        fn.batch(inputs)
    gc.collect()
    was = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        fn.batch(inputs)
        gc.collect()
        cyclic = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(was)
        gc.garbage.clear()
    assert cyclic == []


def test_an_auto_call_with_a_timeout_runs_the_recursive_code():
    """`timeout=` was an unexpected keyword for `batching="auto"`."""
    params = tree_rnn.init_params(np.random.default_rng(0), vocab=100)
    traced = tree_rnn.trace_model(params)
    tree = make_treebank(1, seed=3)[0]
    auto = recir.compile(traced, batching="auto", threads=1)
    expected = tree_rnn.reference(tree, tree.root, params)[1]
    assert auto(*tree_args(tree), timeout=30.0)[1] == pytest.approx(expected, rel=1e-5)
    with pytest.raises(RecirError, match="timeout must be a positive, finite number"):
        auto(*tree_args(tree), timeout=0)
