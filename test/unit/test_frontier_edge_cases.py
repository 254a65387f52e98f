"""Edge cases where `batching="frontier"` and `"auto"` must agree with the
interpreter and the recursive code: a ragged float input laid out for the
batched entry, called again on the last call's plans; `auto` given an empty
batch, a module, the settings only the recursive code honours, `wait()`."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType

import recir
from recir import auto_costs
from recir import frontend as rf
from recir.context import make_context
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import tree_rnn
from recir.parsing import parse_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"


def per_node_floats_model():
    """A tree whose leaves read a float per node (`tensor<?xf32>`, ragged)."""
    rng = np.random.default_rng(2)
    u = (0.5 * rng.standard_normal((3, 2))).astype(np.float32)
    w = (0.5 * rng.standard_normal((3, 6))).astype(np.float32)
    with recir.trace("per_node_floats") as m:
        left, right = (m.input(n, recir.structure()) for n in ("left", "right"))
        feats = m.input("feats", TensorType(recir.f32, [DYNAMIC_INDEX]))
        root = m.input("root", recir.i32)
        pu, pw = m.param("u", u), m.param("w", w)
        with recir.SubGraph("node", [recir.i32], [recir.vector(3), recir.f32]) as node:
            (i,) = node.inputs

            def leaf():
                v = rf.tanh(pu @ rf.fill(feats[i], [2]))
                return v, rf.sum(v * v)

            def inner():
                (hl, sl), (hr, sr) = node(left[i]), node(right[i])
                h = rf.tanh(pw @ rf.concat([hl, hr]))
                return h, sl + sr + rf.sum(h * h)

            node.output(*recir.cond(left[i] < 0, leaf, inner))
        m.output(*node(root))
    return m.traced


def test_a_ragged_float_input_keeps_its_values():
    """A per-tree f32 array went into the batched entry cast to int32
    (0.7 read as 0), a silently wrong result."""
    traced = per_node_floats_model()
    rng = np.random.default_rng(5)
    trees = make_treebank(4, seed=1)
    batch = [(t.left, t.right, rng.uniform(-2, 2, len(t.left)).astype(np.float32), t.root)
             for t in trees]
    batch[1] = (*batch[1][:2], batch[1][2].astype(np.float64), batch[1][3])  # converted alike
    f = recir.compile(traced, batching="frontier", threads=1)
    for _ in range(2):  # the first call through the schedule, the second repeated
        for (h, s), item in zip(f.batch(batch), batch, strict=True):
            want_h, want_s = traced.run(*item)
            np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
            assert s == pytest.approx(want_s, rel=1e-5)


def small_tree_rnn():
    return tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0), hidden=4))


def tree_args(tree) -> tuple:
    return (tree.left, tree.right, tree.word, tree.label, tree.root)


def test_auto_predicts_no_time_for_an_empty_batch():
    """`f.auto.seconds([])` divided the batch's nodes by its heights, both 0."""
    traced = small_tree_rnn()
    for f in (recir.compile(traced, batching="auto", threads=1),
              recir.value_and_grad(traced, batching="auto", threads=1)):
        assert f.auto.seconds([], 1, 1) == {"recursive": 0.0, "frontier": 0.0}
    batch = [tree_args(make_treebank(1, seed=0)[0])]
    assert set(f.auto.seconds(batch, 1, 1)) == {"recursive", "frontier"}


@pytest.mark.parametrize("batching", ["frontier", "auto"])
def test_a_module_is_refused_by_the_batched_modes_with_a_clear_error(batching):
    """`compile(module, entry=..., batching=...)` raised an AttributeError
    (a module has no inputs' names nor parameters)."""
    module = parse_module(make_context(), (EXAMPLES / "fib.mlir").read_text())
    assert recir.compile(module, "fib")(10) == (89,)  # the recursive code takes it
    message = f"batching='{batching}' takes a traced model"
    with pytest.raises(RecirError, match=message):
        recir.compile(module, "fib", batching=batching)
    with pytest.raises(RecirError, match=message):
        recir.value_and_grad(module, batching=batching)
    for gradient in (recir.value_and_grad, recir.grad):  # (the recursive mode's too)
        with pytest.raises(RecirError, match="gradients are taken of a traced model's "
                                             "parameters .* got a ModuleOp"):
            gradient(module)


