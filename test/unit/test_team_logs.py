"""A team's weight gradients added from every thread's logs
(`recir/passes/team_logs.py`). TreeRNN on teams of two and three threads
(the cost model's free start makes them pay), each height's rows split in
blocks or by the trees' groups, against NumPy, call after call: a batch so
small that the team adds its weights' rows from the logs, one whose rows
each thread adds into its copy, and one whose leaves give each thread a
block of rows or more (added at once). With copies poisoned with NaN, a
gradient the team adds from the logs stays right (its copies are never
summed) and one added through the copies does not. The facts that name the
inputs only outer products add into, and their record in a summary."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_products import reference_grads
from test_frontier_threads import HIDDEN, free_teams, inputs
from test_row_logs import gradients_match_numpy

import recir
from recir.backend import native_schedule
from recir.backend.engine import openmp
from recir.backend.frontier_summary import RowFacts, row_facts
from recir.context import make_context
from recir.data.synthetic import make_treebank
from recir.models import tree_rnn
from recir.parsing import parse_module
from recir.passes.row_logs import log_rows

pytestmark = pytest.mark.skipif(openmp() is None, reason="no OpenMP runtime")


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("by_groups", [False, True], ids=["blocks", "groups"])
@pytest.mark.parametrize("trees", [2, 6, 40], ids=["team", "copies", "at-once"])
def test_a_teams_weight_gradients_add_every_threads_logged_rows(threads, by_groups, trees,
                                                              tmp_path, monkeypatch):
    if not by_groups:
        monkeypatch.setattr(native_schedule, "BY_GROUPS", False)
    batch = make_treebank(trees, seed=5, vocab_size=100)
    leaves = sum((t.left < 0).sum() for t in batch)
    assert (leaves / threads >= log_rows()) == (trees == 40)  # a thread's rows at the leaves
    teams = gradients_match_numpy(batch, 6, threads, 3, tmp_path, monkeypatch)
    name, team, grouped = teams[-1]
    assert (name, team) == ("node__post_bwd", threads)
    assert grouped == by_groups or trees < threads  # groups of no fewer trees than threads


def test_the_team_adds_few_rows_from_the_logs_and_many_through_the_copies(tmp_path):
    """At hidden 64 and three trees, W's rows (its internal nodes) are few
    beside its size: the team adds them from the logs, and NaN in its
    copies stays there. The output layer's (every node's, into 5 x 64) are
    many: each thread adds its own into its copy, and the NaN comes in with
    the copies' sum, which zeroes them for the next call."""
    params = tree_rnn.init_params(np.random.default_rng(6), hidden=64, vocab=100)
    batch = make_treebank(3, seed=5, vocab_size=100)
    want = {k: np.zeros_like(v) for k, v in params.items()}
    for tree in batch:
        reference_grads(tree, params, want)
    grad = recir.value_and_grad(tree_rnn.trace_model(params), batching="frontier",
                                threads=2, cache_dir=free_teams(tmp_path))
    grad.batch(inputs(batch))
    loop = grad.native.loops["node__post_bwd"]
    copies, _ = loop.copies[2]
    poisoned = {params[name].nbytes: name for name in ("w", "w_out")}
    for copy, k in zip(copies, loop.copied, strict=True):
        if loop.inputs[k].row_bytes in poisoned:
            copy.fill(np.nan)
    _, got = grad.batch(inputs(batch))
    atol = {k: 2e-5 * np.abs(g).max() for k, g in want.items()}  # float32 sums of 64 terms
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-4, atol=atol["w"])
    assert np.isnan(got["w_out"]).all()
    _, again = grad.batch(inputs(batch))
    for k, g in want.items():
        np.testing.assert_allclose(again[k], g, rtol=1e-4, atol=atol[k], err_msg=k)


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


STATIC_OUTER = """
func.func @f(%acc: tensor<2x3xf32>, %dy: tensor<?x2xf32>, %x: tensor<?x3xf32>,
             %acc2: tensor<2x3xf32>, %v: tensor<2xf32>, %w: tensor<3xf32>) {
  adjoint.accumulate_outer %acc, %dy, %x : tensor<2x3xf32>, tensor<?x2xf32>, tensor<?x3xf32>
  adjoint.accumulate_outer %acc2, %v, %w : tensor<2x3xf32>, tensor<2xf32>, tensor<3xf32>
  func.return
}
"""


def test_an_outer_product_of_static_vectors_is_not_one_the_logs_hold():
    """Only an outer product of rows goes through a log (`row_logs`); one of
    static vectors runs the static kernel into its target at once, whose
    copies the team must then sum."""
    function = next(iter(parse_module(make_context(), STATIC_OUTER).ops))
    assert row_facts(function).outer_only == (0,)
