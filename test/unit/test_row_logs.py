"""A height loop's logged outer products (`recir/passes/row_logs.py`): a
`_bwd`'s weight gradients dY^T X added a block of rows at a time. TreeRNN
over complete trees of 8 leaves, on one thread and on a team of two (whose
threads keep their logs whole, for the team to add: `test_team_logs.py`),
against NumPy, two calls in a row: a batch whose wide heights give each
thread a whole block of rows (added at once), and one whose heights give
each thread less (logged) but more than a block together (on one thread a
full log added mid-loop, the rest when the loop ends). A wide height runs a block of
rows per thread at a time (`native_schedule.in_blocks`): at least a
block of k each (`block_rows`), the least here."""

from __future__ import annotations

import numpy as np
import pytest
from test_frontier_products import reference_grads
from test_frontier_threads import HIDDEN, free_teams, inputs, recorded_teams

import recir
from recir.backend.engine import openmp
from recir.backend import native_schedule, policy
from recir.backend.native_schedule import block_rows, in_blocks
from recir.data.synthetic import make_treebank
from recir.models import tree_rnn
from recir.passes.row_logs import log_rows


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("per_block", [4, 5], ids=["at-once", "logged"])
def test_logged_outer_products_add_every_heights_rows(threads, per_block, tmp_path,
                                                       monkeypatch):
    if threads > 1 and openmp() is None:
        pytest.skip("no OpenMP runtime")
    block = log_rows()
    count = block // per_block  # 4: 8n leaves, 2 blocks (a team's: 1), 4n the next height
    trees = make_treebank(count, "balanced", num_leaves=8, seed=11, vocab_size=100)
    # the least blocks (as where a row's scratch fills the cache share)
    monkeypatch.setattr(native_schedule, "block_rows", lambda t, per_row: t * block)
    heights, _ = in_blocks(np.cumsum([0, 8 * count, 4 * count, 2 * count, count]),
                           threads * block)
    shares = -(-np.diff(heights) // threads)  # a thread's rows of each height
    if per_block == 4:  # the leaves' a whole block a thread
        assert shares[0] == block
    else:  # less than a block a call, more than one over a thread's heights
        assert shares.max() < block < shares.sum()
    teams = gradients_match_numpy(trees, 12, threads, 2, tmp_path, monkeypatch)
    assert [team for _, team, _ in teams] == [threads] * 4  # `_fwd`'s, `_bwd`'s, twice


def gradients_match_numpy(trees: list, seed: int, threads: int, calls: int, tmp_path,
                          monkeypatch) -> list[tuple[str, int, bool]]:
    """TreeRNN's gradients of `trees` on `threads` (a team paying from one
    row on), added into ones, against NumPy's, `calls` calls in a row; the
    height loops' teams as they ran (`recorded_teams`)."""
    params = tree_rnn.init_params(np.random.default_rng(seed), hidden=HIDDEN, vocab=100)
    want = {k: np.ones_like(v) for k, v in params.items()}
    for tree in trees:
        reference_grads(tree, params, want)
    grad = recir.value_and_grad(tree_rnn.trace_model(params), batching="frontier",
                                threads=threads, cache_dir=free_teams(tmp_path))
    teams = recorded_teams(monkeypatch)
    for call in range(calls):
        got = {k: np.ones_like(v) for k, v in params.items()}
        grad.batch(inputs(trees), got)
        for k, g in want.items():
            np.testing.assert_allclose(got[k], g, rtol=1e-4, atol=1e-4, err_msg=f"{k}, {call}")
    return teams


def test_a_wide_height_runs_in_blocks_of_near_equal_rows():
    """Near-equal blocks of at most the rows given; a block's scratch
    within a core's L2, but at least a block of k per thread."""
    depth = log_rows()
    assert block_rows(1, 1 << 40) == depth and block_rows(3, 1 << 40) == 3 * depth
    assert block_rows(2, 1) >= 2 * depth
    per_row = policy.l2_bytes() // (4 * depth)  # four blocks of k fill L2
    assert block_rows(1, per_row) == 4 * depth and block_rows(2, per_row) == 8 * depth
    bounds = np.array([0, 545, 674, 757, 800], np.int64)
    cut, pieces = in_blocks(bounds, 160)
    np.testing.assert_array_equal(cut, [0, 136, 272, 408, 545, 674, 757, 800])
    np.testing.assert_array_equal(pieces, [(0, 545, j, 4) for j in range(4)] + [
        (545, 129, 0, 1), (674, 83, 0, 1), (757, 43, 0, 1)])
    np.testing.assert_array_equal(in_blocks(np.array([0, 320, 480]), 160)[0],
                                  [0, 160, 320, 480])
    narrow = np.array([0, 100, 150], np.int64)
    assert in_blocks(narrow, 160) == (narrow, None)
    assert len(in_blocks(np.array([0], np.int64), 160)[0]) == 1


def blocks_reference(bounds: np.ndarray, rows: int) -> tuple[list[int], list[tuple]]:
    """Each height of n > rows rows as ceil(n / rows) blocks, block j of k
    starting n * j // k in, and each block's (height's start, n, j, k); an
    empty height dropped (plain Python)."""
    cut, pieces = [], []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        count = -(-(hi - lo) // rows)
        cut += [lo + (hi - lo) * j // count for j in range(count)]
        pieces += [(lo, hi - lo, j, count) for j in range(count)]
    return [*cut, int(bounds[-1])], pieces


def test_blocks_match_plain_python_on_random_heights():
    rng = np.random.default_rng(7)
    for _ in range(300):
        heights = int(rng.integers(1, 12))
        counts = rng.integers(0, 3, heights) * rng.integers(0, 400, heights)
        bounds = np.cumsum([int(rng.integers(0, 5)), *counts]).astype(np.int64)
        rows = int(rng.integers(1, 200))
        got, pieces = in_blocks(bounds, rows)
        assert got.dtype == np.int64
        if (np.diff(bounds) > rows).any():
            want, want_pieces = blocks_reference(bounds, rows)
            assert got.tolist() == want
            assert list(map(tuple, pieces.tolist())) == want_pieces
        else:  # nothing to cut: the same array
            assert got is bounds and pieces is None


@pytest.mark.parametrize("threads", [2, 3])
def test_a_team_takes_pieces_of_its_own_block_of_a_cut_height(threads, tmp_path, monkeypatch):
    """Heights cut into blocks of 16 rows a thread: at each block a thread
    takes a piece of its own block of the whole height (each bound's piece,
    `in_blocks`), its saved rows one block after the other threads'
    (`saved_cursor`); the gradients are NumPy's, call after call, whichever
    of the Python and the native policy chose the pieces."""
    if openmp() is None:
        pytest.skip("no OpenMP runtime")
    monkeypatch.setattr(native_schedule, "block_rows", lambda t, per_row: 16 * t)
    monkeypatch.setattr(native_schedule, "BY_GROUPS", False)  # every height by rows
    trees = make_treebank(12, "balanced", num_leaves=32, seed=3, vocab_size=100)
    pieces = []
    loop_call = native_schedule.HeightLoop.__call__

    def noted(self, *args, **kwargs):
        pieces.append(kwargs["pieces"] if "pieces" in kwargs else args[10])
        return loop_call(self, *args, **kwargs)

    monkeypatch.setattr(native_schedule.HeightLoop, "__call__", noted)
    gradients_match_numpy(trees, 5, threads, 3, tmp_path, monkeypatch)
    assert pieces and all(p is not None and (p[:, 3] > 1).any() for p in pieces)
