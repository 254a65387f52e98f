"""Static recursion (lower-invoke-to-call-return + the token engines) against
plain Python, the reference interpreter (the invoke path) and NumPy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recir import dataflow as rd
from recir.context import make_context
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.examples.programs import CALLS
from recir.interpreter import run_function
from recir.parsing import parse_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"


def parse(text: str, name: str = "<test>"):
    return parse_module(make_context(), text, name)


def example(filename: str):
    return parse((EXAMPLES / filename).read_text(), filename)


CASES = [
    ("fib", (0,)), ("fib", (1,)), ("fib", (2,)), ("fib", (11,)),
    ("ack", (0, 0)), ("ack", (1, 2)), ("ack", (2, 3)), ("ack", (3, 1)),
    ("tak", (3, 2, 1)), ("tak", (1, 2, 3)), ("tak", (8, 4, 2)), ("tak", (10, 6, 2)),
    ("thesis_primes", (0,)), ("thesis_primes", (1,)), ("thesis_primes", (2,)),
    ("thesis_primes", (7,)), ("thesis_primes", (40,)),
]


@pytest.mark.parametrize("engine", rd.ENGINES)
@pytest.mark.parametrize(("name", "args"), CASES)
def test_thesis_programs_match_python_and_the_invoke_path(name, args, engine):
    reference, filename = CALLS[name]
    module = example(filename)
    results, _ = rd.run(module, name, args, engine=engine)
    assert results == (reference(*args),)
    assert results == run_function(module, name, list(args))


def test_ack_3_3_gives_the_published_value():
    results, _ = rd.run(example("ackermann.mlir"), "ack", (3, 3))
    assert results == (61,)


def fib_calls(n: int) -> int:
    return 1 if n <= 1 else 1 + fib_calls(n - 1) + fib_calls(n - 2)


@pytest.mark.parametrize("n", [1, 5, 10])
def test_counters_count_calls_and_the_deepest_stack(n):
    graph = rd.compile(example("fib.mlir"), "fib")
    stats = {e: rd.run(graph, "fib", (n,), engine=e)[1] for e in rd.ENGINES}
    for s in stats.values():
        assert s.activations == fib_calls(n)
        # the root tag plus one per level of the deepest chain fib(n) .. fib(1)
        assert n <= s.peak_tags <= s.activations + 1
        assert s.tokens >= s.firings > s.activations
    # the static graph also fires the Returns that filter other sites' tokens
    assert stats["static"].firings > stats["dynamic"].firings
    assert not any(node.store for node in graph.nodes)  # no token left waiting


# A callee that never returns sits on the branch not taken: only deadness
# crossing the call (not entering the body) lets the graph finish; the
# nested ifs make every Switch and Join see dead tokens.
DEAD_BRANCHES = """
func.func private @forever(%x: i32) -> i32 {
  %r = invoke.invoke @forever(%x) : (i32) -> i32
  func.return %r : i32
}
func.func private @pick(%x: i32, %y: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %neg = arith.cmpi slt, %x, %zero : i32
  %r = scf.if %neg -> (i32) {
    %f = invoke.invoke @forever(%y) : (i32) -> i32
    %big = arith.cmpi sgt, %f, %y : i32
    %g = scf.if %big -> (i32) {
      %h = invoke.invoke @forever(%f) : (i32) -> i32
      scf.yield %h : i32
    } else {
      scf.yield %f : i32
    }
    scf.yield %g : i32
  } else {
    %one = arith.constant 1 : i32
    %x1 = arith.subi %x, %one : i32
    %done = arith.cmpi eq, %x, %zero : i32
    %s = scf.if %done -> (i32) {
      scf.yield %y : i32
    } else {
      %y1 = arith.addi %y, %x : i32
      %p = invoke.invoke @pick(%x1, %y1) : (i32, i32) -> i32
      scf.yield %p : i32
    }
    scf.yield %s : i32
  }
  func.return %r : i32
}
func.func @main(%x: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %r = invoke.invoke @pick(%x, %zero) : (i32, i32) -> i32
  func.return %r : i32
}
"""


@pytest.mark.parametrize("engine", rd.ENGINES)
def test_dead_tokens_cross_calls_so_switch_heavy_graphs_terminate(engine):
    module = parse(DEAD_BRANCHES)
    graph = rd.compile(module, "main")
    results, stats = rd.run(graph, "main", (30,), engine=engine)
    assert results == (sum(range(31)),) == run_function(module, "main", [30])
    assert stats.activations == 31  # @pick 31 times, @forever never
    assert not any(node.store for node in graph.nodes)


@pytest.mark.parametrize("engine", rd.ENGINES)
def test_tree_rnn_forward_is_identical_to_the_interpreter(engine):
    from recir.models import tree_rnn

    params = tree_rnn.init_params(np.random.default_rng(0), hidden=8, vocab=40)
    model = tree_rnn.trace_model(params)
    graph = rd.compile(model.module, model.entry)
    for tree in make_treebank(4, vocab_size=40, seed=3):
        inputs = [tree.left, tree.right, tree.word, tree.label, tree.root]
        (h, loss), stats = rd.run(graph, model.entry, [*inputs, *params.values()],
                                  engine=engine)
        ref_h, ref_loss = model.run(*inputs)
        assert np.array_equal(h, ref_h) and loss == ref_loss
        np_h, np_loss = tree_rnn.reference(tree, tree.root, params)
        np.testing.assert_allclose(h, np_h, rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(np_loss, rel=1e-5)
        assert stats.activations == len(tree.left)  # one call per node


def test_tree_lstm_two_results_match_the_interpreter():
    module = example("tree_lstm.mlir")
    rng = np.random.default_rng(1)
    left = np.array([1, -1, 3, -1, -1], dtype=np.int32)
    right = np.array([2, -1, 4, -1, -1], dtype=np.int32)
    word = np.array([0, 3, 0, 7, 9], dtype=np.int32)
    shapes = [(10, 3), (12, 3), (12,), (20, 8), (20,)]
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    args = [left, right, word, 0, *params]
    (h, c), _ = rd.run(module, "tree_lstm", args)
    ref_h, ref_c = run_function(module, "tree_lstm", args)
    assert np.array_equal(h, ref_h) and np.array_equal(c, ref_c)


def test_the_lowered_module_has_only_graphs():
    lowered = rd.lower(example("thesis_primes.mlir"))
    assert [op.name for op in lowered.ops] == ["dataflow.graph"]


def test_a_callee_without_arguments_is_a_located_error():
    module = parse("""
