"""A team's weight gradients added from every thread's logs
(`recir/passes/team_logs.py`). TreeRNN on teams of two and three threads
(the cost model's free start makes them pay), each height's rows split in
blocks or by the trees' groups, against NumPy: a batch whose products are
all thin on every thread (each thread's rows kept, the team adding them into
the caller's buffer a block of its rows per thread, and the copies of an
input that only outer products add into never summed: copies poisoned with
NaN leave the gradients finite and right), and one whose leaves give each
thread a block of rows or more (added into its copy at once, which the team
then sums). The facts that name those inputs, and their record in a
summary."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_products import reference_grads
from test_frontier_threads import HIDDEN, free_teams, inputs, recorded_teams

import recir
from recir.backend import native_schedule
from recir.backend.engine import openmp
from recir.backend.frontier_summary import RowFacts
from recir.data.synthetic import make_treebank
from recir.models import tree_rnn
from recir.passes.row_logs import log_rows

pytestmark = pytest.mark.skipif(openmp() is None, reason="no OpenMP runtime")


def poison_outer_only_copies(loop, threads: int) -> int:
    """NaN in the team's copies of each input only outer products add into;
    how many such inputs there are."""
    copies, _ = loop.copies[threads]
    poisoned = 0
    for copy, k in zip(copies, loop.copied, strict=True):
        if loop.inputs[k].outer_only:
            copy.fill(np.nan)
            poisoned += 1
    return poisoned


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("by_groups", [False, True], ids=["blocks", "groups"])
@pytest.mark.parametrize("trees", [6, 40], ids=["thin", "thick"])
def test_a_teams_weight_gradients_add_every_threads_logged_rows(threads, by_groups, trees,
                                                              tmp_path, monkeypatch):
    if not by_groups:
        monkeypatch.setattr(native_schedule, "BY_GROUPS", False)
    batch = make_treebank(trees, seed=5, vocab_size=100)
    leaves = sum((t.left < 0).sum() for t in batch)
    thin = trees == 6
    assert (leaves / threads < log_rows()) == thin  # a thread's rows at the leaves
    params = tree_rnn.init_params(np.random.default_rng(6), hidden=HIDDEN, vocab=100)
    want = {k: np.ones_like(v) for k, v in params.items()}
    for tree in batch:
        reference_grads(tree, params, want)
    grad = recir.value_and_grad(tree_rnn.trace_model(params), batching="frontier",
                                threads=threads, cache_dir=free_teams(tmp_path))
    teams = recorded_teams(monkeypatch)
    loop = grad.native.loops
    for call in range(3):
        got = {k: np.ones_like(v) for k, v in params.items()}
        grad.batch(inputs(batch), got)
        for k, g in want.items():
            np.testing.assert_allclose(got[k], g, rtol=1e-4, atol=1e-4, err_msg=f"{k}, {call}")
        if thin and call == 0:  # the weights' and the output layer's gradients
            assert poison_outer_only_copies(loop["node__post_bwd"], threads) == 2
    assert teams[-1] == ("node__post_bwd", threads, by_groups)


def test_the_facts_name_the_inputs_only_outer_products_add_into(tmp_path):
    """TreeRNN's `_bwd` adds its weights' and its output layer's gradients
    by outer products alone, its biases' by sums of rows, its embedding's
    by rows (shared by the team, not copied)."""
    params = tree_rnn.init_params(np.random.default_rng(6), hidden=HIDDEN, vocab=100)
    grad = recir.value_and_grad(tree_rnn.trace_model(params), batching="frontier",
                                threads=2, cache_dir=free_teams(tmp_path))
    grad.batch(inputs(make_treebank(2, seed=5, vocab_size=100)))
    loop = grad.native.loops["node__post_bwd"]
    sizes = {loop.inputs[k].row_bytes: loop.inputs[k].outer_only for k in loop.copied}
    assert sizes == {params["w"].nbytes: True, params["w_out"].nbytes: True,
                     params["b"].nbytes: False, params["b_out"].nbytes: False}


def test_row_facts_are_recorded_and_read_back_whole():
    facts = RowFacts(True, 12, (3,), (4, 5))
    assert RowFacts.from_json(facts.as_json()) == facts
    assert RowFacts.from_json([True, 12, [3]]) is None  # a record without outer_only
    assert RowFacts.from_json([True, 12, [3], [-1]]) is None
