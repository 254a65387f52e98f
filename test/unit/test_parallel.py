"""Tasks on libgomp: results identical for 1, 2 and N threads, errors still
reported, and a stress test of many random batches at the maximum count."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import recir
from recir.context import make_context
from recir.data import make_tree, make_treebank
from recir.diagnostics import RecirError
from recir.examples.programs import CALLS
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from recir.parsing import parse_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"
MAX_THREADS = max(4, os.cpu_count() or 1)


def inputs(tree):
    return tree.left, tree.right, tree.word, tree.label, tree.root


@pytest.mark.parametrize(("name", "args"), [("fib", (24,)), ("ack", (2, 9)),
                                            ("tak", (14, 9, 4)), ("thesis_primes", (300,))])
def test_programs_with_threads(name: str, args: tuple[int, ...]) -> None:
    reference, filename = CALLS[name]
    module = parse_module(make_context(), (EXAMPLES / filename).read_text(), filename)
    for threads in (2, MAX_THREADS):
        assert recir.compile(module, entry=name, threads=threads)(*args) == (reference(*args),)


@pytest.mark.parametrize("module", [tree_rnn, rntn, tree_lstm])
def test_tree_models_identical_for_1_2_n_threads(module) -> None:
    params = module.init_params(np.random.default_rng(0), hidden=16, vocab=100)
    model = module.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    functions = [recir.compile(model, threads=t) for t in (1, 2, MAX_THREADS)]
    trees = [*make_treebank(10, vocab_size=100, seed=1),
             make_tree("balanced", 64, np.random.default_rng(2), 100)]
    for tree in trees:
        h1, l1 = functions[0](*inputs(tree))
        for f in functions[1:]:
            h, loss = f(*inputs(tree))
            np.testing.assert_array_equal(h, h1)
            assert loss == l1


def test_td_tree_lstm_with_threads() -> None:
    params = td_tree_lstm.init_params(np.random.default_rng(3), hidden=6, inputs=4)
    x = np.array([0.5, -0.2, 0.9, 0.1], np.float32)
    params["u_score"] = np.tanh(params["w_in"] @ x)
    model = td_tree_lstm.trace_model(params)
    assert recir.compile(model, threads=2)(x, 8) == recir.compile(model)(x, 8)


def test_errors_in_tasks_are_reported() -> None:
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=10)
    f = recir.compile(tree_rnn.trace_model(params), threads=2)
    tree = make_tree("balanced", 16, np.random.default_rng(0), 10)
    word = tree.word.copy()
    word[word >= 0] = 99  # every leaf reads past the embedding table
    with pytest.raises(RecirError, match="index out of range"):
        f(tree.left, tree.right, word, tree.label, tree.root)


def test_stress_random_batches_at_max_threads() -> None:
    params = tree_lstm.init_params(np.random.default_rng(5), hidden=8, embed=8, vocab=60)
    model = tree_lstm.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    serial, parallel = recir.compile(model), recir.compile(model, threads=MAX_THREADS)
    rng = np.random.default_rng(9)
    for seed in range(30):
        shape = ["balanced", "moderate", "linear"][seed % 3]
        tree = make_tree(shape, int(rng.integers(2, 80)), np.random.default_rng(seed), 60)
        h1, l1 = serial(*inputs(tree))
        h2, l2 = parallel(*inputs(tree))
        np.testing.assert_array_equal(h1, h2)
        assert l1 == l2


@pytest.mark.parametrize("module", [tree_rnn, rntn, tree_lstm])
def test_batch_gradients_with_threads_equal_serial(module) -> None:
    params = module.init_params(np.random.default_rng(4), hidden=12, vocab=80)
    model = module.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    vg = recir.value_and_grad(model)
    rng = np.random.default_rng(6)
    for _ in range(8):  # random batches at the maximum thread count
        trees = make_treebank(int(rng.integers(2, 30)), vocab_size=80,
                              seed=int(rng.integers(1 << 30)))
        batch = [inputs(t) for t in trees]
        serial_out, serial = vg.batch(batch, threads=1)
        parallel_out, parallel = vg.batch(batch, threads=MAX_THREADS)
        for a, b in zip(serial_out, parallel_out):
            assert a[-1] == b[-1]
        for name in serial:
            np.testing.assert_allclose(parallel[name], serial[name], rtol=1e-5, atol=1e-6)