func.func private @k() -> i32 {
  %c = arith.constant 7 : i32
  func.return %c : i32
}
func.func @main(%x: i32) -> i32 {
  %r = invoke.invoke @k() : () -> i32
  func.return %r : i32
}""", "k.mlir")
    with pytest.raises(RecirError, match=r"k\.mlir:7:\d+: error: 'invoke.invoke' op "
                       "callee @k takes no arguments"):
        rd.lower(module)


def test_unsupported_ops_are_located_errors():
    module = parse("""
func.func private @g(%x: i32) -> i32 {
  func.return %x : i32
}
func.func @main(%x: i32) -> i32 {
  %r = func.call @g(%x) : (i32) -> i32
  func.return %r : i32
}""", "call.mlir")
    with pytest.raises(RecirError, match=r"call\.mlir:6:\d+: error: 'func.call' op is "
                       "not supported by the dataflow lowering"):
        rd.lower(module)


def test_unknown_graph_and_wrong_arity_are_errors():
    module = example("fib.mlir")
    with pytest.raises(RecirError, match="no dataflow.graph @nope"):
        rd.run(module, "nope", (1,))
    with pytest.raises(RecirError, match="@fib takes 1 arguments, got 2"):
        rd.run(module, "fib", (1, 2))


PUBLIC_CALLEE = """func.func @inc(%x: i32) -> i32 {
  %one = arith.constant 1 : i32
  %y = arith.addi %x, %one : i32
  func.return %y : i32
}
func.func @twice(%a: i32) -> i32 {
  %b = invoke.invoke @inc(%a) : (i32) -> i32
  %c = invoke.invoke @inc(%b) : (i32) -> i32
  func.return %c : i32
}
"""


@pytest.mark.parametrize("engine", rd.ENGINES)
def test_a_public_function_invoked_by_another_becomes_a_graph_of_each(engine):
    """Each public function's graph took its name before the next was built,
    whose invoke then found the graph: 'callee @inc is not a func.func'."""
    module = parse(PUBLIC_CALLEE)
    for name, args in (("twice", [5]), ("inc", [-2])):
        results, _ = rd.run(module, name, args, engine=engine)
        assert results == run_function(module, name, args) == (args[0] + 1 + (name == "twice"),)
