"""Tasks on libgomp: results identical for 1, 2 and N threads, errors still
reported, and a stress test of many random batches at the maximum count."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import recir
from recir.backend import policy
from recir.backend.contexts import NO_TASKS, lone_context
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


@pytest.fixture(autouse=True)
def every_call_on_a_team(monkeypatch):
    """These tests' models are small: without this, most of their calls would
    not pay for a team's start (`policy.team_pays`) and run without one. And
    every call spawns tasks as deep as the compiled budget, where the policy
    would spawn fewer levels for small trees: its own test lets it."""
    free_teams(monkeypatch)
    monkeypatch.setenv("RECIR_SPAWN_BUDGET", str(policy.max_budget(MAX_THREADS)))


def free_teams(monkeypatch) -> None:
    """Costs under which a team start is free: every call with work pays for one."""
    measured = policy.costs()
    monkeypatch.setattr(policy, "costs", lambda cache_dir=None: policy.Costs(
        measured.unit_s, measured.task_s, 0.0))


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


@pytest.mark.parametrize("module", [tree_rnn, rntn, tree_lstm])
def test_batch_of_trees_as_tasks_equals_one_call_each(module) -> None:
    """`NativeFunction.batch`: every tree a task of one team."""
    params = module.init_params(np.random.default_rng(0), hidden=16, vocab=100)
    model = module.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=MAX_THREADS)
    batch = [inputs(t) for t in make_treebank(23, vocab_size=100, seed=8)]
    for (h1, l1), (h, loss) in zip([serial(*b) for b in batch], parallel.batch(batch)):
        np.testing.assert_array_equal(h, h1)
        assert loss == l1


@pytest.mark.parametrize("order", ["largest first", "reversed", "rotated"])
def test_batch_results_follow_the_batch_whatever_the_spawn_order(monkeypatch, order) -> None:
    """Each call's record carries its own result rows: outputs and summed
    gradients are the same whichever order the calls are spawned in."""
    orders = {"largest first": policy.spawn_order,
              "reversed": lambda works, count: list(range(count))[::-1],
              "rotated": lambda works, count: [*range(3, count), *range(3)]}
    monkeypatch.setattr(policy, "spawn_order", orders[order])
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=16, vocab=100)
    model = tree_rnn.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    batch = [inputs(t) for t in make_treebank(9, vocab_size=100, seed=4)]
    serial = recir.compile(model, threads=1)
    got = recir.compile(model, threads=2).batch(batch)
    for (h1, l1), (h, loss) in zip([serial(*b) for b in batch], got, strict=True):
        np.testing.assert_array_equal(h, h1)
        assert loss == l1
    want_out, want = recir.value_and_grad(model, threads=1).batch(batch, threads=1)
    got_out, grads = recir.value_and_grad(model, threads=2).batch(batch, threads=2)
    assert [o[1] for o in got_out] == pytest.approx([o[1] for o in want_out], rel=1e-6)
    for name, value in want.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-4, atol=1e-6)


def test_a_teams_large_gradient_copies_add_up() -> None:
    """At h=37 W holds 2,738 floats: each thread's share of the copies' sum
    (`thread_copies`) is over a thousand elements, and odd. The two-thread
    gradients are the one-thread ones."""
    params = tree_rnn.init_params(np.random.default_rng(3), hidden=37, vocab=100)
    model = tree_rnn.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    batch = [inputs(t) for t in make_treebank(12, vocab_size=100, seed=5)]
    _, want = recir.value_and_grad(model, threads=1).batch(batch, threads=1)
    _, grads = recir.value_and_grad(model, threads=2).batch(batch, threads=2)
    for name, value in want.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("budget", [0, 1, 4])
def test_batch_with_calls_that_spawn_or_not(monkeypatch, budget) -> None:
    """A batch's calls spawn nothing at budget 0 (their contexts' budget is
    NO_TASKS: calls of like size balance a team by themselves), else within
    themselves as deep as the budget. Each gives the one-thread results."""
    monkeypatch.setenv("RECIR_SPAWN_BUDGET", str(budget))
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=16, vocab=100)
    model = tree_rnn.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=2)
    assert parallel.team
    assert parallel.fixed_budget == budget
    alike = [inputs(make_tree("balanced", 32, np.random.default_rng(s), 100)) for s in range(4)]
    dominant = [inputs(make_tree("balanced", 400, np.random.default_rng(9), 100)), *alike]
    for batch in (alike, dominant):
        got = parallel.batch(batch)
        kept = parallel.contexts.kept[2][-1].views[0]
        assert kept.spawn_budget == (budget or NO_TASKS)
        for (h1, l1), (h, loss) in zip([serial(*b) for b in batch], got, strict=True):
            np.testing.assert_array_equal(h, h1)
            assert loss == l1
    left, right, word, label, root = alike[2]
    alike[2] = (left, right, np.where(word >= 0, 999, word).astype(np.int32), label, root)
    with pytest.raises(RecirError, match="gather.*index 999 out of range for length 100"):
        parallel.batch(alike)


FIB_PAIR = """
func.func @fib_pair(%n: i32) -> (i32, i32) {
  invoke.subgraph @fib(%k: i32) -> i32 {
    %one = arith.constant 1 : i32
    %two = arith.constant 2 : i32
    %base = arith.cmpi sle, %k, %one : i32
    %r = scf.if %base -> (i32) {
      scf.yield %one : i32
    } else {
      %k1 = arith.subi %k, %one : i32
      %k2 = arith.subi %k, %two : i32
      %a = invoke.invoke @fib(%k1) : (i32) -> i32
      %b = invoke.invoke @fib(%k2) : (i32) -> i32
      %s = arith.addi %a, %b : i32
      scf.yield %s : i32
    }
    invoke.return %r : i32
  }
  %one = arith.constant 1 : i32
  %m = arith.subi %n, %one : i32
  %x = invoke.invoke @fib(%n) : (i32) -> i32
  %y = invoke.invoke @fib(%m) : (i32) -> i32
  func.return %x, %y : i32, i32
}
"""


def test_batch_of_calls_with_several_scalar_results() -> None:
    """Each call's scalar results come back through slots of its own."""
    module = parse_module(make_context(), FIB_PAIR, "fib_pair.mlir")
    serial = recir.compile(module, entry="fib_pair", threads=1)
    parallel = recir.compile(module, entry="fib_pair", threads=2)
    ns = [(n,) for n in (2, 9, 17, 5, 21, 12, 1)]
    expected = [serial(*n) for n in ns]
    assert expected[1] == (55, 34)
    assert parallel.batch(ns) == expected
    assert [parallel(*n) for n in ns] == expected


