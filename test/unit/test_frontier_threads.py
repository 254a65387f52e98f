"""batching="frontier" on threads: each product over rows split across a
libgomp team (`passes/gemm_teams.team_function`) by blocks of C's rows and columns,
and each height's rows across one team per call (`passes/schedule_loops`).
The team form of each kernel against NumPy at shapes that split either way
(and stay on one thread); TreeRNN and TreeLSTM at threads=2 against
threads=1, NumPy and the interpreter (the batched IR, and the recursive
function), with a kept policy whose team start and barrier cost nothing:
then every product with two tiles of rows or columns runs on the team,
frontiers of one row included, and every call's heights split across it
(a gradient's too: each thread adds into its own copy of a dense parameter
gradient, embedding rows under row locks). A chain of elementwise ops over
many rows (split into blocks of rows on the team) gives the same bits on
two threads as on one."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import textwrap
import sys

import numpy as np
import pytest
from test_frontier_gradients import batched_gradients
from test_frontier_products import reference_grads
from test_invoke_to_frontier import tree_batch_args

import recir
from recir.backend import policy
from recir.backend.engine import openmp
from recir.backend.kernels import gemm
from recir.data.synthetic import make_treebank
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.models import tree_lstm, tree_rnn
from recir.pipeline import run_passes

HIDDEN = 19  # neither a multiple of a vector nor of a register tile (as test_frontier_products)

pytestmark = pytest.mark.skipif(openmp() is None, reason="no OpenMP runtime")


def run_team(layout: str, m: int, n: int, k: int, threads: int, accumulate: bool
             ) -> tuple[np.ndarray, np.ndarray]:
    """C from the team form (pads around it must stay NaN), and NumPy's."""
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a_shape = (k, m) if layout == "tn" else (m, k)
    b_shape = (n, k) if layout == "nt" else (k, n)
    a = rng.standard_normal((a_shape[0], a_shape[1] + 3)).astype(np.float32)[:, :a_shape[1]]
    b = rng.standard_normal((b_shape[0], b_shape[1] + 2)).astype(np.float32)[:, :b_shape[1]]
    op_a = a.T if layout == "tn" else a
    op_b = b.T if layout == "nt" else b
    start = rng.standard_normal((m, n)).astype(np.float32)
    c = np.full((m + 1, n + 4), np.nan, np.float32)
    c[:m, :n] = start
    want = op_a.astype(np.float64) @ op_b + (start if accumulate else 0)
    function = gemm.team_kernel(layout)
    function(m, n, k, a.ctypes.data, a.strides[0] // 4, b.ctypes.data, b.strides[0] // 4,
             c.ctypes.data, n + 4, int(accumulate), threads, 0)
    assert np.isnan(c[m:]).all(), "wrote below C"
    assert np.isnan(c[:, n:]).all(), "wrote right of C"
    return c[:m, :n], want


SHRINKING_TEAMS = """
import os
import numpy as np
from recir.backend.kernels import gemm
from recir.passes.gemm_target import host_target
from recir.passes.gemm_teams import grains

kernel, (rows, cols) = gemm.team_kernel("nt"), grains("nt", host_target())
def product(m, n, k=64):  # a team of min(4, its blocks of C)
    a, b = np.ones((m, k), np.float32), np.ones((n, k), np.float32)
    c = np.zeros((m, n), np.float32)
    kernel(m, n, k, a.ctypes.data, k, b.ctypes.data, k, c.ctypes.data, n, 0, 4, 0)
    assert (c == k).all()
threads = []
for _ in range(4):
    product(2 * rows, cols)  # two blocks
    product(4 * rows, cols)  # four
    threads.append(sorted(os.listdir("/proc/self/task")))
print(threads[1] == threads[-1])
"""


