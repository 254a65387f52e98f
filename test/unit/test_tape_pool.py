"""The tape chunks kept between gradient calls (`backend/tape_pool.py`): a
call of a size seen before allocates nothing, a larger one grows the kept
chunk, and gradients equal those of calls that start with an empty pool."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir.backend import policy
from recir.backend.tape_pool import LIBC, TAPES, TapePool
from recir.data import make_tree
from recir.models import tree_rnn


def inputs(tree):
    return (tree.left, tree.right, tree.word, tree.label, tree.root)


def grads_with_empty_pool(vg, tree, monkeypatch):
    monkeypatch.setattr(TAPES, "seed", lambda ctx: None)
    try:
        return vg(*inputs(tree))[1]
    finally:
        monkeypatch.undo()


def kept_chunks(vg) -> list[tuple[int, int]]:
    """(address, size) of the chunks the next call starts its arenas in: the
    pool's, and those of a team's contexts kept by the function."""
    held = [(ctx.tape_chunks, ctx.tape_end - ctx.tape_chunks)
            for kept in vg.native.contexts.kept.values() for contexts in kept
            for ctx in contexts if ctx.tape_chunks]
    return held + list(TAPES.free)


@pytest.mark.parametrize("threads", [1, 2])
def test_kept_chunk_is_reused_and_grown(threads, monkeypatch):
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=32, vocab=50)
    if threads > 1:  # every call on a team (a small one would run alone, as on one thread)
        monkeypatch.setattr(policy, "team_pays", lambda *args: True)
        monkeypatch.setenv("RECIR_SPAWN_BUDGET", "2")
    vg = recir.value_and_grad(tree_rnn.trace_model(params), threads=threads)
    monkeypatch.setattr(TAPES, "free", [])
    small = make_tree("balanced", 8, np.random.default_rng(1), 50)
    vg(*inputs(small))
    kept = kept_chunks(vg)
    assert kept
    assert threads == 1 or not TAPES.free  # a team's chunks stay with its kept contexts
    vg(*inputs(small))
    assert set(kept) <= set(kept_chunks(vg))  # the same chunks went out and came back

    big = make_tree("linear", 4000, np.random.default_rng(2), 50)
    got = vg(*inputs(big))[1]
    assert vg.last_tape_bytes > max(size for _, size in kept)
    sizes = [size for _, size in kept_chunks(vg)]
    assert (max(sizes) if threads == 1 else sum(sizes)) >= vg.last_tape_bytes
    want = grads_with_empty_pool(vg, big, monkeypatch)
    for name in params:  # (a team's tasks add in the order they run: float32 sums reordered)
        scale = np.abs(want[name]).max()
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7 * max(1, scale))


def test_pool_keeps_a_bounded_number_of_chunks_and_bytes(monkeypatch):
    pool = TapePool()
    monkeypatch.setattr("recir.backend.tape_pool.KEEP_CHUNKS", 3)
    for size in (4096, 1024, 2048, 8192, 512):
        pool.keep(LIBC.malloc(size), size)
    assert [size for _, size in pool.free] == [2048, 4096, 8192]  # the largest kept
    monkeypatch.setattr("recir.backend.tape_pool.KEEP_BYTES", 10_000)
    pool.keep(LIBC.malloc(3000), 3000)
    assert [size for _, size in pool.free] == [3000, 4096]  # a huge one is not kept