def test_errors_in_a_batch_are_reported() -> None:
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=10)
    f = recir.compile(tree_rnn.trace_model(params), threads=MAX_THREADS)
    trees = make_treebank(6, vocab_size=10, seed=4)
    batch = [inputs(t) for t in trees]
    word = trees[3].word.copy()
    word[word >= 0] = 99  # this tree's leaves read past the embedding table
    batch[3] = (trees[3].left, trees[3].right, word, trees[3].label, trees[3].root)
    with pytest.raises(RecirError, match="index 99 out of range for length 10"):
        f.batch(batch)
    assert len(f.batch(batch[:3])) == 3  # the team is fine afterwards


def test_batch_of_scalar_calls() -> None:
    reference, filename = CALLS["fib"]
    module = parse_module(make_context(), (EXAMPLES / filename).read_text(), filename)
    f = recir.compile(module, entry="fib", threads=MAX_THREADS)
    assert f.batch([(n,) for n in range(20)]) == [(reference(n),) for n in range(20)]


def test_batch_needs_one_set_of_gradient_buffers() -> None:
    model = small_model(tree_rnn, 2)
    g = recir.value_and_grad(model, threads=MAX_THREADS)
    trees = make_treebank(2, vocab_size=80, seed=3)
    own = [[np.zeros_like(v) for v in model.params.values()] for _ in trees]
    batch = [(*inputs(t), *model.params.values(), *acc) for t, acc in zip(trees, own)]
    with pytest.raises(RecirError, match="same gradient buffers"):
        g.native.batch(batch)


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
    with pytest.raises(RecirError, match="index 99 out of range for length 10"):
        f(tree.left, tree.right, word, tree.label, tree.root)


