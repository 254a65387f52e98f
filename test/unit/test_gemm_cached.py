"""A weight's packed copy for all the heights of a call (`passes/gemm_cached.py`).

`recir_gemm_nt.cached` (and nn's) called as a height loop calls it, one entry for
several products of different rows by one weight: every product against
NumPy (float64) at shapes whose n and k are not multiples of a vector
(masked tails) and whose k spans several blocks, inside NaN-padded
buffers (a read past A or B would reach C as NaN, a write past C would
leave no NaN); the copy made once (at the first product that would pack
B rather than take dot products) and then kept; another
weight in the entry repacked. The frontier functions give a new weight's
results at the next call after it changed in place, for inference and
gradients.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from test_frontier_threads import batch, free_teams, inputs
from test_invoke_to_frontier import tree_batch_args

import recir
from recir.backend.kernels.compiled_gemm import I64, PTR, engine
from recir.interpreter import run_function
from recir.models import tree_lstm
from recir.passes.gemm_cached import ENTRY
from recir.pipeline import run_passes

CACHED = ctypes.CFUNCTYPE(None, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64, PTR, PTR)
FREE = ctypes.CDLL(None).free
FREE.argtypes = [ctypes.c_void_p]


def padded(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """rows x cols of random values, each row 5 floats apart from the next's
    end (NaN between), and a NaN row after."""
    full = np.full((rows + 1, cols + 5), np.nan, np.float32)
    full[:rows, :cols] = rng.standard_normal((rows, cols))
    return full


def cached(layout: str):
    return CACHED(engine().address(f"recir_gemm_{layout}.cached"))


def weight(rng: np.random.Generator, layout: str, n: int, k: int) -> np.ndarray:
    """B as the layout reads it: n x k for nt (X W^T), k x n for nn (dY W)."""
    return padded(rng, n, k) if layout == "nt" else padded(rng, k, n)


def product(kernel, entry: np.ndarray, w: np.ndarray, n: int, k: int, m: int,
            accumulate: bool, bias: np.ndarray | None, rng: np.random.Generator,
            layout: str = "nt") -> None:
    """One product C (+)= X W^T (+ bias), or X W for nn, checked against NumPy."""
    x = padded(rng, m, k)
    c = np.full((m + 1, n + 3), np.nan, np.float32)
    start = rng.standard_normal((m, n)).astype(np.float32)
    c[:m, :n] = start
    b = w[:n, :k].T if layout == "nt" else w[:k, :n]
    want = x[:m, :k].astype(np.float64) @ b.astype(np.float64)
    want += start if accumulate else 0
    want += bias if bias is not None else 0
    kernel(m, n, k, x.ctypes.data, x.shape[1], w.ctypes.data, w.shape[1], c.ctypes.data,
           c.shape[1], int(accumulate), bias.ctypes.data if bias is not None else None,
           entry.ctypes.data)
    np.testing.assert_allclose(c[:m, :n], want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    assert np.isnan(c[m:]).all() and np.isnan(c[:, n:]).all(), "wrote outside C"


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("n,k", [(1, 1), (17, 9), (97, 129), (750, 300), (300, 750)])
def test_one_copy_serves_every_product_by_its_weight(layout, n, k):
    """A product of no rows makes no copy (it would pack nothing); the
    first product that packs makes it (nt: more rows than dot products
    pay for; nn: any rows), and the later ones read it."""
    kernel = cached(layout)
    rng = np.random.default_rng(n * 1000 + k)
    w = weight(rng, layout, n, k)
    entry = np.zeros(ENTRY, np.int64)
    copies = []
    try:
        for step, m in enumerate([0, 2000, 1, 3, 40, 7, 160, 25], start=-1):
            bias = rng.standard_normal(n).astype(np.float32) if (
                step == 4 and layout == "nt") else None  # (C starts from it: no accumulate)
            product(kernel, entry, w, n, k, m, step % 2 == 1, bias, rng, layout)
            assert list(entry[:4]) == [w.ctypes.data, w.shape[1], n, k]
            copies.append(int(entry[4]))
        made = [c for c in copies if c]
        assert copies[0] == 0
        if n * k > 10000 or layout == "nn":  # 2000 rows, more than a block
            assert copies[1] != 0
        assert len(set(made)) <= 1 and made == copies[len(copies) - len(made):], copies
        other = weight(rng, layout, n, k)  # another weight in the entry: named, repacked
        product(kernel, entry, other, n, k, 2000, False, None, rng, layout)
        assert entry[0] == other.ctypes.data
        product(kernel, entry, other, n, k, 40, True, None, rng, layout)
    finally:
        FREE(int(entry[4]) or None)


def test_a_weights_first_product_that_packs_makes_the_copy():
    """The first product that packs B, even of few rows (one block of the
    driver's), packs it into the copy, which later products read; a row
    (dot products, no packing) of another weight only names it."""
    kernel = cached("nt")
    rng = np.random.default_rng(5)
    n, k = 130, 70
    w, other = padded(rng, n, k), padded(rng, n, k)
    entry = np.zeros(ENTRY, np.int64)
    try:
        product(kernel, entry, w, n, k, 60, False, None, rng)
        copy = int(entry[4])
        assert entry[0] == w.ctypes.data and copy != 0
        for m in (1, 60):
            product(kernel, entry, w, n, k, m, True, None, rng)
            assert entry[4] == copy
        product(kernel, entry, other, n, k, 1, False, None, rng)
        assert entry[0] == other.ctypes.data and entry[4] == 0
    finally:
        FREE(int(entry[4]) or None)


def frontier_reference(traced, params, trees):
    """The batched gradient IR on the interpreter: outputs, losses, gradients."""
    from test_frontier_gradients import batched_gradients

    module = traced.module.clone()
    run_passes(module, batched_gradients(5, "node", traced.entry))
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    h, losses, *_ = run_function(module, f"{traced.entry}__frontier_grad",
                                 [*tree_batch_args(trees, params), *grads.values()])
    return h, losses, grads


@pytest.mark.parametrize("threads,by_groups", [(1, False), (2, True), (2, False)])
def test_weights_changed_in_place_between_calls_give_the_new_weights_results(
        tmp_path, monkeypatch, threads, by_groups):
    """A frontier function called, its weights then changed in place (as an
    optimizer does) and assigned (`params[...] =`), and called again:
    outputs and gradients are the new weights', against the interpreter.
    On two threads every height splits across the team (a kept policy
    whose team start costs nothing), by the trees' groups or by blocks of
    each height's rows: each thread's own table and copies."""
    from recir.backend import native_schedule
    from recir.backend.native_loops import HeightLoop

    params = tree_lstm.init_params(np.random.default_rng(4), hidden=19, vocab=100)
    traced = tree_lstm.trace_model(params)
    trees = batch()
    cache = free_teams(tmp_path) if threads > 1 else tmp_path
    fn = recir.compile(traced, batching="frontier", threads=threads, cache_dir=cache)
    grad = recir.value_and_grad(traced, batching="frontier", threads=threads, cache_dir=cache)
    teams: list[tuple[int, bool]] = []
    run = HeightLoop.__call__
    monkeypatch.setattr(HeightLoop, "__call__", lambda self, *args: teams.append(
        (args[4], args[6] is not None)) or run(self, *args))
    if not by_groups:
        monkeypatch.setattr(native_schedule, "BY_GROUPS", False)
    rng = np.random.default_rng(9)
    for change in range(3):
        h, losses, expected = frontier_reference(traced, traced.params, trees)
        outs = fn.batch(inputs(trees))
        gouts, grads = grad.batch(inputs(trees))
        assert set(teams) == {(threads, by_groups and threads > 1)}, teams
        for k in range(len(trees)):
            for got in (outs[k], gouts[k]):
                np.testing.assert_allclose(got[0], h[k], rtol=1e-4, atol=1e-5)
                assert got[1] == pytest.approx(losses[k], rel=1e-4)
        for name, g in expected.items():
            np.testing.assert_allclose(grads[name], g, rtol=1e-3, atol=1e-4, err_msg=name)
        for name in ("u", "w_leaf"):
            if change == 0:  # in place, as an optimizer's step
                traced.params[name] -= 0.5 * rng.standard_normal(params[name].shape).astype(
                    np.float32)
            else:
                traced.params[name] = rng.standard_normal(params[name].shape).astype(
                    np.float32)


@pytest.mark.parametrize("layout", ["nt", "nn"])
def test_one_address_with_other_sizes_or_row_stride_is_another_weight(layout):
    """The entry names B by address, row stride, n and k: the same memory
    read as a weight of other sizes, or with rows further apart, is packed
    again (a copy of the first would give its products the wrong columns)."""
    kernel = cached(layout)
    rng = np.random.default_rng(11)
    memory = rng.standard_normal(301 * 265).astype(np.float32)
    entry = np.zeros(ENTRY, np.int64)
    copies = 0
    try:
        for n, k, ldb in [(200, 130, 265), (200, 130, 265), (120, 130, 265), (120, 90, 265),
                          (120, 90, 140), (200, 130, 265)]:
            rows = n if layout == "nt" else k
            w = np.lib.stride_tricks.as_strided(memory, (rows + 1, ldb), (4 * ldb, 4))
            for m in (600, 30):  # the first product by a weight makes its copy
                product(kernel, entry, w, n, k, m, False, None, rng, layout)
                assert list(entry[:4]) == [memory.ctypes.data, ldb, n, k]
            copies += entry[4] != 0
        assert copies == 6  # each weight's products read a copy of its own
    finally:
        FREE(int(entry[4]) or None)
