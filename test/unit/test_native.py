"""Native code against the interpreter and NumPy: examples, models, errors, cache."""

from __future__ import annotations

import re

import numpy as np
import pytest

import recir
from recir.context import make_context
from recir.data import load_sst, make_treebank, sst_path
from recir.diagnostics import RecirError
from recir.examples.programs import CALLS
from recir.interpreter import run_function
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from recir.parsing import parse_module
from recir import pipeline
from recir.pipeline import compile_module

EXAMPLES = "examples/ir"


def load_example(name: str):
    with open(f"{EXAMPLES}/{name}.mlir") as f:
        return parse_module(make_context(), f.read(), f"{name}.mlir")


@pytest.mark.parametrize(("name", "entry", "args"), [
    ("fib", "fib", [(0,), (1,), (15,), (22,)]),
    ("ackermann", "ack", [(0, 0), (1, 5), (2, 3), (3, 3)]),
    ("takeuchi", "tak", [(6, 4, 2), (12, 8, 4), (3, 7, 1)]),
    ("thesis_primes", "thesis_primes", [(1,), (10,), (60,)]),
])
def test_examples_match_interpreter(name, entry, args, cache_dir):
    """The interpreter is the oracle for all but each program's last call,
    which plain Python checks (fib(22) is ~57,000 interpreted calls)."""
    module = load_example(name)
    native = compile_module(module, entry, cache_dir=cache_dir)
    for a in args[:-1]:
        assert native(*a) == run_function(module, entry, list(a))
    assert native(*args[-1]) == (CALLS[entry][0](*args[-1]),)


@pytest.mark.parametrize(("entry", "args"), [
    ("fib", (25,)), ("ack", (2, 6)), ("tak", (18, 12, 6)), ("thesis_primes", (200,))])
def test_examples_match_plain_python(entry, args, cache_dir):
    reference, file = CALLS[entry]
    native = compile_module(load_example(file.removesuffix(".mlir")), entry,
                            cache_dir=cache_dir)
    assert native(*args) == (reference(*args),)


def dev_trees(count: int):
    path = sst_path("dev")
    if path is None:
        return make_treebank(count, seed=3), 100
    trees, vocab = load_sst(path)
    return trees[:count], len(vocab)


def relative_error(got, expected) -> float:
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-30))


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm], ids=lambda m: m.__name__)
def test_tree_models_match_interpreter(model, cache_dir):
    trees, vocab = dev_trees(40)
    params = model.init_params(np.random.default_rng(0), vocab=vocab)
    traced = model.trace_model(params)
    native = recir.compile(traced, cache_dir=cache_dir)
    for tree in trees:
        args = [tree.left, tree.right, tree.word, tree.label, tree.root]
        h, loss = native(*args)
        h_ref, loss_ref = traced.run(*args)
        assert relative_error(h, h_ref) <= 1e-5
        assert loss == pytest.approx(loss_ref, rel=1e-5)


def test_top_down_tree_lstm_matches_interpreter(cache_dir):
    counts = set()
    for seed in range(6):
        params = td_tree_lstm.init_params(np.random.default_rng(seed))
        traced = td_tree_lstm.trace_model(params)
        native = recir.compile(traced, cache_dir=cache_dir)
        x = np.random.default_rng(seed + 10).standard_normal(8).astype(np.float32)
        count, total = native(x, 6)
        ref_count, ref_total = traced.run(x, 6)
        assert count == ref_count
        assert total == pytest.approx(ref_total, rel=1e-5, abs=1e-5)
        counts.add(count)
    assert len(counts) > 1


