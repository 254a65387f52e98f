"""A height loop's logged outer products (`recir/passes/row_logs.py`): a
`_bwd`'s weight gradients dY^T X added a block of rows at a time. TreeRNN
over complete trees of 8 leaves, as many as make the leaves' height at
least a block (added at once) and the heights above it each less (logged)
but more than a block together (a full log added mid-loop, the rest when
the loop ends); on one thread and on a team of two (each thread's log into
its own copy, all added before the copies are summed), against NumPy, on
two calls in a row."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_products import reference_grads
from test_frontier_threads import HIDDEN, free_teams, inputs

import recir
from recir.backend.engine import openmp
from recir.backend.native_loops import HeightLoop
from recir.data.synthetic import make_treebank
from recir.models import tree_rnn
from recir.passes.row_logs import log_rows


@pytest.mark.parametrize("threads", [1, 2])
def test_logged_outer_products_add_every_heights_rows(threads, tmp_path, monkeypatch):
    if threads > 1 and openmp() is None:
        pytest.skip("no OpenMP runtime")
    block = log_rows()
    count = block // 5  # leaves 8n >= block > 4n (height 1); 7n above the leaves > block
    trees = make_treebank(count, "balanced", num_leaves=8, seed=11, vocab_size=100)
    assert 8 * count >= block > 4 * count and 7 * count > block
    params = tree_rnn.init_params(np.random.default_rng(12), hidden=HIDDEN, vocab=100)
    want = {k: np.ones_like(v) for k, v in params.items()}
    for tree in trees:
        reference_grads(tree, params, want)
    grad = recir.value_and_grad(tree_rnn.trace_model(params), batching="frontier",
                                threads=threads, cache_dir=free_teams(tmp_path))
    teams: list[int] = []
    run = HeightLoop.__call__
    monkeypatch.setattr(HeightLoop, "__call__", lambda self, *args: teams.append(
        args[4]) or run(self, *args))
    for _ in range(2):
        got = {k: np.ones_like(v) for k, v in params.items()}
        grad.batch(inputs(trees), got)
        for k, g in want.items():
            np.testing.assert_allclose(got[k], g, rtol=1e-4, atol=1e-4, err_msg=k)
    assert teams == [threads] * 4  # the `_fwd`'s and `_bwd`'s heights, twice