def test_calls_after_an_error_start_clean() -> None:
    """Team contexts are kept from one call to the next: after a call whose
    tasks failed (a stack limit raised, an error and a tape left behind),
    the next calls give the one-thread results, gradients too."""
    model = small_model(tree_rnn, 3)
    tree = make_tree("balanced", 16, np.random.default_rng(0), 80)
    bad = (tree.left, tree.right, np.where(tree.word >= 0, 999, tree.word).astype(np.int32),
           tree.label, tree.root)
    f1, f2 = recir.compile(model, threads=1), recir.compile(model, threads=2)
    g1, g2 = recir.value_and_grad(model, threads=1), recir.value_and_grad(model, threads=2)
    for _ in range(2):
        with pytest.raises(RecirError, match="index 999 out of range for length 80"):
            f2(*bad)
        with pytest.raises(RecirError, match="index 999 out of range for length 80"):
            g2(*bad)
        (h2, l2), grads2 = g2(*inputs(tree))
        (h1, l1), grads1 = g1(*inputs(tree))
        np.testing.assert_array_equal(f2(*inputs(tree))[0], f1(*inputs(tree))[0])
        np.testing.assert_allclose(h2, h1, rtol=1e-6)
        assert l2 == pytest.approx(l1, rel=1e-5)
        assert_grads_close(grads2, grads1)


def test_stress_random_batches_at_max_threads() -> None:
    params = tree_lstm.init_params(np.random.default_rng(5), hidden=8, embed=8, vocab=60)
    model = tree_lstm.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=MAX_THREADS)
    rng = np.random.default_rng(9)
    for seed in range(30):
        shape = ["balanced", "moderate", "linear"][seed % 3]
        tree = make_tree(shape, int(rng.integers(2, 80)), np.random.default_rng(seed), 60)
        h1, l1 = serial(*inputs(tree))
        h2, l2 = parallel(*inputs(tree))
        np.testing.assert_array_equal(h1, h2)
        assert l1 == l2


def test_stress_with_the_policy_choosing(monkeypatch) -> None:
    """Calls and batches of random trees at whatever team and budget the
    policy picks for their sizes (a team's start free, so that small trees
    take one): the one-thread results every time, and several budgets taken."""
    monkeypatch.delenv("RECIR_SPAWN_BUDGET")
    params = tree_lstm.init_params(np.random.default_rng(6), hidden=8, embed=8, vocab=60)
    model = tree_lstm.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=MAX_THREADS)
    # a task costs a quarter node's work: a piece carries 8 nodes, so budgets vary with the size
    cheap_tasks = policy.Costs(parallel.costs.unit_s,
                               parallel.call_work * parallel.costs.unit_s / 4, 0.0)
    parallel.costs = cheap_tasks
    rng = np.random.default_rng(10)
    budgets = set()

    def random_tree(seed: int):
        shape = ["balanced", "moderate", "linear"][seed % 3]
        return inputs(make_tree(shape, int(rng.integers(2, 60)), np.random.default_rng(seed), 60))

    for seed in range(40):
        tree = random_tree(seed)
        budgets.add(policy.call_budget(parallel.size(tree) * parallel.call_work,
                                       MAX_THREADS, cheap_tasks))
        h2, l2 = parallel(*tree)
        h1, l1 = serial(*tree)
        np.testing.assert_array_equal(h1, h2)
        assert l1 == l2
    for seed in range(40):
        batch = [random_tree(100 * seed + k) for k in range(int(rng.integers(2, 7)))]
        for (h1, l1), (h2, l2) in zip([serial(*t) for t in batch], parallel.batch(batch),
                                      strict=True):
            np.testing.assert_array_equal(h1, h2)
            assert l1 == l2
    assert len(budgets) >= 3, budgets


