"""`timeout=` and `max_depth=` on every kind of compiled model: the recursive
code, its gradient (`value_and_grad`, `grad`), `batching="auto"` and
`"frontier"`. Gradients took neither (a TypeError), nor did a frontier call
take `timeout=`; a call nested too deep named the entry, not the recursion.
References: NumPy, the interpreter and the errors' exact text."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import tree_rnn

VOCAB = 10
NO_TIMEOUT = ("error: timeout= stops a recursion, and batching='frontier' runs none (one step "
              "a tree height): use batching='recursive' or 'auto' for calls with a timeout")


def trace_chain(params: dict[str, np.ndarray]) -> tuple[recir.TracedModel, str]:
    """`walk(i)`: h = tanh(w @ walk(next[i]) + emb[word[i]]), tanh(emb[word[i]])
    at the last node; outputs h at `start` and its sum (the loss). Also
    `file:line:col: ` of the SubGraph, where errors about it point."""
    hidden = params["w"].shape[0]
    with recir.trace("chain") as m:
        nxt, word = m.input("next", recir.structure()), m.input("word", recir.structure())
        start = m.input("start", recir.i32)
        emb, w = m.param("emb", params["emb"]), m.param("w", params["w"])
        line = sys._getframe().f_lineno + 1
        with recir.SubGraph("walk", [recir.i32], [recir.vector(hidden)]) as walk:
            (i,) = walk.inputs
            x = rf.gather(emb, word[i])
            walk.output(recir.cond(nxt[i] < 0, lambda: rf.tanh(x),
                                   lambda: rf.tanh(w @ walk(nxt[i]) + x)))
        h = walk(start)
        m.output(h, rf.sum(h))
    return m.traced, f"{trace_chain.__code__.co_filename}:{line}:1: "


def chain(nodes: int) -> tuple:
    """A chain of `nodes` nodes from node 0: `nodes` calls of `walk`, one
    more with the entry's, nested."""
    nxt = np.append(np.arange(1, nodes, dtype=np.int32), np.int32(-1))
    return nxt, np.arange(nodes, dtype=np.int32) % VOCAB, 0


