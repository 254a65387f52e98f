"""Property: a frontier gradient on a team equals the recursive one.

TreeRNN and TreeLSTM at hidden sizes that are no multiple of a vector, on
teams of two and three threads whose start and barrier cost nothing (every
height splits, by blocks or by groups as the batch has them), over random
batches of random, balanced and linear trees (of up to 12 levels: float32's
error grows with each, differently in the two lowerings): every output and every
parameter gradient, added into buffers that hold ones, against the
recursive function's on one thread (another lowering, no team, no height
loop). The batch sizes and shapes move rows between a team's logs, its
threads' copies and products added at once (`team_logs`). `make fuzz` runs
more examples."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_frontier_threads import free_teams, inputs

import recir
from recir.backend.engine import openmp
from recir.data.synthetic import make_treebank
from recir.models import tree_lstm, tree_rnn

pytestmark = pytest.mark.skipif(openmp() is None, reason="no OpenMP runtime")
MODELS = {"tree_rnn": tree_rnn, "tree_lstm": tree_lstm}


@functools.cache
def functions(model: str, hidden: int, threads: int, cache: str):
    """The parameters, and the frontier gradient on `threads` and the
    recursive one on one thread, compiled once per run."""
    params = MODELS[model].init_params(np.random.default_rng(hidden), hidden=hidden, vocab=50)
    traced = MODELS[model].trace_model(params)
    return (params, recir.value_and_grad(traced, batching="frontier", threads=threads,
                                         cache_dir=cache),
            recir.value_and_grad(traced, cache_dir=cache))


@given(model=st.sampled_from(sorted(MODELS)), hidden=st.sampled_from([7, 37]),
       threads=st.sampled_from([2, 3]), count=st.integers(1, 30),
       shape=st.sampled_from(["moderate", "balanced", "linear"]),
       leaves=st.one_of(st.none(), st.integers(1, 12)), seed=st.integers(0, 2**16))
def test_a_teams_frontier_gradient_matches_the_recursive_one(tmp_path_factory, model, hidden,
                                                              threads, count, shape, leaves,
                                                              seed):
    folder = tmp_path_factory.getbasetemp() / "free-teams"  # one per run: compiled once
    folder.mkdir(exist_ok=True)
    cache = free_teams(folder)
    params, frontier, recursive = functions(model, hidden, threads, cache)
    if shape == "linear":  # 12 levels at most: float32's error grows with each
        leaves = min(leaves or 12, 12)
    trees = inputs(make_treebank(count, shape, num_leaves=leaves, vocab_size=50, seed=seed))
    outs, got = frontier.batch(trees, {k: np.ones_like(v) for k, v in params.items()})
    want_outs, want = recursive.batch(trees, {k: np.ones_like(v) for k, v in params.items()})
    # float32 rounding, which each level compounds (the two lowerings'
    # kernels round differently); a row lost or added twice moves a value or
    # a gradient by a share of it
    for (h, loss), (h1, loss1) in zip(outs, want_outs, strict=True):
        np.testing.assert_allclose(h, h1, rtol=1e-3, atol=1e-3)
        assert loss == pytest.approx(loss1, rel=1e-3, abs=1e-3)
    for k, g in want.items():
        np.testing.assert_allclose(got[k], g, rtol=1e-3, atol=5e-4 * max(1, np.abs(g).max()),
                                   err_msg=k)