def assert_grads_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Within 1e-5 of each gradient's largest entry: threads add in another order."""
    for name, value in want.items():
        scale = float(np.abs(value).max()) or 1.0
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5 * scale,
                                   err_msg=name)


def small_model(module, seed: int):
    params = module.init_params(np.random.default_rng(seed), hidden=12, vocab=80)
    return module.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})


@pytest.mark.parametrize("module", [tree_rnn, rntn, tree_lstm])
def test_gradients_within_a_tree_equal_serial(module) -> None:
    """Each tree's backward runs on MAX_THREADS threads: children's backward
    calls as tasks, dense gradients in per-thread copies, embedding rows under row locks."""
    model = small_model(module, 4)
    serial = recir.value_and_grad(model, threads=1)
    parallel = recir.value_and_grad(model, threads=MAX_THREADS)
    assert parallel.native.contexts.copied, "dense gradient buffers get per-thread copies"
    rng = np.random.default_rng(7)
    for seed in range(12):
        shape = ["balanced", "moderate", "linear"][seed % 3]
        tree = make_tree(shape, int(rng.integers(1, 90)), np.random.default_rng(seed), 80)
        (h1, l1), g1 = serial(*inputs(tree))
        (h2, l2), g2 = parallel(*inputs(tree))
        np.testing.assert_allclose(h2, h1, rtol=1e-6)
        assert l2 == pytest.approx(l1, rel=1e-5)
        assert_grads_close(g2, g1)


@pytest.mark.parametrize("module", [tree_rnn, tree_lstm], ids=lambda m: m.__name__)
def test_gradient_batch_of_calls_that_spawn_nothing(module, monkeypatch) -> None:
    """A gradient's entry reaches the spawning functions through its
    `_fwd`/`_bwd`, and has a serial entry all the same: at budget 0 a batch
    runs its trees as tasks that spawn nothing, adding into per-thread copies."""
    monkeypatch.setenv("RECIR_SPAWN_BUDGET", "0")
    model = small_model(module, 5)
    serial = recir.value_and_grad(model, threads=1)
    parallel = recir.value_and_grad(model, threads=2)
    alike = [inputs(make_tree("balanced", 24, np.random.default_rng(s), 80)) for s in range(6)]
    assert parallel.native.team != 0 and parallel.native.fixed_budget == 0
    outputs1, g1 = serial.batch(alike)
    outputs2, g2 = parallel.batch(alike, threads=2)
    for (h1, l1), (h2, l2) in zip(outputs1, outputs2, strict=True):
        np.testing.assert_allclose(h2, h1, rtol=1e-6)
        assert l2 == pytest.approx(l1, rel=1e-5)
    assert_grads_close(g2, g1)


def test_shared_embedding_rows_under_contention() -> None:
    """Every leaf of a batch of big trees reads one of two words: the
    threads add into the same two embedding rows at once (row locks)."""
    params = tree_rnn.init_params(np.random.default_rng(2), hidden=40, vocab=2)
    model = tree_rnn.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    trees = [make_tree(shape, 200, np.random.default_rng(s), 2)
             for s, shape in enumerate(["balanced", "moderate", "balanced", "linear"] * 3)]
    batch = [inputs(t) for t in trees]
    _, want = recir.value_and_grad(model, threads=1).batch(batch, threads=1)
    _, got = recir.value_and_grad(model, threads=MAX_THREADS).batch(batch)
    scale = float(np.abs(want["emb"]).max())
    assert np.abs(want["emb"]).min() > 0
    # ~2,400 leaves add into each row: float32 sums in another order moved it
    # by at most 5e-7 of the largest entry over 20 runs; a lost update ~4e-4
    np.testing.assert_allclose(got["emb"], want["emb"], rtol=0, atol=1e-4 * scale)


