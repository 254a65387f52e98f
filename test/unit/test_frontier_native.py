"""batching="frontier": invoke-to-frontier's batched IR compiled by the one
backend (convert-tmath-to-loops over rows) and run by the native schedule.
Each tree's outputs equal the interpreter running the same batched IR and
the recursive function compiled natively, tree by tree."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from test_cache_dir import kernels
from test_invoke_to_frontier import transformed, tree_batch_args, trees

import recir
from recir.data.trees import Tree
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn

TREE_MODELS = [tree_rnn, rntn, tree_lstm]


def tree_inputs(tree: Tree) -> tuple:
    return (tree.left, tree.right, tree.word, tree.label, tree.root)


@functools.cache
def compiled(model):
    """(traced, batched native, recursive native): compiled once per model."""
    kwargs = {"inputs": 4} if model is td_tree_lstm else {"vocab": 100}
    seed = 3 if model is td_tree_lstm else 0
    params = model.init_params(np.random.default_rng(seed), hidden=4, **kwargs)
    traced = model.trace_model(params)
    return (traced, recir.compile(traced, batching="frontier"),
            recir.compile(traced, threads=1))


@pytest.mark.parametrize("model", TREE_MODELS, ids=lambda m: m.__name__.split(".")[-1])
def test_tree_models_native_batched_matches_interpreter_and_recursive(model):
    traced, native, recursive = compiled(model)
    params = traced.params
    batch = trees()  # single leaves, linear, random and balanced trees
    outs = native.batch([tree_inputs(t) for t in batch])
    module = transformed(traced, 5)
    hs, losses = run_function(module, f"{traced.entry}__frontier",
                              tree_batch_args(batch, params))
    for k, tree in enumerate(batch):
        h, loss = outs[k]
        np.testing.assert_allclose(h, hs[k], rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(losses[k], rel=1e-5)
        h_native, loss_native = recursive(*tree_inputs(tree))
        np.testing.assert_allclose(h, h_native, rtol=1e-4, atol=1e-5)
        assert loss == pytest.approx(loss_native, rel=1e-4)


def test_top_down_tree_lstm_native_batched_matches():
    """The entry's ops before the schedule (tanh(W_in x)) run natively too."""
    traced, native, recursive = compiled(td_tree_lstm)
    params = traced.params
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((9, 4)).astype(np.float32)
    depths = np.array([0, 1, 3, 6, 6, 5, 2, 6, 4], np.int32)
    outs = native.batch([(xs[k], int(depths[k])) for k in range(len(xs))])
    module = transformed(traced, 2)
    counts, totals = run_function(module, "td_tree_lstm__frontier",
                                  [xs, depths, *params.values()])
    for k in range(len(xs)):
        count, total = outs[k]
        assert count == counts[k]
        assert total == pytest.approx(totals[k], rel=1e-5, abs=1e-6)
        count_native, total_native = recursive(xs[k], int(depths[k]))
        assert count == count_native
        assert total == pytest.approx(total_native, rel=1e-4, abs=1e-5)
    assert len({int(c) for c, _ in outs}) > 2


def test_a_child_index_out_of_its_tree_is_a_native_error():
    _, native, _ = compiled(tree_rnn)
    bad = Tree(left=[-1, -1, 0], right=[-1, -1, 9], word=[0, 1, 2], label=[0, 1, 2])
    with pytest.raises(RecirError, match=r"tree_common.py:\d+:\d+: error: 'frontier.extract_"
                       r"ragged' op index 9 out of range for length 3 \(at run time, in native @node__"):
        native.batch([tree_inputs(trees()[0]), tree_inputs(bad)])
    h, _ = native(*tree_inputs(trees()[0]))  # the function still works
    assert h.shape == (4,)


def test_scratch_too_small_is_grown_and_the_call_repeated():
    traced, native, _ = compiled(tree_lstm)
    functions = native.native.functions.values()
    kept = [f.per_row for f in functions]
    for function in functions:
        function.per_row, function.scratch = 1, function.scratch[:0]  # far too small
    batch = trees()
    try:
        outs = native.batch([tree_inputs(t) for t in batch])
    finally:
        for function, per_row in zip(functions, kept):
            function.per_row = per_row
    for k, tree in enumerate(batch):
        np.testing.assert_allclose(outs[k][0], traced.run(*tree_inputs(tree))[0],
                                   rtol=1e-5, atol=1e-6)


def test_parameters_are_read_on_every_call_and_checked_when_replaced():
    """A parameter's address is looked up once per array: an update in place
    is seen by the next call, and another array is checked again."""
    traced, native, _ = compiled(tree_rnn)
    tree = trees()[3]
    w = traced.params["w"]
    before = native.batch([tree_inputs(tree)])[0][0]
    kept = w.copy()
    w *= 0.5
    try:
        after = native.batch([tree_inputs(tree)])[0][0]
        expected = tree_rnn.reference(tree, tree.root, traced.params)[0]
    finally:
        w[...] = kept
    assert not np.allclose(after, before)
    np.testing.assert_allclose(after, expected, rtol=1e-4, atol=1e-5)
    # the expansion's loop checks the shared operands for every loop of a
    # call (`NativeSchedule.shared_fields`), @node__post's heights included
    loop = native.native.loops["node__expand"]
    known = loop.native.known  # the arrays whose addresses the calls reuse
    k = next(k for k, seen in enumerate(known) if seen is not None and seen[0] is w)
    with pytest.raises(RecirError, match=r"@node__expand takes an array of shape \(4, 8\)"):
        loop.described(k, np.zeros((3, 3), np.float32), [])