@pytest.mark.parametrize("make", [recir.compile, recir.value_and_grad])
def test_auto_with_max_depth_bounds_every_batch(make, monkeypatch):
    """`auto` ran a batch it gave the frontier without the `max_depth`
    bound, which the recursive code (and a batch given to it) raised on."""
    monkeypatch.setattr(auto_costs.Estimate, "frontier", lambda self, *args: 0.0)
    traced = small_tree_rnn()
    batch = [tree_args(make_treebank(1, "linear", num_leaves=12, seed=1)[0])] * 3
    assert make(traced, batching="auto", threads=1).choose(batch) == "frontier"
    with pytest.raises(RecirError, match="recursion in @node is deeper than max_depth=5"):
        make(traced, batching="recursive", threads=1, max_depth=5).batch(batch)
    with pytest.raises(RecirError, match="recursion in @node is deeper than max_depth=5"):
        make(traced, batching="auto", threads=1, max_depth=5).batch(batch)


def test_auto_with_the_interpreter_interprets_every_batch(monkeypatch):
    """`value_and_grad(batching="auto", engine="interpret")` ran a batch it
    gave the frontier natively: the interpreter's error (and results) differ."""
    monkeypatch.setattr(auto_costs.Estimate, "frontier", lambda self, *args: 0.0)
    traced = small_tree_rnn()
    tree = make_treebank(1, seed=1)[0]
    word = tree.word.copy()
    word[0] = 100  # a leaf's (post-order): past the embedding's 100 rows
    batch = [(tree.left, tree.right, word, tree.label, tree.root)] * 2
    interpreted = recir.value_and_grad(traced, engine="interpret")
    message = r"'tmath.gather' op index 100 out of range for length 100"
    with pytest.raises(RecirError, match=message):
        interpreted.batch(batch)
    with pytest.raises(RecirError, match=message):
        recir.value_and_grad(traced, batching="auto", engine="interpret").batch(batch)


@pytest.mark.parametrize("make", [recir.compile, recir.value_and_grad])
def test_auto_wait_waits_for_the_frontiers_code(make, tmp_path):
    """`auto`'s `wait()` returned at once while LLVM still compiled its
    frontier form (the code it has compiled so far; the recursive code is
    compiled at a batch's first need of it)."""
    f = make(small_tree_rnn(), batching="auto", threads=1, cache_dir=tmp_path)
    assert f.wait() is f
    assert f.built is None and f.batched.made.done.is_set()


def test_a_gradient_with_a_float_input_of_open_size_is_refused_clearly():
    """A gradient is taken with respect to every float input, and none of
    open size has rules: an AttributeError natively, a ValueError ('negative
    dimensions') in the interpreter."""
    traced = per_node_floats_model()
    for engine in ("native", "interpret"):
        with pytest.raises(RecirError, match=r"^error: input 'feats' \(tensor<\?xf32>\) is a "
                                             "float tensor of no fixed size"):
            recir.value_and_grad(traced, engine=engine)


@pytest.mark.parametrize("code", ["ERROR_MEMORY", "ERROR_HEAP"])
def test_a_failed_allocation_is_named_so(code):
    """A batched function's log or buffer that could not be allocated said
    "failed with code 3" (or 6)."""
    from recir.backend.contexts import Context
    from recir.backend.frontier_schedule import NativeRowFunction
    from recir.diagnostics import RecirError
    from recir.passes import native_context

    function = object.__new__(NativeRowFunction)
    function.name, function.sites = "node__post_bwd", []
    ctx = Context()
    ctx.error = getattr(native_context, code)
    with pytest.raises(RecirError, match=r"^error: native @node__post_bwd ran out of memory$"):
        function.raise_error(ctx)