def elementwise_model(op, n: int):
    with recir.trace(f"ew_{op.__name__}") as t:
        x = t.input("x", recir.vector(n))
        t.output(op(x))
    return t.traced


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "exp"])
def test_vectorized_math_is_accurate(name, cache_dir):
    from recir.frontend import ops

    x = np.concatenate([np.linspace(-20, 20, 4001), np.linspace(-1e-3, 1e-3, 999),
                        [0.0, -87.5, 88.0, 89.0, -100.0, 100.0]]).astype(np.float32)
    if name == "exp":  # up to the ends of float32's range, subnormals included, and beyond
        x = np.concatenate([x[np.abs(x) < 80], np.linspace(-87.5, -86.5, 1001),
                            np.linspace(-104.5, -87.5, 1701),
                            np.linspace(88.0, 88.72, 721)]).astype(np.float32)
    native = recir.compile(elementwise_model(getattr(ops, name), x.size), cache_dir=cache_dir)
    reference = {"tanh": np.tanh, "exp": np.exp,
                 "sigmoid": lambda v: 1 / (1 + np.exp(-v.astype(np.float64)))}[name]
    (got,) = native(x)
    want = reference(x).astype(np.float32)
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    assert np.allclose(got[normal], want[normal], rtol=2e-6, atol=0)
    if name == "exp":  # (its subnormals were flushed to 0): within 2 of their last place
        least = np.finfo(np.float32).smallest_subnormal
        assert np.all(np.abs(got[~normal] - want[~normal]) <= 2 * least)
        assert np.count_nonzero(got[~normal]) == np.count_nonzero(want[~normal]) > 1000
    else:
        assert np.all(np.abs(got[~normal]) < np.finfo(np.float32).tiny)


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_vectorized_math_saturates_exactly_and_keeps_nan(name, cache_dir):
    """Each value at every position of a 37-element vector: in the SIMD body
    (whose tanh divides by a reciprocal estimate) and in the scalar rest."""
    from recir.frontend import ops

    inf = np.inf
    special = np.array([inf, -inf, 100.0, -100.0, 9.5, -9.5, 0.0, -0.0, np.nan], np.float32)
    want = {"tanh": [1, -1, 1, -1, 1, -1, 0, -0.0, np.nan],
            "sigmoid": [1, 0, 1, 0, 1 / (1 + np.exp(-9.5)), 1 / (1 + np.exp(9.5)), 0.5, 0.5,
                        np.nan]}[name]
    native = recir.compile(elementwise_model(getattr(ops, name), 37), cache_dir=cache_dir)
    for shift in range(0, 37, 4):
        x = np.roll(np.resize(special, 37), shift)
        (got,) = native(x)
        expected = np.roll(np.resize(np.array(want, np.float32), 37), shift)
        exact = np.abs(x) > 9 if name == "tanh" else np.isinf(x) | (np.abs(x) == 100)
        exact |= x == 0
        assert np.array_equal(got[exact], expected[exact])
        assert np.array_equal(np.signbit(got[exact]), np.signbit(expected[exact]))
        assert np.allclose(got, expected, rtol=2e-6, atol=0, equal_nan=True)


def test_relu_is_numpys_maximum_with_zero_nan_included(cache_dir):
    from recir.frontend import ops

    x = np.resize(np.array([np.nan, -1.0, 2.0, -np.inf, np.inf, 0.0, 3e-39], np.float32), 37)
    native = recir.compile(elementwise_model(ops.relu, x.size), cache_dir=cache_dir)
    (got,) = native(x)
    assert np.array_equal(got, np.maximum(x, 0), equal_nan=True)


@pytest.mark.parametrize("name", ["max", "argmax"])
def test_max_and_argmax_propagate_nan_as_numpy(name, cache_dir):
    from recir.frontend import ops

    native = recir.compile(elementwise_model(getattr(ops, name), 5), cache_dir=cache_dir)
    nan = np.nan
    for x in ([1, nan, 3, nan, 0], [nan, 1, 3, 2, 0], [1, 2, 3, 2, nan], [1, 3, 3, 0, -1],
              [-np.inf] * 5):
        x = np.array(x, np.float32)
        (got,) = native(x)
        assert np.array_equal(got, getattr(np, name)(x), equal_nan=True), x


@pytest.fixture(scope="module")
def lstm(cache_dir):
    params = tree_lstm.init_params(np.random.default_rng(1), vocab=50)
    return recir.compile(tree_lstm.trace_model(params), cache_dir=cache_dir)