def test_td_tree_lstm_gradients_with_threads() -> None:
    """Cotangents returned by concurrent backward calls (the children's states)."""
    params = td_tree_lstm.init_params(np.random.default_rng(3), hidden=6, inputs=4)
    x = np.array([0.5, -0.2, 0.9, 0.1], np.float32)
    params["u_score"] = np.tanh(params["w_in"] @ x)
    model = td_tree_lstm.trace_model(params)
    (n1, t1), g1 = recir.value_and_grad(model, threads=1)(x, 7)
    (n2, t2), g2 = recir.value_and_grad(model, threads=MAX_THREADS)(x, 7)
    assert n1 == n2 and t2 == pytest.approx(t1, rel=1e-5)
    assert_grads_close(g2, g1)


@pytest.mark.parametrize("module", [tree_rnn, rntn, tree_lstm])
def test_stress_gradient_batches_at_max_threads(module) -> None:
    """Many random batches, across trees and within them, against one thread."""
    model = small_model(module, 4)
    serial = recir.value_and_grad(model, threads=1)
    parallel = recir.value_and_grad(model, threads=MAX_THREADS)
    rng = np.random.default_rng(6)
    for _ in range(8):
        trees = make_treebank(int(rng.integers(1, 30)), vocab_size=80,
                              seed=int(rng.integers(1 << 30)))
        batch = [inputs(t) for t in trees]
        serial_out, want = serial.batch(batch, threads=1)
        for threads in (2, MAX_THREADS):
            parallel_out, got = parallel.batch(batch, threads=threads)
            for a, b in zip(serial_out, parallel_out):
                assert b[-1] == pytest.approx(a[-1], rel=1e-5)
            assert_grads_close(got, want)


def test_deep_linear_tree_backward_on_worker_threads() -> None:
    """A task spawned near the root recurses through the rest of a deep
    linear tree on a libgomp worker: its stack must be as deep as the caller's."""
    model = small_model(tree_rnn, 1)
    tree = make_tree("linear", 20000, np.random.default_rng(0), 80)
    (_, l1), g1 = recir.value_and_grad(model, threads=1)(*inputs(tree))
    (_, l2), g2 = recir.value_and_grad(model, threads=MAX_THREADS)(*inputs(tree))
    assert l2 == pytest.approx(l1, rel=1e-4)
    assert_grads_close(g2, g1)


def test_accumulator_without_one_slot_is_a_located_error() -> None:
    """Two call sites pass different buffers to the same accumulating
    parameter: no per-thread copy can be named, so lowering refuses."""
    from recir.passes.convert_tmath_to_loops import ConvertTmathToLoopsPass

    text = """
func.func private @acc(%dw: tensor<3xf32>, %g: tensor<3xf32>) {
  adjoint.accumulate %dw, %g : tensor<3xf32>, tensor<3xf32>
  func.return
}
func.func @two(%a: tensor<3xf32>, %b: tensor<3xf32>, %g: tensor<3xf32>) {
  invoke.invoke @acc(%a, %g) concurrent : (tensor<3xf32>, tensor<3xf32>) -> ()
  invoke.invoke @acc(%b, %g) : (tensor<3xf32>, tensor<3xf32>) -> ()
  invoke.join : () -> ()
  func.return
}
"""
    module = parse_module(make_context(), text, "two.mlir")
    with pytest.raises(RecirError, match=r"two.mlir:3:3: .*adjoint.accumulate.*own copy"):
        ConvertTmathToLoopsPass().apply(make_context(), module)


MIXED_RUNTIMES = """
import ctypes, sys
ctypes.CDLL({first!r}, mode=ctypes.RTLD_GLOBAL)  # another runtime first, as torch brings
sys.path.insert(0, {root!r})
import numpy as np, recir
from recir.data import make_tree
from recir.models import tree_rnn
params = tree_rnn.init_params(np.random.default_rng(0), hidden=8, vocab=50)
model = tree_rnn.trace_model(params)
tree = make_tree("balanced", 64, np.random.default_rng(1), 50)
args = (tree.left, tree.right, tree.word, tree.label, tree.root)
(_, l1), g1 = recir.value_and_grad(model, threads=1)(*args)
(_, l2), g2 = recir.value_and_grad(model, threads=2)(*args)
assert abs(l1 - l2) <= 1e-5 * abs(l1), (l1, l2)
for k in g1:
    assert np.abs(g1[k] - g2[k]).max() <= 1e-5 * max(1.0, np.abs(g1[k]).max()), k
"""