def test_a_float_input_read_in_the_recursion_has_frontier_gradients():
    """A per-tree float input read at inner nodes: the inner branch's rows of
    it take their cotangent back as rows, which no gradient keeps (the
    frontier refused it, naming `frontier.take`); the parameters' gradients
    equal the interpreter's on every batching and thread count."""
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=10)
    with recir.trace("shifted") as m:
        left, right, word, label = (m.input(n, recir.structure())
                                    for n in ("left", "right", "word", "label"))
        root, shift = m.input("root", recir.i32), m.input("shift", recir.vector(4))
        p = {k: m.param(k, v) for k, v in params.items()}
        with recir.SubGraph("node", [recir.i32], [recir.vector(4), recir.f32]) as node:
            (i,) = node.inputs

            def inner():
                (hl, loss_l), (hr, loss_r) = node(left[i]), node(right[i])
                return rf.tanh(p["w"] @ rf.concat([hl, hr]) + shift), loss_l + loss_r

            h, below = recir.cond(left[i] < 0, lambda: (rf.gather(p["emb"], word[i]), 0.0),
                                  inner)
            node.output(h, below + rf.softmax_xent(p["w_out"] @ h + p["b_out"], label[i]))
        m.output(*node(root))
    shift = np.linspace(-0.5, 0.5, 4).astype(np.float32)
    items = [(t.left, t.right, t.word, t.label, t.root, shift)
             for t in make_treebank(5, vocab_size=10, seed=3)]
    want_outputs, want = recir.value_and_grad(m.traced, engine="interpret").batch(items)
    for batching, threads in (("frontier", 1), ("frontier", 2), ("auto", 1)):
        _, grads = recir.value_and_grad(m.traced, batching=batching, threads=threads).batch(
            items)
        for name in params:
            np.testing.assert_allclose(grads[name], want[name], rtol=1e-4, atol=1e-5)
    batched = recir.compile(m.traced, batching="frontier", threads=1).batch(items)
    for got, ref in zip(batched, want_outputs, strict=True):
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-5)


@pytest.mark.parametrize("shape", [(6,), (2, 3)])
def test_a_parameter_carried_down_and_changed_gets_its_gradient(shape):
    """The root's share of a parameter passed to the root invoke, and changed
    on the way down, is summed by the batched prefix's `_bwd`, which takes
    f32 rows and computes none: it was lowered as a static function, which
    read the rows' descriptor as their data (the gradient was its bytes)."""
    with recir.trace("carried") as m:
        nxt, root = m.input("nxt", recir.structure()), m.input("root", recir.i32)
        m0 = m.param("m0", (np.arange(6, dtype=np.float32) / 10).reshape(shape))
        typ = recir.vector(6) if len(shape) == 1 else recir.matrix(*shape)
        with recir.SubGraph("node", [recir.i32, typ], [recir.f32]) as node:
            i, carried = node.inputs
            node.output(recir.cond(nxt[i] < 0, lambda: rf.sum(carried),
                                   lambda: node(nxt[i], carried * 0.5)))
        m.output(node(root, m0))
    items = [(np.array([1, 2, -1], np.int32), 0), (np.array([-1], np.int32), 0)]
    want = recir.value_and_grad(m.traced, engine="interpret").batch(items)[1]["m0"]
    for threads in (1, 2):
        got = recir.value_and_grad(m.traced, batching="frontier", threads=threads).batch(items)
        np.testing.assert_allclose(got[1]["m0"], want, rtol=1e-6)  # 0.25 + 1 each


def test_an_f32_scalar_carried_down_and_changed_gets_its_gradient_through():
    """A carried f32 scalar's gradient rows are added row by row by a kernel
    over buffers: given each row's value, LLVM's translation raised a
    TypeError (a load from a float) when the gradient was built."""
    with recir.trace("carry") as m:
        x, limit = m.input("x", recir.vector(2)), m.input("limit", recir.i32)
        u = m.param("u", np.array([0.5, -0.3], np.float32))
        with recir.SubGraph("grow", [recir.vector(2), recir.f32, recir.i32], [recir.f32]) as grow:
            h, s, d = grow.inputs
            grow.output(recir.cond(d < limit, lambda: grow(h * u, s * 0.5, d + 1) + rf.sum(h),
                                   lambda: rf.sum(h) * s))
        m.output(grow(x, 1.0, 0))
    items = [(np.array([1.0, 2.0], np.float32), 3), (np.array([-1.0, 0.5], np.float32), 0)]
    want = recir.value_and_grad(m.traced, engine="interpret").batch(items)
    for batching in ("frontier", "auto"):
        got = recir.value_and_grad(m.traced, batching=batching, threads=1).batch(items)
        np.testing.assert_allclose(got[1]["u"], want[1]["u"], rtol=1e-5)
        np.testing.assert_allclose(np.array(got[0]), np.array(want[0]), rtol=1e-6)


