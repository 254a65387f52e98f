"""value_and_grad(batching="frontier-ir"): @f__post_bwd (from the one rules
table) compiled natively and run by the schedule backwards. The outputs and
the parameter gradients of a mixed batch equal the recursive native path's,
tree by tree, summed."""

from __future__ import annotations

import numpy as np
import pytest
from test_invoke_to_frontier import trees

import recir
from recir.diagnostics import RecirError
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm],
                         ids=lambda m: m.__name__.split(".")[-1])
def test_batched_gradients_equal_the_recursive_ones_summed(model):
    params = model.init_params(np.random.default_rng(1), hidden=4, vocab=100)
    traced = model.trace_model(params)
    batched = recir.value_and_grad(traced, batching="frontier-ir")
    recursive = recir.value_and_grad(traced)
    batch = trees()  # single leaves, linear, random and balanced trees
    inputs = [(t.left, t.right, t.word, t.label, t.root) for t in batch]
    into = {k: np.ones_like(v) for k, v in params.items()}  # added into
    outs, grads = batched.batch(inputs, into)
    assert grads is into
    expected = {k: np.ones_like(v) for k, v in params.items()}
    for item, (h, loss) in zip(inputs, outs, strict=True):
        (h_ref, loss_ref), g = recursive(*item)
        np.testing.assert_allclose(h, h_ref, rtol=1e-4, atol=1e-5)
        assert loss == pytest.approx(loss_ref, rel=1e-4)
        for k in expected:
            expected[k] += g[k]
    for k, g in expected.items():
        np.testing.assert_allclose(grads[k], g, rtol=1e-4, atol=1e-5, err_msg=k)


def test_a_schedule_behind_other_ops_is_a_clear_error():
    params = td_tree_lstm.init_params(np.random.default_rng(0), hidden=4, inputs=4)
    with pytest.raises(RecirError, match="computes before its schedule: its gradient is "
                       "not compiled natively yet"):
        recir.value_and_grad(td_tree_lstm.trace_model(params), batching="frontier-ir")
