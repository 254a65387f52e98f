"""Every model traced, closed by capture-outer-refs, and run by the interpreter
against its independent NumPy reference (100 SST dev trees when present)."""

from __future__ import annotations

import numpy as np
import pytest

from recir.context import make_context
from recir.dialects import invoke
from recir.interpreter import run_function
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from recir.parsing import parse_module
from recir.passes.capture_outer_refs import CaptureOuterRefsPass
from recir.data import load_sst, make_treebank, sst_path


def trees_and_vocab():
    path = sst_path("dev")
    if path is None:
        return make_treebank(100, seed=1), 100
    trees, vocab = load_sst(path)
    return trees[:100], len(vocab)


def max_relative_error(got, expected) -> float:
    """Largest deviation relative to the reference's magnitude (a float32 budget)."""
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-30))


def closed_module(traced):
    """The traced IR printed, re-parsed and closed: what later passes consume."""
    ctx = make_context()
    module = parse_module(ctx, str(traced))
    CaptureOuterRefsPass().apply(ctx, module)
    module.verify()
    assert not any(isinstance(op, invoke.SubgraphOp) for op in module.walk())
    return module


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm], ids=lambda m: m.__name__)
def test_tree_model_matches_numpy(model):
    trees, vocab = trees_and_vocab()
    params = model.init_params(np.random.default_rng(0), vocab=vocab)
    traced = model.trace_model(params)
    module = closed_module(traced)
    for tree in trees:
        args = [tree.left, tree.right, tree.word, tree.label, tree.root]
        h, loss = run_function(module, traced.entry, [*args, *params.values()])
        h_ref, loss_ref = model.reference(tree, tree.root, params)
        assert max_relative_error(h, h_ref) <= 1e-5
        assert loss == pytest.approx(loss_ref, rel=1e-5)


def test_top_down_tree_lstm_grows_the_reference_tree():
    sizes = set()
    for seed in range(8):
        params = td_tree_lstm.init_params(np.random.default_rng(seed))
        traced = td_tree_lstm.trace_model(params)
        module = closed_module(traced)
        x = np.random.default_rng(seed + 10).standard_normal(8).astype(np.float32)
        count, total = run_function(module, traced.entry, [x, 6, *params.values()])
        ref_count, ref_total = td_tree_lstm.reference(x, 6, params)
        assert count == ref_count
        assert total == pytest.approx(ref_total, rel=1e-5, abs=1e-5)
        sizes.add(count)
    assert max(sizes) > 1 and min(sizes) < max(sizes)  # shapes depend on the inputs