def test_bad_child_index_is_an_error_not_a_crash(lstm):
    tree = make_treebank(1, seed=4, vocab_size=50)[0]
    left = tree.left.copy()
    left[tree.root] = 10**6
    with pytest.raises(RecirError, match="'tmath.extract' op index 1000000 out of range for length 51"):
        lstm(left, tree.right, tree.word, tree.label, tree.root)
    with pytest.raises(RecirError, match="index -1 out of range for length 51"):
        lstm(tree.left, tree.right, tree.word, tree.label, -1)


def test_bad_word_id_is_an_error(lstm):
    tree = make_treebank(1, seed=4, vocab_size=50)[0]
    word = tree.word.copy()
    word[word >= 0] = 50
    with pytest.raises(RecirError, match="'tmath.gather' op index 50 out of range for length 50"):
        lstm(tree.left, tree.right, word, tree.label, tree.root)


@pytest.mark.parametrize("batching", ["recursive", "frontier"])
def test_an_index_error_names_the_index_and_length_as_the_interpreter_does(batching, cache_dir):
    """A failed bounds check records what it compared, on every path."""
    params = tree_lstm.init_params(np.random.default_rng(1), vocab=50)
    model = tree_lstm.trace_model(params)
    tree = make_treebank(1, seed=4, vocab_size=50)[0]
    for bad in (-7, 50, 2**31 - 1):
        word = np.where(tree.word >= 0, bad, tree.word).astype(np.int32)
        args = (tree.left, tree.right, word, tree.label, tree.root)
        messages = []
        for function in (recir.compile(model, batching=batching, cache_dir=cache_dir),
                         recir.value_and_grad(model, batching=batching, cache_dir=cache_dir),
                         recir.value_and_grad(model, engine="interpret")):
            with pytest.raises(RecirError) as raised:
                function(*args)
            messages.append(re.search(r"op index \S+ out of range for length \d+",
                                      str(raised.value)).group())
        assert set(messages) == {f"op index {bad} out of range for length 50"}, messages


def test_wrong_argument_shapes_are_errors(lstm):
    tree = make_treebank(1, seed=4, vocab_size=50)[0]
    with pytest.raises(RecirError, match="takes 5 inputs"):
        lstm(tree.left, tree.right)
    with pytest.raises(RecirError, match="expects integers"):
        lstm(tree.left.astype(np.float32), tree.right, tree.word, tree.label, tree.root)


def test_scalar_arguments_are_checked_and_converted(lstm):
    """An i32 argument: Python and NumPy integers pass, one beyond 32 bits
    or of another kind is an error."""
    tree = make_treebank(1, seed=4, vocab_size=50)[0]
    args = (tree.left, tree.right, tree.word, tree.label)
    want = lstm(*args, tree.root)[1]
    assert lstm(*args, np.int64(tree.root))[1] == want
    with pytest.raises(RecirError, match="does not fit"):
        lstm(*args, 1 << 31)
    with pytest.raises(RecirError, match="expects an integer"):
        lstm(*args, 0.5)


