"""invoke-to-frontier: the interpreter runs the batched IR (frontier.schedule's
reference driver) on a batch of trees of different shapes, and every tree's
outputs equal the interpreter running the recursive function on that tree
alone, and the model's NumPy reference."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from recir.context import make_context
from recir.data import make_treebank
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from recir.parsing import parse_module
from recir.pipeline import run_passes

TREE_MODELS = [tree_rnn, rntn, tree_lstm]


def transformed(traced, inputs: int):
    module = traced.module.clone()
    run_passes(module, f"capture-outer-refs,invoke-to-frontier{{inputs={inputs}}}")
    module.verify()
    return module


def ragged(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The trees' arrays one after another, and where each starts (plus the end)."""
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int32)
    return np.concatenate(arrays).astype(np.int32), offsets


def trees() -> list[Tree]:
    leaf = Tree(left=[-1], right=[-1], word=[7], label=[3])
    return [leaf, *make_treebank(2, "linear", num_leaves=5, seed=2),
            *make_treebank(3, seed=3), *make_treebank(1, "balanced", num_leaves=8, seed=4), leaf]


def tree_batch_args(batch: list[Tree], params: dict[str, np.ndarray]) -> list:
    args: list = []
    for field in ("left", "right", "word", "label"):
        args += ragged([np.asarray(getattr(t, field)) for t in batch])
    args.append(np.array([t.root for t in batch], np.int32))
    return args + list(params.values())


@pytest.mark.parametrize("model", TREE_MODELS, ids=lambda m: m.__name__.split(".")[-1])
def test_tree_models_batched_ir_matches_recursive_interpreter(model):
    params = model.init_params(np.random.default_rng(0), hidden=4, vocab=100)
    traced = model.trace_model(params)
    module = transformed(traced, 5)
    batch = trees()
    entry = traced.entry
    hs, losses = run_function(module, f"{entry}__frontier", tree_batch_args(batch, params))
    assert hs.shape == (len(batch), 4)
    assert losses.shape == (len(batch),)
    for k, tree in enumerate(batch):
        tree_args = [tree.left, tree.right, tree.word, tree.label, tree.root]
        h, loss = run_function(module, entry, [*tree_args, *params.values()])
        np.testing.assert_allclose(hs[k], h, rtol=1e-5, atol=1e-6)
        assert losses[k] == pytest.approx(loss, rel=1e-5)
        h_ref, loss_ref = model.reference(tree, tree.root, params)
        np.testing.assert_allclose(hs[k], h_ref, rtol=1e-4, atol=1e-5)
        assert losses[k] == pytest.approx(loss_ref, rel=1e-4)


def test_node_score_tables_sum_per_tree():
    """TreeRNN with every node's logits (a third, 100-wide result that a
    uniform mask gathers by node index): each tree's table as alone."""
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=100)
    traced = tree_rnn.trace_model(params, node_scores=20)
    module = transformed(traced, 5)
    batch = [t for t in trees() if len(t.left) <= 20]
    outs = run_function(module, "tree_rnn__frontier", tree_batch_args(batch, traced.params))
    for k, tree in enumerate(batch):
        alone = run_function(module, "tree_rnn", [tree.left, tree.right, tree.word,
                                                  tree.label, tree.root, *traced.params.values()])
        for batched, expected in zip(outs, alone, strict=True):
            np.testing.assert_allclose(batched[k], expected, rtol=1e-5, atol=1e-6)

def test_top_down_tree_lstm_grows_each_tree_as_the_recursion_does():
    params = td_tree_lstm.init_params(np.random.default_rng(3), hidden=4, inputs=4)
    traced = td_tree_lstm.trace_model(params)
    module = transformed(traced, 2)
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((9, 4)).astype(np.float32)
    depths = np.array([0, 1, 3, 6, 6, 5, 2, 6, 4], np.int32)
    counts, totals = run_function(module, "td_tree_lstm__frontier",
                                  [xs, depths, *params.values()])
    for k in range(len(xs)):
        count, total = run_function(module, "td_tree_lstm", [xs[k], int(depths[k]),
                                                              *params.values()])
        n_ref, t_ref = td_tree_lstm.reference(xs[k], int(depths[k]), params)
        assert counts[k] == count == n_ref
        assert totals[k] == pytest.approx(total, rel=1e-5, abs=1e-5)
        assert totals[k] == pytest.approx(t_ref, rel=1e-4, abs=1e-4)
    assert len(set(counts.tolist())) > 2  # trees of different shapes grew side by side
    none = run_function(module, "td_tree_lstm__frontier", [xs[:0], depths[:0], *params.values()])
    assert [r.shape for r in none] == [(0,), (0,)]


def test_a_child_index_out_of_its_tree_is_a_located_error():
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=100)
    traced = tree_rnn.trace_model(params)
    module = transformed(traced, 5)
    bad = Tree(left=[-1, -1, 0], right=[-1, -1, 1], word=[0, 1, 2], label=[0, 1, 2])
    args = tree_batch_args([trees()[0], bad], params)
    args[2][-1] = 9  # `right` of the second tree's root: node 9 of a 3-node tree
    with pytest.raises(RecirError, match=r"tree_common.py:\d+:\d+: error: 'frontier.extract_"
                       r"ragged' op index 9 out of range for length 3 \(row 1, tree 1\)"):
        run_function(module, "tree_rnn__frontier", args)