@pytest.mark.skipif(ctypes.util.find_library("gomp") is None, reason="no libgomp")
def test_a_product_with_few_blocks_keeps_libgomps_threads() -> None:
    """A team form starts all its threads (those without a block return):
    libgomp ends the pool threads a smaller team leaves out and creates new
    ones for the next larger team, a thread creation per product."""
    env = dict(os.environ, RECIR_OPENMP="libgomp.so.1")
    done = subprocess.run([sys.executable, "-c", SHRINKING_TEAMS], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_team_forms_split_rows_or_columns_and_match_numpy(layout):
    """Many rows split by rows, few rows and many columns by columns, and
    a product too small to split on one thread; accumulating too (dY^T X
    into a gradient); one thread count gives the same bits every call."""
    shapes = [(53, 7, 11), (1, 150, 9), (2, 70, 33), (3, 5, 4), (1, 1, 1), (64, 40, 0)]
    for m, n, k in shapes:
        for threads in (2, 3):
            for accumulate in (False, True):
                got, want = run_team(layout, m, n, k, threads, accumulate)
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k + 1),
                                           err_msg=f"{layout} {m}x{n}x{k} on {threads}")
        again, _ = run_team(layout, m, n, k, 2, True)
        np.testing.assert_array_equal(again, run_team(layout, m, n, k, 2, True)[0])


def free_teams(tmp_path) -> str:
    """A cache directory whose kept policy has a team start and a barrier
    of 0 s: every product that splits into two tiles runs on the team, and
    every call's heights split across it."""
    policy.save_tuned(policy.DEFAULT_TASK_S, 0.0, 1.0, tmp_path, warm_team_s=0.0)
    assert policy.team_min_work(2, policy.costs(tmp_path)) == 0
    return str(tmp_path)


def batch() -> list[Tree]:
    """A single leaf, linear trees (frontiers of one row) and random and
    balanced ones (frontiers of many rows)."""
    leaf = Tree(left=[-1], right=[-1], word=[7], label=[3])
    return [leaf, *make_treebank(2, "linear", num_leaves=9, seed=2),
            *make_treebank(6, seed=3), *make_treebank(2, "balanced", num_leaves=16, seed=4)]


def inputs(trees: list[Tree]) -> list[tuple]:
    return [(t.left, t.right, t.word, t.label, t.root) for t in trees]


def test_tree_rnn_inference_on_two_threads_matches_one_and_numpy(tmp_path):
    params = tree_rnn.init_params(np.random.default_rng(6), hidden=HIDDEN, vocab=100)
    traced = tree_rnn.trace_model(params)
    cache = free_teams(tmp_path)
    trees = batch()
    two = recir.compile(traced, batching="frontier", threads=2, cache_dir=cache)
    one = recir.compile(traced, batching="frontier", threads=1, cache_dir=cache)
    outs_two, outs_one = two.batch(inputs(trees)), one.batch(inputs(trees))
    again = two.batch(inputs(trees))
    for (h2, l2), (h1, l1), (h, _), tree in zip(outs_two, outs_one, again, trees, strict=True):
        np.testing.assert_array_equal(h2, h, err_msg="not deterministic")
        np.testing.assert_allclose(h2, h1, rtol=1e-5, atol=1e-6)
        assert l2 == pytest.approx(l1, rel=1e-5)
        h_ref, loss_ref = tree_rnn.reference(tree, len(tree.left) - 1, params)
        np.testing.assert_allclose(h2, h_ref, rtol=1e-4, atol=1e-5)
        assert l2 == pytest.approx(loss_ref, rel=1e-4)


# at 37, W's 2,738 floats: each thread's share of the copies' sum
# (`thread_copies`) is more than a vector loop's thousand elements, and odd
@pytest.mark.parametrize("hidden", [HIDDEN, 37])
def test_tree_rnn_gradients_on_two_threads_match_numpy(tmp_path, hidden):
    params = tree_rnn.init_params(np.random.default_rng(6), hidden=hidden, vocab=100)
    traced = tree_rnn.trace_model(params)
    trees = batch()
    grad = recir.value_and_grad(traced, batching="frontier", threads=2,
                                cache_dir=free_teams(tmp_path))
    outs, grads = grad.batch(inputs(trees))
    _, again = grad.batch(inputs(trees))
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    expected = {k: np.zeros_like(v) for k, v in p64.items()}
    for (h, _), tree in zip(outs, trees, strict=True):
        np.testing.assert_allclose(h, tree_rnn.reference(tree, len(tree.left) - 1, params)[0],
                                   rtol=1e-4, atol=1e-5)
        reference_grads(tree, p64, expected)
    for k, g in expected.items():
        # float32 sums of entries up to |g| ~ 20 at h=37: rounding scaled to them
        scale = max(1.0, float(np.abs(g).max()))
        np.testing.assert_allclose(grads[k], g, rtol=1e-3, atol=1e-4 * scale, err_msg=k)
        assert_repeats(k, grads[k], again[k])