@pytest.mark.parametrize(("first", "chosen"), [("libgomp.so.1", "libomp.so.5"),
                                               ("libomp.so.5", "libgomp.so.1")])
def test_tasks_ask_the_runtime_that_formed_their_team(tmp_path, first, chosen) -> None:
    """With one OpenMP runtime already in the process and $RECIR_OPENMP naming
    the other, generated code must bind to the one named (by name it found
    the first's omp_get_thread_num: every thread was 0, and shared one
    context). Both directions: libomp is the default where installed,
    libgomp elsewhere."""
    import ctypes
    import subprocess
    import sys

    try:
        ctypes.CDLL("libomp.so.5")
    except OSError:
        pytest.skip("LLVM's libomp (Debian package libomp5) is not installed")
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "RECIR_OPENMP": chosen, "RECIR_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", MIXED_RUNTIMES.format(root=root, first=first)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_team_inference_runs_deep_trees_and_reports_too_deep() -> None:
    """A team call runs on the caller's switched deep stack: a tree too deep
    for the caller's own 8 MiB (~10 KiB a level here) fits, one deeper than
    the switched stack is an error, not a crash."""
    params = tree_lstm.init_params(np.random.default_rng(1), vocab=50, hidden=256, embed=256)
    model = tree_lstm.trace_model(params)
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=2)
    tree = make_tree("linear", 5_000, np.random.default_rng(0), 50)
    np.testing.assert_array_equal(parallel(*inputs(tree))[0], serial(*inputs(tree))[0])
    with pytest.raises(RecirError, match="too deep for the native stack"):
        parallel(*inputs(make_tree("linear", 100_000, np.random.default_rng(0), 50)))


def test_too_deep_names_a_team_workers_own_stack(monkeypatch) -> None:
    """Where the runtime gives a team's workers a stack of another size
    (`configure_runtime(worker_stack_bytes=...)`), the error names it too:
    it quoted the caller's 1 GiB for an overflow on a 1 KiB worker."""
    from recir.backend import settings
    from recir.backend.contexts import Context
    from recir.passes.native_context import ERROR_STACK

    params = tree_lstm.init_params(np.random.default_rng(1), vocab=50, hidden=4, embed=4)
    parallel = recir.compile(tree_lstm.trace_model(params), threads=2)
    if not parallel.team:
        pytest.skip("no OpenMP runtime: no team")
    ctx = Context()
    ctx.error, ctx.site = ERROR_STACK, -1
    with pytest.raises(RecirError, match=r"too deep for the native stack \(\d+ MiB\)$"):
        parallel.raise_error(ctx)
    monkeypatch.setattr(settings, "current",
                        lambda: settings.RuntimeSettings(worker_stack_bytes=256 << 10))
    with pytest.raises(RecirError, match=r"\(\d+ MiB; a team worker's 256 KiB\)$"):
        parallel.raise_error(ctx)


def test_switched_stack_calls_a_native_function() -> None:
    """`SwitchedStack.call` runs libc's memset on the deep stack, then returns."""
    import ctypes

    from recir.backend.stack import switched_stack

    buffer = ctypes.create_string_buffer(64)
    memset = ctypes.cast(ctypes.CDLL(None).memset, ctypes.c_void_p).value
    switched_stack().call(memset, ctypes.addressof(buffer), 7, 48)
    assert buffer.raw == b"\x07" * 48 + b"\x00" * 16


