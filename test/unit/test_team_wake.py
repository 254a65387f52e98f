"""`team_wake.waking`: a batch wakes a sleeping team while Python prepares it."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir.backend import team_wake
from recir.backend.engine import openmp
from recir.data import make_tree
from recir.diagnostics import RecirError
from recir.models import tree_rnn

pytestmark = pytest.mark.skipif(openmp() is None, reason="no OpenMP runtime")


def in_parallel() -> bool:
    return bool(openmp().omp_in_parallel())  # type: ignore[union-attr]


def test_a_region_opens_only_while_the_team_may_sleep(monkeypatch) -> None:
    monkeypatch.setattr(team_wake, "_ended", [-float("inf")])  # never a team: asleep
    with team_wake.waking(2):
        assert in_parallel()
    assert not in_parallel()
    with team_wake.waking(2):  # the region just closed: awake
        assert not in_parallel()
    monkeypatch.setattr(team_wake, "_ended", [-float("inf")])
    with team_wake.waking(1):  # no team to wake
        assert not in_parallel()


def test_a_batch_that_fails_while_waking_leaves_no_region_open(monkeypatch) -> None:
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=8, vocab=50)
    model = tree_rnn.trace_model(params)
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=2)
    monkeypatch.setattr(parallel, "threads_for", lambda sizes: 2)  # small trees, a team
    trees = [make_tree("balanced", 16, np.random.default_rng(s), 50) for s in range(3)]
    batch = [(t.left, t.right, t.word, t.label, t.root) for t in trees]
    monkeypatch.setattr(team_wake, "_ended", [-float("inf")])
    with pytest.raises(RecirError, match="takes 5 inputs, got 4"):
        parallel.batch([*batch, batch[0][:4]])
    assert not in_parallel()
    monkeypatch.setattr(team_wake, "_ended", [-float("inf")])
    for (h1, l1), (h, loss) in zip([serial(*b) for b in batch], parallel.batch(batch),
                                   strict=True):
        np.testing.assert_array_equal(h, h1)
        assert loss == l1