def assert_repeats(name: str, got: np.ndarray, again: np.ndarray) -> None:
    """A dense gradient on a team is the same bits call after call (each
    thread's copy added in thread order); an embedding's rows are added
    under row locks in whichever order the threads come, so it is the same
    within rounding."""
    if name == "emb":
        np.testing.assert_allclose(got, again, rtol=1e-6, atol=1e-6, err_msg=name)
    else:
        np.testing.assert_array_equal(got, again, err_msg=f"{name}: not deterministic")


def recorded_teams(monkeypatch) -> list[tuple[str, int, bool]]:
    """Each height loop's (name, threads, by groups) as a call runs it: a
    `_fwd`'s as its schedule chose (its numbering call may run it), a
    `_bwd`'s as Python calls it, or as its `_fwd` ran where it followed that
    in the numbering call."""
    from recir.backend.native_backward import NativeBackward
    from recir.backend.native_loops import HeightLoop
    from recir.backend.native_schedule import NativeSchedule

    from test_repeat_call import schedule_only

    schedule_only(monkeypatch)  # (a repeated call runs none of them)
    teams: list[tuple[str, int, bool]] = []
    post, run, backward = NativeSchedule.post, HeightLoop.__call__, NativeBackward.backward

    def recorded_backward(self, *args):
        count = len(teams)
        found = backward(self, *args)
        if len(teams) == count:  # not called from Python
            teams.append((self.loop.native.name, self.s.team[0], self.s.team_groups is not None))
        return found

    monkeypatch.setattr(NativeBackward, "backward", recorded_backward)
    monkeypatch.setattr(NativeSchedule, "post", lambda self, children, stored, bounds, total,
                        post_fn=None: (post(self, children, stored, bounds, total, post_fn),
                                       teams.append(((post_fn or self.post_fn).sym_name.data,
                                                     self.team[0],
                                                     self.team_groups is not None)))[0])
    monkeypatch.setattr(HeightLoop, "__call__", lambda self, *args: (
        self.spec.reverse and teams.append((self.native.name, args[4], args[6] is not None)))
        or run(self, *args))
    return teams


def test_tree_lstm_on_two_threads_matches_the_interpreter_and_the_recursive_path(
        tmp_path, monkeypatch):
    """Outputs and every parameter gradient at threads=2 against the
    interpreter running the batched gradient IR (NumPy), and the outputs
    against the recursive function run tree by tree: with the heights' rows
    split by the trees' groups (`height_groups`, as the batch has them) and
    by blocks of each height's rows (groups off), the `_fwd` saving a dozen
    values per row each time, each thread's where its `_bwd` reads them."""
    from recir.backend import native_schedule

    params = tree_lstm.init_params(np.random.default_rng(2), hidden=HIDDEN, vocab=100)
    traced = tree_lstm.trace_model(params)
    trees = batch()
    grad = recir.value_and_grad(traced, batching="frontier", threads=2,
                                cache_dir=free_teams(tmp_path))
    module = traced.module.clone()
    run_passes(module, batched_gradients(5, "node", traced.entry))
    expected = {k: np.ones_like(v) for k, v in params.items()}
    h, losses, *_ = run_function(module, f"{traced.entry}__frontier_grad",
                                 [*tree_batch_args(trees, params), *expected.values()])
    teams = recorded_teams(monkeypatch)
    for by_groups in (True, False):
        if not by_groups:
            monkeypatch.setattr(native_schedule, "BY_GROUPS", False)
        into = {k: np.ones_like(v) for k, v in params.items()}  # added into
        outs, grads = grad.batch(inputs(trees), into)
        assert teams[-2:] == [("node__post_fwd", 2, by_groups), ("node__post_bwd", 2, by_groups)]
        assert sum(o.kind == "saved" for o in grad.native.loops["node__post_fwd"].outputs) > 10
        for k, item in enumerate(inputs(trees)):
            np.testing.assert_allclose(outs[k][0], h[k], rtol=1e-4, atol=1e-5)
            assert outs[k][1] == pytest.approx(losses[k], rel=1e-4)
            np.testing.assert_allclose(outs[k][0], traced.run(*item)[0], rtol=1e-4, atol=1e-5)
        for k, g in expected.items():
            np.testing.assert_allclose(grads[k], g, rtol=1e-3, atol=1e-4, err_msg=k)