def test_structure_arrays_in_any_form_give_the_same_results(lstm):
    """Structure arrays pass by descriptor as they are when int32 and
    contiguous (read-only ones too), converted otherwise (int64, strided
    views), mixed in one call: the results do not depend on the form."""
    tree = make_treebank(1, seed=7, vocab_size=50)[0]
    args = [tree.left, tree.right, tree.word, tree.label]
    want_h, want_loss = lstm(*args, tree.root)

    def read_only(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    forms = [lambda a: a.astype(np.int64), lambda a: np.repeat(a, 2)[::2], read_only,
             lambda a: a]
    for shift in range(len(forms)):
        mixed = [forms[(k + shift) % len(forms)](a) for k, a in enumerate(args)]
        h, loss = lstm(*mixed, tree.root)
        assert np.array_equal(h, want_h)
        assert loss == want_loss


def linear_tree(depth: int):
    """Internal nodes 0..depth-1, each with a leaf on the right: maximal depth."""
    left = np.full(2 * depth + 1, -1, np.int32)
    right = np.full(2 * depth + 1, -1, np.int32)
    left[: depth] = np.arange(1, depth + 1)
    left[depth - 1] = 2 * depth
    right[: depth] = np.arange(depth, 2 * depth)
    zeros = np.zeros(2 * depth + 1, np.int32)
    return left, right, zeros, zeros


@pytest.mark.parametrize("switching", [True, False])
def test_deep_recursion_runs_on_a_big_stack(lstm, switching, monkeypatch):
    """Retried on this thread's switched deep stack, or (as without glibc's
    ucontext) on the deep-stack worker: the same outputs either way."""
    from recir.backend import stack

    monkeypatch.setattr(stack, "SWITCHING", switching)
    left, right, word, label = linear_tree(50_000)
    h, loss = lstm(left, right, word, label, 0)
    assert np.isfinite(h).all() and np.isfinite(loss)
    if not switching:
        monkeypatch.setattr(stack, "SWITCHING", True)
        np.testing.assert_array_equal(lstm(left, right, word, label, 0)[0], h)


def test_recursion_deeper_than_any_stack_is_an_error(cache_dir):
    params = tree_lstm.init_params(np.random.default_rng(1), vocab=50, hidden=256,
                                   embed=256)
    # one thread: the serial retry (test_parallel has the team's), sharing its objects
    native = recir.compile(tree_lstm.trace_model(params), cache_dir=cache_dir, threads=1)
    with pytest.raises(RecirError, match="too deep for the native stack"):
        native(*linear_tree(100_000), 0)


def test_division_by_zero_is_an_error(cache_dir):
    text = """
    func.func @div(%a: i32, %b: i32) -> i32 {
      %q = arith.divsi %a, %b : i32
      func.return %q : i32
    }"""
    native = compile_module(parse_module(make_context(), text, "div.mlir"), "div",
                            cache_dir=cache_dir)
    assert native(-7, 2) == (-3,)
    with pytest.raises(RecirError, match="div.mlir:3:7: error: 'arith.divsi' op division"):
        native(1, 0)
    with pytest.raises(RecirError, match="overflows"):
        native(-(2**31), -1)


def test_an_array_passed_again_is_read_again(cache_dir):
    """The runtime remembers each argument's last array (weights, gradient
    buffers): in-place updates are seen, and a new or reshaped array is checked."""
    text = """
    func.func @dot(%a: tensor<3xf32>, %b: tensor<3xf32>) -> f32 {
      %p = tmath.mul %a, %b : tensor<3xf32>
      %d = tmath.sum %p : tensor<3xf32> -> f32
      func.return %d : f32
    }"""
    native = compile_module(parse_module(make_context(), text, "dot.mlir"), "dot",
                            cache_dir=cache_dir)
    a, b = np.array([1, 2, 3], np.float32), np.ones(3, np.float32)
    assert native(a, b) == (6.0,)
    a *= 2
    assert native(a, b) == (12.0,)
    assert native(np.full(3, 0.5, np.float32), b) == (1.5,)
    a.shape = (1, 3)
    with pytest.raises(RecirError, match="shape"):
        native(a, b)


def test_object_cache_keeps_task_code_apart_from_serial_code(tmp_path, monkeypatch):
    """Code for a team differs from one thread's even with a spawn budget of
    0; the cache once keyed them alike and gave one thread a team's object."""
    monkeypatch.setattr(pipeline, "max_budget", lambda threads: 0)
    module = load_example("fib")
    team = compile_module(module, "fib", cache_dir=tmp_path, threads=2).wait()
    serial = compile_module(module, "fib", cache_dir=tmp_path, threads=1).wait()
    assert len(list(tmp_path.glob("*.o"))) == 2
    assert team(20) == serial(20) == (10946,)


def test_object_cache_hit_gives_the_same_code(tmp_path):
    module = load_example("fib")
    cold = compile_module(module, "fib", cache_dir=tmp_path).wait()  # (stored)
    assert list(tmp_path.glob("*.o"))
    warm = compile_module(module, "fib", cache_dir=tmp_path)
    assert cold(20) == warm(20) == (10946,)