def test_a_value_stored_from_inside_a_branch_reaches_the_bottom_up_part():
    """The lit test's TD shape reads %h2, made inside the growing branch while
    expanding: stored per invocation, it must arrive at the right rows."""
    path = Path(__file__).parents[1] / "passes" / "invoke-to-frontier-top-down.mlir"
    module = parse_module(make_context(), path.read_text())
    run_passes(module, "capture-outer-refs,invoke-to-frontier")
    rng = np.random.default_rng(7)
    params = [rng.standard_normal(s).astype(np.float32) for s in [(2, 2), (2,), (6, 2), (6, 2)]]
    params[1] = np.abs(params[1])
    xs = rng.standard_normal((12, 2)).astype(np.float32)
    depths = rng.integers(0, 5, 12).astype(np.int32)
    counts, totals = run_function(module, "td__frontier", [xs, depths, *params])
    for k in range(len(xs)):
        count, total = run_function(module, "td", [xs[k], int(depths[k]), *params])
        assert counts[k] == count
        assert totals[k] == pytest.approx(total, rel=1e-5, abs=1e-6)
    assert counts.max() > 3


UNBATCHABLE = [
    ("""\
func.func @forever(%n: i32) -> i32 {
  invoke.subgraph @down(%k: i32) -> i32 {
    %one = arith.constant 1 : i32
    %k1 = arith.subi %k, %one : i32
    %r = invoke.invoke @down(%k1) : (i32) -> i32
    invoke.return %r : i32
  }
  %r = invoke.invoke @down(%n) : (i32) -> i32
  func.return %r : i32
}
""", "'invoke.invoke' op runs on every invocation, outside any branch: the recursion never ends"),
    ("""\
func.func @moving_matrix(%n: i32, %m: tensor<2x2xf32>, %x: tensor<2xf32>) -> tensor<2xf32> {
  invoke.subgraph @down(%k: i32, %w: tensor<2x2xf32>) -> tensor<2xf32> {
    %zero = arith.constant 0 : i32
    %done = arith.cmpi sle, %k, %zero : i32
    %r = scf.if %done -> (tensor<2xf32>) {
      %y = tmath.matvec %w, %x : tensor<2x2xf32>, tensor<2xf32> -> tensor<2xf32>
      scf.yield %y : tensor<2xf32>
    } else {
      %one = arith.constant 1 : i32
      %k1 = arith.subi %k, %one : i32
      %w2 = tmath.tanh %w : tensor<2x2xf32>
      %a = invoke.invoke @down(%k1, %w2) : (i32, tensor<2x2xf32>) -> tensor<2xf32>
      scf.yield %a : tensor<2xf32>
    }
    invoke.return %r : tensor<2xf32>
  }
  %r = invoke.invoke @down(%n, %m) : (i32, tensor<2x2xf32>) -> tensor<2xf32>
  func.return %r : tensor<2xf32>
}
""", "'tmath.matvec' op has no row form for a per-invocation matrix"),
    ("""\
func.func @select(%n: i32) -> i32 {
  invoke.subgraph @down(%k: i32) -> i32 {
    %zero = arith.constant 0 : i32
    %done = arith.cmpi sle, %k, %zero : i32
    %r = scf.if %done -> (i32) {
      scf.yield %zero : i32
    } else {
      %one = arith.constant 1 : i32
      %k1 = arith.subi %k, %one : i32
      %a = invoke.invoke @down(%k1) : (i32) -> i32
      %big = arith.cmpi sgt, %a, %one : i32
      %b = arith.select %big, %a, %one : i32
      scf.yield %b : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @down(%n) : (i32) -> i32
  func.return %r : i32
}
""", "'arith.select' op has no row form: frontier batching cannot run it on many invocations at once"),
    ("""\
func.func @swap(%a: tensor<?xi32>, %b: tensor<?xi32>, %n: i32) -> i32 {
  invoke.subgraph @down(%k: i32, %x: tensor<?xi32>, %y: tensor<?xi32>) -> i32 {
    %zero = arith.constant 0 : i32
    %done = arith.cmpi sle, %k, %zero : i32
    %r = scf.if %done -> (i32) {
      scf.yield %zero : i32
    } else {
      %one = arith.constant 1 : i32
      %k1 = arith.subi %k, %one : i32
      %v = invoke.invoke @down(%k1, %y, %x) : (i32, tensor<?xi32>, tensor<?xi32>) -> i32
      scf.yield %v : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @down(%n, %a, %b) : (i32, tensor<?xi32>, tensor<?xi32>) -> i32
  func.return %r : i32
}
""", "argument 1 (tensor<?xi32>): an array of dynamic shape must be a vector passed along "
     "unchanged"),
]


@pytest.mark.parametrize(("text", "message"), UNBATCHABLE,
                         ids=["forever", "moving-matrix", "select", "moving-array"])
def test_what_frontiers_cannot_run_is_a_located_error(text, message):
    module = parse_module(make_context(), text)
    with pytest.raises(RecirError, match=re.escape(message)):
        run_passes(module, "capture-outer-refs,invoke-to-frontier")