def test_a_frontier_entry_is_found_again_for_the_same_traced_ir_only(tmp_path):
    """The object cache keys a frontier function's two objects (its
    expansion's and the rest's) and its IR's summary by the traced IR they
    are made from:
    compiling it again loads them, another IR gets its own (the kernels
    kept beside them, keyed by the host, are the same)."""
    tree = trees()[3]

    def compiled_with(hidden: int):
        params = tree_rnn.init_params(np.random.default_rng(0), hidden=hidden, vocab=100)
        traced = tree_rnn.trace_model(params)
        native = recir.compile(traced, batching="frontier", cache_dir=tmp_path)
        got = native.batch([tree_inputs(tree)])[0][0]
        np.testing.assert_allclose(got, tree_rnn.reference(tree, tree.root, params)[0],
                                   rtol=1e-4, atol=1e-5)
        return sorted({p.stem for p in tmp_path.glob("*.o")} - kernels(tmp_path))

    first = compiled_with(4)
    assert len(first) == 3  # the expansion's object, the rest's, the IR's summary
    assert compiled_with(4) == first  # a hit: nothing compiled or written
    assert len(compiled_with(5)) == 6


def test_a_trees_size_read_in_the_recursion_matches_numpy():
    """`size` of a per-tree array inside the recursion: in the batched form a
    `frontier.size_ragged` (each row its own tree's length), natively. Each
    leaf adds the embedding row its tree's node count picks."""
    from recir import frontend as rf

    rng = np.random.default_rng(6)
    emb = rng.standard_normal((128, 3)).astype(np.float32)  # rows past the largest tree
    w = (0.5 * rng.standard_normal((3, 6))).astype(np.float32)
    with recir.trace("sized") as m:
        left, right, word = (m.input(n, recir.structure()) for n in ("left", "right", "word"))
        root = m.input("root", recir.i32)
        e, u = m.param("emb", emb), m.param("w", w)
        with recir.SubGraph("node", [recir.i32], [recir.vector(3)]) as node:
            (i,) = node.inputs
            node.output(recir.cond(
                left[i] < 0,
                lambda: rf.gather(e, word[i]) + rf.gather(e, rf.size(word)),
                lambda: rf.tanh(u @ rf.concat([node(left[i]), node(right[i])]))))
        m.output(node(root))
    traced = m.traced

    def reference(t: Tree, i: int) -> np.ndarray:
        if t.left[i] < 0:
            return emb[t.word[i]] + emb[len(t.word)]
        return np.tanh(w @ np.concatenate([reference(t, t.left[i]), reference(t, t.right[i])]))

    batch = trees()
    native = recir.compile(traced, batching="frontier")
    outs = native.batch([(t.left, t.right, t.word, t.root) for t in batch])
    for (h,), t in zip(outs, batch, strict=True):
        np.testing.assert_allclose(h, reference(t, t.root), rtol=1e-5, atol=1e-6)


LEAVES_ONLY = """
func.func private @f__expand(%tree: tensor<?xi32>, %x: tensor<?xi32>, %b: tensor<4xf32>)
    -> (tensor<?xi32>) {
  func.return %x : tensor<?xi32>
}
func.func private @f__post(%x: tensor<?xi32>, %res: tensor<?x4xf32>, %b: tensor<4xf32>)
    -> (tensor<?x4xf32>) {
  %xf = frontier.broadcast %b, %x : tensor<4xf32>, tensor<?xi32> -> tensor<?x4xf32>
  %t = tmath.tanh %xf : tensor<?x4xf32>
  func.return %t : tensor<?x4xf32>
}
func.func @main(%root: i32, %b: tensor<4xf32>) -> tensor<4xf32> {
  func.return %b : tensor<4xf32>
}
func.func @main__frontier(%root: tensor<?xi32>, %b: tensor<4xf32>) -> tensor<?x4xf32> {
  %h = frontier.schedule @f__expand, @f__post (%root) shared(%b) {sites = 0 : i64}
      : (tensor<?xi32>), (tensor<4xf32>) -> (tensor<?x4xf32>)
  func.return %h : tensor<?x4xf32>
}
"""


def test_a_schedule_with_no_child_sites_runs_alike_in_both_engines(tmp_path):
    """`sites = 0` (every invocation a leaf, as the verifier allows): the
    interpreter ran out of children to concatenate where native code ran."""
    from recir.context import make_context
    from recir.frontier_compile import FrontierFunction
    from recir.parsing import parse_module

    module = parse_module(make_context(), LEAVES_ONLY)
    b = np.array([0.5, 1, 1.5, 2], np.float32)
    roots = np.array([3, 1, 2], np.int32)
    (expected,) = run_function(module, "main__frontier", [roots, b])
    np.testing.assert_allclose(expected, np.tile(np.tanh(b), (3, 1)), rtol=1e-6)
    native = FrontierFunction(module, "main", [b], tmp_path)
    got = np.stack([out[0] for out in native.batch([(int(r),) for r in roots])])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