def test_team_calls_without_ucontext_hand_over_to_the_deep_worker(monkeypatch) -> None:
    """Where libc has no makecontext (musl), team calls run on the deep-stack
    worker thread instead: same results."""
    from recir.backend import stack

    model = small_model(tree_rnn, 2)
    serial, grad1 = recir.compile(model, threads=1), recir.value_and_grad(model, threads=1)
    parallel, grad2 = recir.compile(model, threads=2), recir.value_and_grad(model, threads=2)
    monkeypatch.setattr(stack, "SWITCHING", False)
    for tree in make_treebank(5, vocab_size=80, seed=3):
        np.testing.assert_array_equal(parallel(*inputs(tree))[0], serial(*inputs(tree))[0])
        (_, l1), g1 = grad1(*inputs(tree))
        (_, l2), g2 = grad2(*inputs(tree))
        assert l2 == pytest.approx(l1, rel=1e-5)
        assert_grads_close(g2, g1)


def test_calls_below_the_work_cutoff_run_without_a_team(monkeypatch) -> None:
    """A call's estimated work (work per call x the tree's node count) picks a
    team or one thread; fib's scalar input gives no estimate: always a team.
    Results and gradients are the same either way."""
    monkeypatch.setattr(policy, "costs", lambda cache_dir=None: policy.Costs(1e-11, 1e-7, 15e-6))
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=150, vocab=100)
    model = tree_rnn.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    serial, parallel = recir.compile(model, threads=1), recir.compile(model, threads=2)
    small, big = (make_tree("balanced", n, np.random.default_rng(1), 100) for n in (8, 64))
    # a team pays from (15 us + 15 tasks' 0.75 us) / (1e-11 s x (1 - 1.125 / 2)) = ~3.6M
    # units; ~48k a node
    assert parallel.call_work * (2 * 8 - 1) < 3_600_000 < parallel.call_work * (2 * 64 - 1)
    assert parallel.team_size([inputs(small)]) == 1
    assert parallel.team_size([inputs(big)]) == 2
    assert parallel.team_size([inputs(small)] * 20) == 2  # a batch's trees add up
    assert lone_context(0).spawn_budget == NO_TASKS  # one thread: no tasks at all
    for tree in (small, big):
        np.testing.assert_array_equal(parallel(*inputs(tree))[0], serial(*inputs(tree))[0])
        (_, l1), g1 = recir.value_and_grad(model, threads=1)(*inputs(tree))
        (_, l2), g2 = recir.value_and_grad(model, threads=2)(*inputs(tree))
        assert l2 == pytest.approx(l1, rel=1e-5)
        assert_grads_close(g2, g1)
    module = parse_module(make_context(), (EXAMPLES / "fib.mlir").read_text(), "fib.mlir")
    fib = recir.compile(module, entry="fib", threads=2)
    assert fib.team_size([(20,)]) == 2 and fib(20) == (10946,)


def test_the_intel_openmp_wheel_is_found_in_the_environment(tmp_path, monkeypatch) -> None:
    """libiomp5 is looked for where its wheel installs it: `<prefix>/lib`."""
    from recir.backend import engine

    monkeypatch.setattr(engine.sys, "prefix", str(tmp_path))
    assert engine.openmp_libraries() == ("libomp.so.5", "libiomp5.so", "libgomp.so.1")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libiomp5.so").write_bytes(b"")
    assert engine.openmp_libraries() == (
        "libomp.so.5", str(tmp_path / "lib" / "libiomp5.so"), "libgomp.so.1")


def test_default_runtime_is_libomp_where_installed() -> None:
    """Without $RECIR_OPENMP the first of `openmp_libraries` that loads is used."""
    import ctypes

    from recir.backend.engine import openmp, openmp_libraries

    if os.environ.get("RECIR_OPENMP"):
        pytest.skip("$RECIR_OPENMP chooses the runtime")
    available = []
    for name in openmp_libraries():
        try:
            ctypes.CDLL(name)
            available.append(name)
        except OSError:
            continue
    library = openmp()
    assert (library._name if library is not None else None) == (
        available[0] if available else None)