def chain_reference(args: tuple, params: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    nxt, word, _ = args
    h = np.tanh(params["emb"][word[-1]])
    for k in reversed(range(len(nxt) - 1)):
        h = np.tanh(params["w"] @ h + params["emb"][word[k]])
    return h, float(h.sum())


def chain_params(hidden: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"emb": (0.5 * rng.standard_normal((VOCAB, hidden))).astype(np.float32),
            "w": (0.5 * rng.standard_normal((hidden, hidden)) / np.sqrt(hidden))
            .astype(np.float32)}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("objects")


@pytest.fixture(scope="module")
def model():
    params = chain_params(4)
    traced, where = trace_chain(params)
    return traced, params, where


def assert_matches(outputs, grads, args, params, reference_grads):
    h, loss = chain_reference(args, params)
    np.testing.assert_allclose(outputs[0], h, rtol=1e-5, atol=1e-6)
    assert outputs[1] == pytest.approx(loss, rel=1e-5)
    for name, expected in reference_grads.items():
        np.testing.assert_allclose(grads[name], expected, rtol=1e-4, atol=1e-6)


def test_a_call_too_deep_names_the_recursive_function_and_its_line(model, cache_dir):
    traced, params, where = model
    f = recir.compile(traced, threads=1, max_depth=6, cache_dir=cache_dir)
    h, loss = f(*chain(5))  # 5 + 1 calls deep
    np.testing.assert_allclose(h, chain_reference(chain(5), params)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(RecirError) as error:
        f(*chain(6))
    assert str(error.value) == f"{where}error: recursion in @walk is deeper than max_depth=6"


def test_gradients_take_max_depth_as_compile_does(model, cache_dir):
    """The same limit passes and fails the same trees as `compile`'s, with
    the same error (the gradient's wrapper call is not counted)."""
    traced, params, where = model
    args = chain(5)
    reference = recir.value_and_grad(traced, engine="interpret")(*args)[1]
    limit = len(args[0]) + 1
    for depth in (limit, limit - 1):
        made = [recir.compile(traced, threads=1, max_depth=depth, cache_dir=cache_dir),
                recir.value_and_grad(traced, threads=1, max_depth=depth,
                                     cache_dir=cache_dir),
                recir.grad(traced, threads=1, max_depth=depth, cache_dir=cache_dir),
                recir.value_and_grad(traced, batching="auto", threads=1,
                                     max_depth=depth, cache_dir=cache_dir)]
        if depth == limit:
            outputs = made[0](*args)
            assert_matches(outputs, made[1](*args)[1], args, params, reference)
            assert_matches(outputs, made[2](*args), args, params, reference)
            assert_matches(*made[3](*args), args, params, reference)
            continue
        for function in made:
            with pytest.raises(RecirError) as error:
                function(*args)
            assert str(error.value) == (f"{where}error: recursion in @walk is deeper than "
                                        f"max_depth={depth}")


def test_gradient_max_depth_is_checked_as_compile_checks_it(model, cache_dir):
    traced = model[0]
    for batching in ("recursive", "frontier", "auto"):
        for bad in (0, -1, 2.5, True):
            with pytest.raises(RecirError, match="max_depth must be a positive integer"):
                recir.value_and_grad(traced, batching=batching, max_depth=bad,
                                     cache_dir=cache_dir)
    for function in (recir.compile, recir.value_and_grad):
        with pytest.raises(RecirError, match="^error: max_depth bounds the recursive code's "
                                             "calls: batching='frontier' makes none"):
            function(traced, batching="frontier", max_depth=10, cache_dir=cache_dir)
    for batching in ("recursive", "auto"):
        with pytest.raises(RecirError) as error:
            recir.value_and_grad(traced, batching=batching, engine="interpret", max_depth=10)
        assert str(error.value) == ("error: max_depth bounds native code's recursion: "
                                    "engine='interpret' runs none; use engine='native' "
                                    "with it")
    with pytest.raises(RecirError, match="max_depth bounds native code's recursion"):
        recir.grad(traced, engine="interpret", max_depth=10)


def test_gradient_calls_take_a_timeout(model, cache_dir):
    traced, params, _ = model
    args = chain(7)
    reference = recir.value_and_grad(traced, engine="interpret")(*args)[1]
    vg = recir.value_and_grad(traced, threads=1, cache_dir=cache_dir)
    assert_matches(*vg(*args, timeout=30.0), args, params, reference)
    grads = recir.grad(traced, threads=1, cache_dir=cache_dir)(*args, timeout=30.0)
    assert_matches(chain_reference(args, params), grads, args, params, reference)
    auto = recir.value_and_grad(traced, batching="auto", threads=1, cache_dir=cache_dir)
    assert_matches(*auto(*args, timeout=30.0), args, params, reference)
    for function in (vg, auto):
        with pytest.raises(RecirError, match="timeout must be a positive, finite number"):
            function(*args, timeout=0)
    with pytest.raises(RecirError) as error:
        recir.value_and_grad(traced, engine="interpret")(*args, timeout=30.0)
    assert str(error.value) == ("error: timeout= stops native code: engine='interpret' runs "
                                "in Python; use engine='native' for calls with a timeout")


def test_a_timeout_stops_a_long_gradient_call(cache_dir):
    """A chain long and wide enough to take far longer than its timeout;
    the function works again afterwards."""
    params = chain_params(256, seed=1)
    traced, _ = trace_chain(params)
    vg = recir.value_and_grad(traced, threads=1, cache_dir=cache_dir).wait()
    start = time.perf_counter()
    with pytest.raises(RecirError) as error:
        vg(*chain(40000), timeout=0.02)
    assert time.perf_counter() - start < 5.0
    assert str(error.value) == "error: native @chain_grad did not finish within 0.02 s (timeout)"
    args = chain(3)
    reference = recir.value_and_grad(traced, engine="interpret")(*args)[1]
    assert_matches(*vg(*args, timeout=30.0), args, params, reference)


def test_frontier_calls_refuse_a_timeout(cache_dir):
    """Frontier calls run one step per tree height: nothing to stop; the
    error says so and where timeouts apply (for `auto`, the recursive code)."""
    params = tree_rnn.init_params(np.random.default_rng(0), vocab=100)
    traced = tree_rnn.trace_model(params)
    tree = make_treebank(1, seed=3)[0]
    args = (tree.left, tree.right, tree.word, tree.label, tree.root)
    expected = tree_rnn.reference(tree, tree.root, params)[1]
    frontier = recir.compile(traced, batching="frontier", threads=1, cache_dir=cache_dir)
    gradient = recir.value_and_grad(traced, batching="frontier", threads=1,
                                    cache_dir=cache_dir)
    for function in (frontier, gradient):
        with pytest.raises(RecirError) as error:
            function(*args, timeout=30.0)
        assert str(error.value) == NO_TIMEOUT
    assert frontier(*args)[1] == pytest.approx(expected, rel=1e-5)
    assert gradient(*args)[0][1] == pytest.approx(expected, rel=1e-5)
