"""Every node's class scores from one forward per tree (the score table of
`recir.models.tree_common`) against the per-root forwards they replace and
the NumPy reference, natively, batched and by the frontier scheduler."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import rntn, tree_lstm, tree_rnn
from recir.train import NodeScorer, evaluate
from recir.train.metrics import MIN_CAPACITY

MODELS = {"tree_lstm": tree_lstm, "tree_rnn": tree_rnn, "rntn": rntn}


def small_params(module, seed: int = 0) -> dict[str, np.ndarray]:
    params = module.init_params(np.random.default_rng(seed), hidden=8, vocab=40)
    return {k: (0.4 * v).astype(np.float32) for k, v in params.items()}


def inputs(t):
    return t.left, t.right, t.word, t.label, t.root


@pytest.mark.parametrize("name", sorted(MODELS))
def test_node_table_equals_per_root_forwards(name: str) -> None:
    module = MODELS[name]
    params = small_params(module)
    trees = make_treebank(4, vocab_size=40, seed=11, num_leaves=9)
    trees += make_treebank(1, vocab_size=40, seed=11, num_leaves=1)  # a lone leaf
    capacity = MIN_CAPACITY  # rows past a tree stay zero; the scorer's size (cached)
    scored = recir.compile(module.trace_model(params, node_scores=capacity))
    plain = recir.compile(module.trace_model(params))
    for t in trees:
        h, loss, table = scored(*inputs(t))
        table = np.asarray(table).reshape(capacity, 5)
        assert not table[t.num_nodes:].any()
        root_h, root_loss = plain(*inputs(t))
        np.testing.assert_allclose(h, root_h, rtol=1e-6)
        assert loss == pytest.approx(root_loss, rel=1e-6)
        for i in range(t.num_nodes):
            h_i = plain(t.left, t.right, t.word, t.label, i)[0]
            np.testing.assert_allclose(
                table[i], params["w_out"] @ h_i + params["b_out"], rtol=1e-5, atol=1e-6)
            reference_h = module.reference(t, i, params)[0]
            np.testing.assert_allclose(table[i], params["w_out"] @ reference_h
                                       + params["b_out"], rtol=1e-4, atol=1e-5)


def test_scorer_batches_retrace_and_frontier_agree() -> None:
    params = small_params(tree_lstm)
    model = tree_lstm.trace_model(params)
    trees = make_treebank(6, vocab_size=40, seed=12, num_leaves=12)
    trees += make_treebank(1, vocab_size=40, seed=13, num_leaves=40)  # 79 nodes: > 64
    plain = recir.compile(model)
    scorer = NodeScorer(model, threads=2)
    assert [len(t) for t in scorer(trees[:6])] == [t.num_nodes for t in trees[:6]]
    assert sorted(scorer.compiled) == [64]
    tables = scorer(trees)
    assert sorted(scorer.compiled) == [64, 128]  # traced again for the 79-node tree
    scorer(trees[:6])
    assert sorted(scorer.compiled) == [64, 128]
    for t, table in zip(trees, tables, strict=True):
        assert table.shape == (t.num_nodes, 5)
        want = [params["w_out"] @ plain(t.left, t.right, t.word, t.label, i)[0]
                + params["b_out"] for i in range(t.num_nodes)]
        np.testing.assert_allclose(table, want, rtol=1e-5, atol=1e-6)
    frontier = recir.compile(model.with_node_scores(128), batching="frontier")
    for t, out in zip(trees, frontier.batch([inputs(t) for t in trees]), strict=True):
        np.testing.assert_allclose(np.asarray(out[-1]).reshape(128, 5)[:t.num_nodes],
                                   tables[trees.index(t)], rtol=1e-5, atol=1e-6)


def test_one_pass_accuracy_equals_per_root_accuracy() -> None:
    params = small_params(tree_rnn, seed=3)
    model = tree_rnn.trace_model(params)
    trees = make_treebank(8, vocab_size=40, seed=14)

    class PerRoot:  # the per-root model: no score table, one forward per node
        def __init__(self, traced):
            self.module, self.entry = traced.module, traced.entry
            self.input_names, self.params = traced.input_names, traced.params

    one_pass = evaluate(NodeScorer(model), trees, all_nodes=True)
    per_root = evaluate(NodeScorer(PerRoot(model)), trees, all_nodes=True)
    assert one_pass == per_root
    assert one_pass["all_fine"] not in (0.0, 1.0)  # a real mix of hits and misses


class RefusesWord:
    """A per-root model (engine "interpret": `run` per node) that refuses
    word id 39 as compiled code refuses a word past its vocabulary."""

    def __init__(self):
        self.params = {"w_out": np.eye(5, 2, dtype=np.float32),
                       "b_out": np.zeros(5, np.float32)}

    def run(self, left, right, word, label, root):
        if (word == 39).any():
            raise RecirError("error: 'tmath.gather' op index out of range")
        return (np.ones(2, np.float32),)


def test_an_error_while_scoring_names_the_tree() -> None:
    """A bad dev tree's error named the op but not which tree it was."""
    from recir.train.metrics import SCORE_BATCH

    trees = make_treebank(SCORE_BATCH + 3, vocab_size=39, seed=4)
    bad = SCORE_BATCH + 1
    trees[bad].word[trees[bad].word >= 0] = 39
    scorer = NodeScorer(RefusesWord(), engine="interpret", roots_only=True)
    with pytest.raises(RecirError, match=rf"^error: 'tmath.gather' op index out of range "
                                         rf"\(tree {bad} of the {SCORE_BATCH + 3} scored\)$"):
        evaluate(scorer, trees)
    assert evaluate(scorer, trees[:bad])["root_fine"] >= 0


def test_scores_that_overflow_are_an_error_not_an_accuracy() -> None:
    """Finite parameters near float32's largest (a training run that
    diverged on its last step) gave inf and NaN scores, read as an accuracy
    of 0.000 and as labels with NaN probabilities."""
    params = small_params(tree_rnn, seed=3)
    trees = make_treebank(3, vocab_size=40, seed=14)
    assert np.isfinite(NodeScorer(tree_rnn.trace_model(params))(trees)[2]).all()
    params["w_out"] = np.full_like(params["w_out"], 3e38)
    scorer = NodeScorer(tree_rnn.trace_model(params))
    with pytest.raises(RecirError, match=r"^error: the model scores inf or NaN \(tree 0 of the "
                                         r"3 scored\): its parameters overflow"):
        evaluate(scorer, trees)


def test_an_unknown_engine_is_refused() -> None:
    """'Native' (any name but "native") ran the reference interpreter, silently."""
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=5, classes=5)
    with pytest.raises(ValueError, match=r"^unknown engine 'Native' \(native, interpret\)$"):
        NodeScorer(tree_rnn.trace_model(params), engine="Native")