def test_a_constant_passed_down_unchanged_is_refused_at_the_users_line():
    """The batched entry's prefix returns the schedule's operands over rows,
    tensors only: a literal passed to the root invoke and on unchanged (a
    depth limit) compiled, then every call failed naming recir's own
    function. `auto` runs the recursive code for it."""
    with recir.trace("limited") as m:
        x = m.input("x", recir.vector(2))
        u = m.param("u", np.array([0.5, -0.3], np.float32))
        with recir.SubGraph("grow", [recir.vector(2), recir.i32, recir.i32], [recir.f32]) as grow:
            h, limit, d = grow.inputs
            grow.output(recir.cond(d < limit, lambda: grow(h * u, limit, d + 1) + rf.sum(h),
                                   lambda: rf.sum(h)))
        m.output(grow(x, 3, 0))  # here
    line = next(k for k, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.endswith("m.output(grow(x, 3, 0))  # here"))
    where = rf"test_frontier_edge_cases.py:{line}:\d+: error: 'arith.constant' op passes a value"
    for build in (recir.compile, recir.value_and_grad):
        with pytest.raises(RecirError, match=where):
            build(m.traced, batching="frontier", threads=1)
    items = [(np.array([1.0, 2.0], np.float32),), (np.array([0.5, -1.0], np.float32),)]
    got = recir.compile(m.traced, batching="auto", threads=1).batch(items)
    assert [g[0] for g in got] == pytest.approx([m.traced.run(*i)[0] for i in items], rel=1e-6)


def test_a_second_invoke_of_the_recursion_from_the_entry_is_refused_at_its_line():
    """It was refused at the entry, naming recir's frontier.schedule, with no line."""
    with recir.trace("twice") as m:
        nxt, root = m.input("nxt", recir.structure()), m.input("root", recir.i32)
        v = m.param("v", np.array([0.5, 1.0], np.float32))
        with recir.SubGraph("step", [recir.i32], [recir.vector(2)]) as step:
            (i,) = step.inputs
            step.output(recir.cond(nxt[i] < 0, lambda: v, lambda: rf.tanh(step(nxt[i]))))
        first = step(root)
        m.output(first, step(root))  # again
    line = next(k for k, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.endswith("m.output(first, step(root))  # again"))
    with pytest.raises(RecirError, match=rf"test_frontier_edge_cases.py:{line}:\d+: error: "
                                         "'frontier.schedule' op invokes the recursion again"):
        recir.compile(m.traced, batching="frontier", threads=1)


def test_a_helper_subgraph_in_the_recursion_is_refused_with_what_to_do():
    """'supports self-recursion only: @grow invokes @cell' named a helper that
    does not recurse as if it did; a plain Python function batches."""
    with recir.trace("helped") as m:
        nxt, root = m.input("nxt", recir.structure()), m.input("root", recir.i32)
        w = m.param("w", np.eye(2, dtype=np.float32))
        with recir.SubGraph("cell", [recir.vector(2)], [recir.vector(2)]) as cell:
            (v,) = cell.inputs
            cell.output(rf.tanh(w @ v))
        with recir.SubGraph("grow", [recir.i32, recir.vector(2)], [recir.f32]) as grow:
            i, h = grow.inputs
            grow.output(recir.cond(nxt[i] < 0, lambda: rf.sum(h),
                                   lambda: grow(nxt[i], cell(h))))
        m.output(grow(root, rf.tanh(w @ rf.fill(1.0, [2]))))
    with pytest.raises(RecirError, match=r"@grow invokes @cell \(a helper subgraph: call it "
                                         "as a plain Python function instead\\)"):
        recir.compile(m.traced, batching="frontier", threads=1)


def data_dependent_cond_model(pick_child: bool):
    """A TreeRNN whose inner node branches on its children's scores: it picks
    one child's state (`pick_child`), or scales a state made before the cond
    differently in each branch."""
    rng = np.random.default_rng(5)
    with recir.trace("gated") as m:
        left, right, word = (m.input(n, recir.structure()) for n in ("left", "right", "word"))
        root = m.input("root", recir.i32)
        emb = m.param("emb", (rng.standard_normal((6, 4)) * 0.5).astype(np.float32))
        w = m.param("w", (rng.standard_normal((4, 4)) * 0.5).astype(np.float32))
        with recir.SubGraph("node", [recir.i32], [recir.vector(4), recir.f32]) as node:
            (i,) = node.inputs

            def inner():
                (hl, sl), (hr, sr) = node(left[i]), node(right[i])
                if pick_child:
                    h = rf.tanh(w @ recir.cond(sl > sr, lambda: hl, lambda: hr))
                else:
                    z = rf.tanh(w @ (hl + hr))
                    h = recir.cond(sl > sr, lambda: z * 2.0, lambda: z * z)
                return h, rf.sum(h)

            def leaf():
                e = rf.gather(emb, word[i])
                return e, rf.sum(e)

            node.output(*recir.cond(left[i] < 0, leaf, inner))
        m.output(*node(root))
    return m.traced


