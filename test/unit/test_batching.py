"""`batching="frontier"` and `"auto"` against the recursive native path and
the NumPy references: outputs and gradients of all four models, on random,
single-leaf and linear trees and on batches mixing them; `auto`'s choice;
unsupported shapes are located errors."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir.auto import AUTO_TEAM_WORK, AUTO_WORK, AutoFunction
from recir.frontier_gradients import FrontierGradFunction
from recir.data import make_treebank
from recir.data.trees import Tree
from recir.diagnostics import RecirError
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


def chain(nodes: int) -> tuple:
    """A linear tree's inputs: `nodes` invocations for `auto` to count."""
    tree = make_treebank(1, "linear", num_leaves=(nodes + 1) // 2, seed=1)[0]
    assert tree.num_nodes == nodes
    return tree_args(tree)


def around(limit: int, cell: int) -> tuple[int, int]:
    """The chains (odd node counts) just below and just at `limit` multiply-adds."""
    below = (limit - 1) // cell
    below -= 1 - below % 2
    assert below * cell < limit <= (below + 2) * cell
    return below, below + 2


def test_auto_picks_frontier_by_the_batchs_invocations_and_cell():
    """`auto`: the scheduler where invocations (tree nodes) x the cell's largest
    product reach AUTO_WORK (one thread) or AUTO_TEAM_WORK (a team)."""
    narrow = tree_lstm.init_params(np.random.default_rng(0), vocab=100)
    auto = recir.compile(tree_lstm.trace_model(narrow), batching="auto", threads=1)
    assert auto.choose([chain(201)] * 25) == "recursive"  # 40 x 16 multiply-adds a node
    h150 = tree_lstm.init_params(np.random.default_rng(0), hidden=150, vocab=100)
    auto = recir.compile(tree_lstm.trace_model(h150), batching="auto", threads=1)
    assert auto.work.cell == 750 * 300
    below, at = around(AUTO_WORK, 750 * 300)
    assert auto.choose([chain(below)]) == "recursive"
    assert auto.choose([chain(at)]) == "frontier"
    assert auto.choose([chain(61)] * 3) == "frontier"  # nodes, not trees, count
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=256, vocab=100)
    params = {k: v / 8 if v.ndim == 2 else v for k, v in params.items()}  # not chaotic
    auto = recir.compile(tree_lstm.trace_model(params), batching="auto", threads=1)
    trees = make_treebank(20, seed=6)
    below, at = around(AUTO_WORK, auto.work.cell)
    assert auto.choose([chain(below)]) == "recursive" and auto.choose([chain(at)]) == "frontier"
    assert auto.choose([tree_args(t) for t in trees]) == "frontier"
    outs = auto.batch([tree_args(t) for t in trees])
    for tree, (_, loss) in zip(trees, outs, strict=True):
        assert loss == pytest.approx(tree_lstm.reference(tree, tree.root, params)[1], rel=1e-5)
    _, loss1 = auto(*chain(201))  # one call, by the scheduler
    assert loss1 == pytest.approx(recir.compile(tree_lstm.trace_model(params), threads=1)(
        *chain(201))[1], rel=1e-5)
    team = recir.compile(tree_lstm.trace_model(params), batching="auto", threads=2)
    below, at = around(AUTO_TEAM_WORK, auto.work.cell)
    assert team.choose([chain(below)]) == "recursive" and team.choose([chain(at)]) == "frontier"
    for (_, loss), (_, loss2) in zip(outs, team.batch([tree_args(t) for t in trees]),
                                     strict=True):
        assert loss2 == pytest.approx(loss, rel=1e-5)
    d25 = rntn.init_params(np.random.default_rng(0), hidden=25, vocab=100)
    auto = recir.compile(rntn.trace_model(d25), batching="auto", threads=2)
    assert auto.work.cell == 5 * 25 * 50 * 50  # the bilinear tensor, weighted
    below, at = around(AUTO_TEAM_WORK, auto.work.cell)
    assert auto.choose([chain(below)]) == "recursive" and auto.choose([chain(at)]) == "frontier"


def test_auto_training_picks_by_the_same_rule():
    """`value_and_grad(batching="auto")`: the scheduler for big cells and big
    batches (with a team only from more work), gradients as the recursive
    code's either way."""
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=160, vocab=100)
    params = {k: v / 8 if v.ndim == 2 else v for k, v in params.items()}
    traced = tree_lstm.trace_model(params)
    auto = recir.value_and_grad(traced, batching="auto", threads=2)
    assert auto.work.cell == 800 * 320
    below, at = around(AUTO_WORK, auto.work.cell)
    assert auto.choose([chain(below)], 1) == "recursive"
    assert auto.choose([chain(at)], 1) == "frontier"
    below, at = around(AUTO_TEAM_WORK, auto.work.cell)
    assert auto.choose([chain(below)], 2) == "recursive"
    assert auto.choose([chain(at)], 2) == "frontier"
    trees = make_treebank(20, seed=6)
    batch = [tree_args(t) for t in trees]
    want_out, want = recir.value_and_grad(traced).batch(batch)
    for threads in (1, 2):
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
