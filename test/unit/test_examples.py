"""The example programs, run by the interpreter, against plain Python and the
values the thesis's Appendix C gives (sizes kept small: the interpreter is slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recir.context import make_context
from recir.examples.programs import CALLS, ack, fib, tak, thesis_primes
from recir.interpreter import run_function
from recir.parsing import parse_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"


def load(filename: str):
    return parse_module(make_context(), (EXAMPLES / filename).read_text(), filename)


def test_references_match_the_published_values():
    assert [fib(20), fib(24), fib(30)] == [10946, 75025, 1346269]
    assert [ack(3, 3), ack(3, 4)] == [61, 125]
    assert [tak(24, 16, 8), tak(25, 16, 8)] == [9, 16]
    assert [thesis_primes(7500), thesis_primes(8000)] == [42209, 45161]


CASES = [
    ("fib", (0,)), ("fib", (1,)), ("fib", (2,)), ("fib", (12,)),
    ("ack", (0, 0)), ("ack", (1, 2)), ("ack", (2, 3)), ("ack", (3, 1)),
    ("tak", (3, 2, 1)), ("tak", (1, 2, 3)), ("tak", (8, 4, 2)), ("tak", (10, 6, 2)),
    ("thesis_primes", (0,)), ("thesis_primes", (1,)), ("thesis_primes", (2,)),
    ("thesis_primes", (7,)), ("thesis_primes", (25,)),
]


@pytest.mark.parametrize(("name", "args"), CASES)
def test_example_matches_python(name: str, args: tuple[int, ...]):
    reference, filename = CALLS[name]
    assert run_function(load(filename), name, list(args)) == (reference(*args),)


def test_fib_20_gives_the_published_value():
    assert run_function(load("fib.mlir"), "fib", [20]) == (10946,)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def tree_lstm_reference(left, right, word, node, p):
    """Tai et al.'s binary TreeLSTM in float64 NumPy, independent of recir."""
    if left[node] < 0:
        i, o, u = np.split(p["w_leaf"] @ p["emb"][word[node]] + p["b_leaf"], 3)
        c = sigmoid(i) * np.tanh(u)
        return sigmoid(o) * np.tanh(c), c
    hl, cl = tree_lstm_reference(left, right, word, left[node], p)
    hr, cr = tree_lstm_reference(left, right, word, right[node], p)
    i, fl, fr, o, u = np.split(p["u"] @ np.r_[hl, hr] + p["b"], 5)
    c = sigmoid(i) * np.tanh(u) + sigmoid(fl) * cl + sigmoid(fr) * cr
    return sigmoid(o) * np.tanh(c), c


def random_tree(rng, leaves: int):
    """Post-order arrays of a random binary tree with `leaves` leaves."""
    left, right, word = [], [], []

    def build(n: int) -> int:
        if n == 1:
            left.append(-1), right.append(-1), word.append(int(rng.integers(10)))
            return len(left) - 1
        k = int(rng.integers(1, n))
        a, b = build(k), build(n - k)
        left.append(a), right.append(b), word.append(-1)
        return len(left) - 1

    root = build(leaves)
    return [np.array(v, dtype=np.int32) for v in (left, right, word)], root


@pytest.mark.parametrize("leaves", [1, 2, 7, 19])
def test_tree_lstm_matches_numpy(leaves: int):
    rng = np.random.default_rng(leaves)
    shapes = {"emb": (10, 3), "w_leaf": (12, 3), "b_leaf": (12,), "u": (20, 8), "b": (20,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    (left, right, word), root = random_tree(rng, leaves)
    h, c = run_function(load("tree_lstm.mlir"), "tree_lstm",
                        [left, right, word, root, *params.values()])
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    h_ref, c_ref = tree_lstm_reference(left, right, word, root, p64)
    np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, c_ref, rtol=1e-5, atol=1e-6)