@pytest.mark.parametrize("by_groups", [False, True])
def test_a_gradient_split_by_height_on_two_threads_adds_every_threads_rows(
        tmp_path, monkeypatch, by_groups):
    """The `_fwd`'s and `_bwd`'s heights on a team of two (the cost model's
    free start and barrier make it pay), each height's rows split, or each
    thread's own trees' rows (`height_groups`): every parameter gradient, added
    into buffers that hold ones, equals the same function's with its
    heights on the calling thread, so no thread's adds are lost (its dense
    copies summed, its embedding rows, which repeat across threads in a
    vocabulary of 12, added under locks), and the next call, whose copies
    start from zero again, gives them again; a word outside the vocabulary
    is an error on the team, not a hang, and the call after it is right."""
    from recir.backend import native_schedule
    from recir.backend.native_loops import HeightLoop

    if not by_groups:
        monkeypatch.setattr(native_schedule, "BY_GROUPS", False)
    params = tree_rnn.init_params(np.random.default_rng(4), hidden=HIDDEN, vocab=12)
    traced = tree_rnn.trace_model(params)
    trees = inputs(make_treebank(10, seed=7, vocab_size=12))
    grad = recir.value_and_grad(traced, batching="frontier", threads=2,
                                cache_dir=free_teams(tmp_path))
    teams = recorded_teams(monkeypatch)
    got = {k: np.ones_like(v) for k, v in params.items()}
    outs, _ = grad.batch(trees, got)
    _, again = grad.batch(trees)
    assert teams == [("node__post_fwd", 2, by_groups), ("node__post_bwd", 2, by_groups)] * 2
    # the heights on the calling thread: the policy in Python, its team refused
    monkeypatch.setattr(native_schedule.NativeSchedule, "policy", lambda self, *args: (None, None))
    monkeypatch.setattr(HeightLoop, "team_size", lambda self, *args: (1, 0))
    want = {k: np.ones_like(v) for k, v in params.items()}
    outs_one, _ = grad.batch(trees, want)
    assert teams[-2:] == [("node__post_fwd", 1, False), ("node__post_bwd", 1, False)]
    for (h, loss), (h1, loss1) in zip(outs, outs_one, strict=True):
        np.testing.assert_allclose(h, h1, rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(loss1, rel=1e-5)
    # a thread's rows added under locks in the order the threads come: float32
    # sums reordered, off by a few ulps of the largest term
    tolerance = {k: 2e-6 * max(1, np.abs(g).max()) for k, g in want.items()}
    for k, g in want.items():
        np.testing.assert_allclose(got[k], g, rtol=1e-5, atol=tolerance[k], err_msg=k)
        np.testing.assert_allclose(again[k] + 1, g, rtol=1e-5, atol=tolerance[k], err_msg=k)
    monkeypatch.undo()
    bad = Tree(left=[-1, -1, 0], right=[-1, -1, 1], word=[3, 99, 5], label=[0, 1, 2])
    with pytest.raises(RecirError, match="index 99 out of range for length 12"):  # on the team, no hang
        grad.batch([*trees, inputs([bad])[0]])
    _, after = grad.batch(trees)
    for k, g in want.items():
        np.testing.assert_allclose(after[k] + 1, g, rtol=1e-5, atol=tolerance[k], err_msg=k)


def test_a_gradients_heights_split_where_the_cost_model_says_so():
    """`HeightLoop.team_size` for a `_fwd` and its `_bwd`: the team, for
    the heights that give each thread a register tile of rows, where the
    rows moved off the calling thread save more than the starts, the
    barriers and the copies' sum; one thread for a batch too small to repay
    them, or whose gradient copies cost more to add up than the team saves."""
    from types import SimpleNamespace

    from recir.backend.native_loops import HeightLoop, row_tile
    from recir.backend.schedule_specs import HeightSpec
    from recir.passes.schedule_loops import COPIED, Operand

    costs = policy.Costs(unit_s=1e-10, task_s=1e-6, team_s=50e-6, share=1.0,
                         warm_team_s=2e-6)

    def loop(work: int, copy_bytes: int = 0) -> SimpleNamespace:
        inputs = [Operand(COPIED, copy_bytes)] if copy_bytes else []
        return SimpleNamespace(threads=2, spec=HeightSpec(inputs, [], False, 2, work, costs))

    wide = np.array([0, 4000, 6000, 7000], np.int64)  # three heights
    narrow = np.array([0, 2, 3], np.int64)
    thin = 2 * row_tile() - 1  # too few rows for a register tile on each thread
    tapering = np.array([0, 4000, 4000 + thin, 4001 + thin], np.int64)
    small = 4 * 1000
    assert HeightLoop.team_size(loop(10_000), wide, loop(20_000, small)) == (2, 3)
    assert HeightLoop.team_size(loop(10_000), tapering, loop(20_000, small)) == (2, 1)
    assert HeightLoop.team_size(loop(10_000), narrow, loop(20_000, small)) == (1, 0)
    big = 4 * policy.defer_outer_bytes()  # larger than L2: the team all the same
    assert HeightLoop.team_size(loop(10_000), wide, loop(20_000, big)) == (2, 3)
    huge = 4 * 300_000_000  # adding up its copies costs more than the moved rows save
    assert HeightLoop.team_size(loop(10_000), wide, loop(20_000, huge)) == (1, 0)
    assert HeightLoop.team_size(loop(10_000), wide) == (2, 3)  # inference: no copies


def test_a_team_starts_where_the_cost_model_says_it_pays():
    """`team_min_work` is `team_pays` without tasks solved for the work:
    below it one thread is faster; none where extra threads get too
    little of a core, or there is one thread."""
    costs = policy.Costs(unit_s=1e-10, task_s=1e-6, team_s=50e-6, share=1.0)
    least = policy.team_min_work(2, costs)
    assert policy.team_pays(1.01 * least, 2, costs, tasks=0)
    assert not policy.team_pays(0.99 * least, 2, costs, tasks=0)
    assert policy.team_min_work(16, costs) < least  # more threads repay a start sooner
    assert policy.team_min_work(1, costs) == -1
    assert policy.team_min_work(2, policy.Costs(1e-10, 1e-6, 50e-6, share=0.1)) == -1
    # a batched function's products follow each other while the workers spin
    warm = policy.team_min_work(2, costs, warm=True)
    assert warm == policy.team_min_work(2, policy.Costs(1e-10, 1e-6, costs.warm_team_s))
    assert 0 < warm < least


def test_tune_keeps_the_warm_team_start_beside_the_cold_one(tmp_path):
    kept = policy.save_tuned(1e-6, 40e-6, 1.0, tmp_path, warm_team_s=3e-6)
    assert (kept.team_s, kept.warm_team_s) == (40e-6, 3e-6)
    assert policy.costs(tmp_path).warm_team_s == 3e-6


def elementwise_cells(tanh, sigmoid):
    """A cell with no product: h = tanh(l * r + l) * sigmoid(r) - 0.5 * l,
    one fused elementwise chain over each frontier's rows."""
    def leaf(p, x):
        return (x,)

    def combine(p, ls, rs):
        left, right = ls[0], rs[0]
        return (tanh(left * right + left) * sigmoid(right) - left * 0.5,)

    return leaf, combine


def test_a_fused_chain_over_many_rows_gives_the_same_bits_on_two_threads(tmp_path):
    """Balanced trees give frontiers of many rows, whose chain runs on the
    team (a free team start); linear trees frontiers of one row, which stay
    serial. h comes from elementwise ops only: every thread count gives
    the same bits, and NumPy's values."""
    from recir import frontend as rf
    from recir.models.tree_common import reference_tree, trace_tree_model

    hidden = 37
    params = tree_rnn.init_params(np.random.default_rng(8), hidden=hidden, vocab=100)
    traced = trace_tree_model("chain", params, hidden, *elementwise_cells(rf.tanh, rf.sigmoid))
    cache = free_teams(tmp_path)
    trees = [*make_treebank(3, "balanced", num_leaves=64, seed=5),
             *make_treebank(2, "linear", num_leaves=7, seed=6)]
    two = recir.compile(traced, batching="frontier", threads=2, cache_dir=cache)
    one = recir.compile(traced, batching="frontier", threads=1, cache_dir=cache)

    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    for (h2, l2), (h1, l1), tree in zip(two.batch(inputs(trees)), one.batch(inputs(trees)),
                                        trees, strict=True):
        np.testing.assert_array_equal(h2, h1)
        assert l2 == pytest.approx(l1, rel=1e-5)
        h_ref, loss_ref = reference_tree(tree, len(tree.left) - 1, params,
                                         *elementwise_cells(np.tanh, sigmoid))
        np.testing.assert_allclose(h2, h_ref, rtol=1e-4, atol=1e-5)
        assert l2 == pytest.approx(loss_ref, rel=1e-4)


# two takes of one table, each read by a fused chain and a concatenation
GATHERED = """
func.func @gathered(%rows: tensor<?x8xf32>, %first: tensor<?xi32>, %second: tensor<?xi32>)
    -> (tensor<?x8xf32>, tensor<?x16xf32>) {
  %a = frontier.take %rows[%first] : tensor<?x8xf32>, tensor<?xi32>
  %b = frontier.take %rows[%second] : tensor<?x8xf32>, tensor<?xi32>
  %s = tmath.sigmoid %a : tensor<?x8xf32>
  %t = tmath.tanh %b : tensor<?x8xf32>
  %m = tmath.mul %s, %t : tensor<?x8xf32>
  %c = tmath.concat %a, %b : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x16xf32>
  func.return %m, %c : tensor<?x8xf32>, tensor<?x16xf32>
}
"""


def test_takes_read_in_place_by_loops_split_across_a_team(tmp_path):
    """A take read only by a fused chain or a concatenation is not copied on
    a team either: the outlined loop each thread runs reads its rows through
    the take's row numbers (`row_products.rows_functions`). Only the
    concatenation's two row copies are left, and the values are NumPy's
    (rows out of order and repeated), on the team (a free start) and alone."""
    from xdsl.dialects import func, llvm

    from recir.context import make_context
    from recir.frontier_compile import compile_rows
    from recir.parsing import parse_module
    from recir.pipeline import FUSE

    module = parse_module(make_context(), GATHERED)
    run_passes(module, f"{FUSE},convert-tmath-to-loops{{row-threads=2 row-team-work=0}}")
    moves = [op for op in module.walk() if isinstance(op, llvm.CallIntrinsicOp)
             and op.intrin.data.startswith("llvm.memmove")]
    assert len(moves) == 2, "a take copied"
    function = next(op for op in parse_module(make_context(), GATHERED).ops
                    if isinstance(op, func.FuncOp))
    native = compile_rows([([function], None)], free_teams(tmp_path), threads=2).functions[
        "gathered"]
    rng = np.random.default_rng(9)
    rows = rng.standard_normal((40, 8)).astype(np.float32)
    for count in (1, 300):  # alone, and on the team
        first = rng.integers(0, 40, count).astype(np.int32)
        second = first[::-1].copy()
        m, c = native([rows, first, second])
        want = 1 / (1 + np.exp(-rows[first])) * np.tanh(rows[second])
        np.testing.assert_allclose(m, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(c, np.concatenate([rows[first], rows[second]], axis=1))


TEAM_FIRST = '''
import sys
import numpy as np
from recir.context import make_context
from recir.frontier_compile import FrontierFunction
from recir.interpreter import run_function
from recir.parsing import parse_module
TEXT = """
func.func private @f__expand(%tree: tensor<?xi32>, %x: tensor<?xi32>, %b: tensor<4xf32>)
    -> (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) {
  %c0 = arith.constant 0 : i32
  %zeros = frontier.broadcast %c0, %tree : i32, tensor<?xi32> -> tensor<?xi32>
  %p = frontier.cmpi slt, %x, %zeros : tensor<?xi32>
  %none, %all = frontier.partition %p : tensor<?xi1> -> tensor<?xi32>, tensor<?xi32>
  %t = frontier.take %tree[%none] : tensor<?xi32>, tensor<?xi32>
  %y = frontier.take %x[%none] : tensor<?xi32>, tensor<?xi32>
  func.return %none, %t, %y, %x : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>
}
func.func private @f__post(%idx: tensor<?xi32>, %child: tensor<?xi32>, %res: tensor<?x4xf32>,
                           %b: tensor<4xf32>) -> (tensor<?x4xf32>) {
  %a = frontier.broadcast %b, %idx : tensor<4xf32>, tensor<?xi32> -> tensor<?x4xf32>
  %t = tmath.tanh %a : tensor<?x4xf32>
  func.return %t : tensor<?x4xf32>
}
func.func @main(%root: i32, %b: tensor<4xf32>) -> tensor<4xf32> {
  func.return %b : tensor<4xf32>
}
func.func @main__frontier(%root: tensor<?xi32>, %b: tensor<4xf32>) -> tensor<?x4xf32> {
  %h = frontier.schedule @f__expand, @f__post (%root) shared(%b) {sites = 1 : i64}
      : (tensor<?xi32>), (tensor<4xf32>) -> (tensor<?x4xf32>)
  func.return %h : tensor<?x4xf32>
}
"""
module = parse_module(make_context(), TEXT)
b = np.array([0.5, 1, 1.5, 2], np.float32)
(expected,) = run_function(module, "main__frontier", [np.zeros(1, np.int32), b])
f = FrontierFunction(module, "main", [b], sys.argv[1], threads=2)
print(np.allclose(f.batch([(0,)])[0][0], expected[0]))
'''


def test_a_two_thread_function_built_first_in_a_process_binds_openmp(tmp_path):
    """A `FrontierFunction` on two threads built before anything loaded the
    OpenMP runtime, its functions with no products (no kernel object that
    would load it): its team calls reach the runtime (they jumped to
    address 0, a segfault)."""
    done = subprocess.run([sys.executable, "-c", TEAM_FIRST, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


def test_code_that_calls_openmp_without_a_runtime_is_an_error(tmp_path):
    """The same with no OpenMP runtime to load: one error, not a crash."""
    env = dict(os.environ, RECIR_OPENMP="libno-such-openmp.so")
    done = subprocess.run([sys.executable, "-c", TEAM_FIRST, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "error: compiled code calls OpenMP, and no OpenMP runtime" in done.stderr


def test_a_runtime_named_that_does_not_load_is_named_at_the_users_line(tmp_path):
    """$RECIR_OPENMP naming no library that loads: the warning said no
    runtime was found at all (libomp was there), at a line inside recir."""
    script = textwrap.dedent("""
        import warnings
        import recir
        from recir.context import make_context
        from recir.parsing import parse_module
        module = parse_module(make_context(), open("examples/ir/fib.mlir").read())
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            f = recir.compile(module, "fib", threads=2)  # the user's line
        print(f(10)[0], seen[0].filename, seen[0].lineno, seen[0].message)
    """)
    env = dict(os.environ, RECIR_OPENMP="libno-such-openmp.so", RECIR_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("89 <string> 9 RECIR_OPENMP='libno-such-openmp.so' does "
                                   "not load as an OpenMP runtime with the GOMP ABI: running "
                                   "serially")


@pytest.mark.parametrize("by_groups", [False, True])
def test_each_threads_saved_rows_are_one_block_in_thread_order(tmp_path, monkeypatch,
                                                               by_groups):
    """On a team the `_fwd` puts each thread's saved rows of all its heights
    in one block of each saved value's buffer, thread 0's first, so that a
    thread writes about the same rows from call to call (`saved_cursor`):
    in `saved_at` each thread's rows of the heights the team splits follow
    its rows of the height before, and no thread's lie among another's.
    (`test_a_gradient_split_by_height_...` checks the gradients.)"""
    from recir.backend import native_schedule

    monkeypatch.setattr(native_schedule, "BY_GROUPS", by_groups)
    params = tree_lstm.init_params(np.random.default_rng(2), hidden=HIDDEN, vocab=100)
    grad = recir.value_and_grad(tree_lstm.trace_model(params), batching="frontier",
                                threads=2, cache_dir=free_teams(tmp_path))
    seen: list = []
    post = native_schedule.NativeSchedule.post
    monkeypatch.setattr(native_schedule.NativeSchedule, "post", lambda self, *args: (
        post(self, *args), seen.append((self.team, self.saved_at.copy())))[0])
    for _ in range(2):  # Python's loop, then the numbering call's
        grad.batch(inputs(batch()))
    for (threads, split), saved_at in seen:
        assert threads == 2 and split > 0
        saved_at = saved_at[:split]
        for value in range(saved_at.shape[2]):
            ends = []
            for t in range(threads):
                first, count = saved_at[:, t, value, 0], saved_at[:, t, value, 1]
                used = count > 0
                starts, stops = first[used], (first + count)[used]
                assert (starts[1:] >= stops[:-1]).all()  # in height order, none overlapping
                ends.append((starts.min(), stops.max()) if used.any() else None)
            blocks = [e for e in ends if e is not None]
            assert blocks == sorted(blocks) and all(
                a[1] <= b[0] for a, b in zip(blocks, blocks[1:]))