@pytest.mark.parametrize("pick_child", [True, False])
def test_frontier_gradients_flow_through_a_cond_on_the_childrens_results(pick_child):
    """A branch's rows of a value from before the cond (a child's state) take
    its cotangent back as rows (a merge with zeros for the other branch's
    rows); the frontier refused this, naming `frontier.take`."""
    model = data_dependent_cond_model(pick_child)
    items = [(t.left, t.right, t.word, t.root) for t in make_treebank(
        6, num_leaves=9, vocab_size=6, seed=3)]
    want = recir.value_and_grad(model, loss=1, engine="interpret").batch(items)
    for threads in (1, 2):
        got = recir.value_and_grad(model, loss=1, batching="frontier",
                                   threads=threads).batch(items)
        for (_, g), (_, r) in zip(got[0], want[0], strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-5)
        for name in ("emb", "w"):
            np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-4, atol=1e-6)


def test_an_op_after_the_recursion_in_the_entry_is_refused_at_its_line():
    """A root-only loss computed in the entry after the recursion returns:
    the frontier refuses it at the user's line, saying what to do; `auto`
    runs the recursive code for it."""
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=10)
    with recir.trace("root_loss") as m:
        left, right, word = (m.input(n, recir.structure()) for n in ("left", "right", "word"))
        root, label = m.input("root", recir.i32), m.input("label", recir.i32)
        p = {k: m.param(k, v) for k, v in params.items()}
        with recir.SubGraph("node", [recir.i32], [recir.vector(4)]) as node:
            (i,) = node.inputs
            node.output(recir.cond(left[i] < 0, lambda: rf.gather(p["emb"], word[i]),
                                   lambda: rf.tanh(p["w"] @ rf.concat([node(left[i]),
                                                                       node(right[i])]))))
        m.output(rf.softmax_xent(p["w_out"] @ node(root) + p["b_out"], label))  # root loss
    items = [(t.left, t.right, t.word, t.root, int(t.label[t.root]))
             for t in make_treebank(4, vocab_size=10, seed=2)]
    line = next(k for k, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.endswith("# root loss"))
    for make in (recir.compile, recir.value_and_grad):
        with pytest.raises(RecirError, match=rf"test_frontier_edge_cases.py:{line}:\d+: error: "
                                             r"'tmath.matvec' op follows the recursion in the "
                                             "entry.*compute it inside the recursive function"):
            make(m.traced, batching="frontier", threads=1).batch(items)
    _, grads = recir.value_and_grad(m.traced, batching="auto", threads=1).batch(items)
    _, want = recir.value_and_grad(m.traced, engine="interpret").batch(items)
    for name in params:
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("grad", [False, True])
def test_a_thread_with_a_small_stack_runs_frontier_calls(grad):
    """Native code finds no room under its stack limit (the stack's bottom
    plus a 2 MiB margin) on a thread started with a 256 KiB stack: every
    frontier call failed there with "failed with code 1". It now runs on the
    deep-stack worker, as the same thread's recursive calls do."""
    model = small_tree_rnn()
    items = [tree_args(t) for t in make_treebank(4, vocab_size=30, seed=4)]
    make = recir.value_and_grad if grad else recir.compile
    f = make(model, batching="frontier", threads=1)
    want = f.batch(items)
    found: dict = {}
    previous = threading.stack_size(256 << 10)
    try:
        thread = threading.Thread(target=lambda: found.update(got=f.batch(items)))
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    got = found["got"]
    if grad:
        for name in want[1]:
            np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-6)
        got, want = got[0], want[0]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g[0], w[0], rtol=1e-6)


def test_a_single_frontier_calls_error_names_no_batch_element():
    """`f(*inputs)` runs as a batch of one: its native error was run again
    alone to be named "(batch element 0)", which a single call has not."""
    items = [tree_args(t) for t in make_treebank(2, vocab_size=30, seed=4)]
    left, right, word, label, root = items[0]
    word = np.where(left < 0, 10**6, 0).astype(np.int32)  # (out of the embedding's range)
    for f in (recir.compile(small_tree_rnn(), batching="frontier", threads=1),
              recir.value_and_grad(small_tree_rnn(), batching="frontier", threads=1)):
        with pytest.raises(RecirError, match=r"index 1000000 out of range for length 100 \(at run time, in native "
                                             r"@node__post(_fwd)?\)$"):
            f(left, right, word, label, root)
        with pytest.raises(RecirError, match=r"\(batch element 1\)$"):
            f.batch([items[1], (left, right, word, label, root)])
