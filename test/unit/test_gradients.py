"""Gradients through recursion, against finite differences of float64 NumPy.

Every VJP rule is checked on a one-op model; the four models on small trees;
native gradients against the interpreter's; mutual recursion from IR text.
"""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.context import make_context
from recir.data import make_tree, make_treebank
from recir.diagnostics import RecirError
from recir.models import rntn, td_tree_lstm, tree_lstm, tree_rnn
from recir.parsing import parse_module

RNG = np.random.default_rng(7)


def numeric_grad(f, params: dict[str, np.ndarray], eps: float = 1e-6) -> dict[str, np.ndarray]:
    """Central differences of the float64 function `f(params)` -> float."""
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    grads = {}
    for name, value in p64.items():
        g = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            old = value[i]
            value[i] = old + eps
            up = f(p64)
            value[i] = old - eps
            down = f(p64)
            value[i] = old
            g[i] = (up - down) / (2 * eps)
        grads[name] = g
    return grads


def assert_grads_close(got, want, rtol=2e-3, atol=2e-5) -> None:
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol,
                                   err_msg=f"gradient of {name}")


def vec(n: int) -> np.ndarray:
    return (0.5 * RNG.standard_normal(n)).astype(np.float32)


# one model per rule: loss = sum(weights * op(inputs)); the NumPy twin in float64
def one_op(build, numpy_fn, params, out_shape):
    weights = vec(int(np.prod(out_shape))).reshape(out_shape)
    with recir.trace("one_op") as m:
        p = {k: m.param(k, v) for k, v in params.items()}
        y = build(p)
        out = rf.sum(y * rf.constant(weights)) if out_shape else y
        m.output(out)

    def loss(p64):
        y = numpy_fn(p64)
        return float((y * weights).sum()) if out_shape else float(y)

    return m.traced, loss


def sig(x):
    return 1 / (1 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


RULES = {
    "add": (lambda p: p["a"] + p["b"], lambda p: p["a"] + p["b"], (4,)),
    "sub": (lambda p: p["a"] - p["b"], lambda p: p["a"] - p["b"], (4,)),
    "mul": (lambda p: p["a"] * p["b"], lambda p: p["a"] * p["b"], (4,)),
    "div": (lambda p: p["a"] / rf.exp(p["b"]), lambda p: p["a"] / np.exp(p["b"]), (4,)),
    "neg+relu": (lambda p: rf.relu(-p["a"]) + p["b"], lambda p: np.maximum(-p["a"], 0) + p["b"],
                 (4,)),
    "sigmoid+tanh": (lambda p: rf.sigmoid(p["a"]) * rf.tanh(p["b"]),
                     lambda p: sig(p["a"]) * np.tanh(p["b"]), (4,)),
    "exp+log": (lambda p: rf.log(rf.exp(p["a"]) + rf.exp(p["b"])),
                lambda p: np.log(np.exp(p["a"]) + np.exp(p["b"])), (4,)),
    "matvec": (lambda p: p["w"] @ p["a"], lambda p: p["w"] @ p["a"], (3,)),
    "matmul": (lambda p: rf.matmul(p["w"], p["m"]), lambda p: p["w"] @ p["m"], (3, 2)),
    "bilinear": (lambda p: rf.bilinear(p["v"], p["a"], p["b"]),
                 lambda p: np.einsum("i,kij,j->k", p["a"], p["v"], p["b"]), (3,)),
    "concat+slice": (lambda p: rf.slice(rf.concat([p["a"], p["b"]]), 2, 5),
                     lambda p: np.concatenate([p["a"], p["b"]])[2:7], (5,)),
    "gather": (lambda p: rf.gather(p["w"], 2) * rf.gather(p["w"], 0),
               lambda p: p["w"][2] * p["w"][0], (4,)),
    "sum+fill+max": (lambda p: rf.fill(rf.sum(p["a"]) * rf.max(p["b"]), [3]),
                     lambda p: np.full(3, p["a"].sum() * p["b"].max()), (3,)),
    "softmax": (lambda p: rf.softmax(p["a"]), lambda p: softmax(p["a"]), (4,)),
    "scalar sub+mul+div": (  # arith.subf, mulf, divf on f32 scalars
        lambda p: rf.fill((rf.sum(p["a"]) - rf.sum(p["b"])) * rf.sum(p["a"])
                          / (rf.sum(p["b"] * p["b"]) + 1.0), [3]),
        lambda p: np.full(3, (p["a"].sum() - p["b"].sum()) * p["a"].sum()
                          / ((p["b"] * p["b"]).sum() + 1.0)), (3,)),
    "softmax_xent": (lambda p: rf.softmax_xent(p["a"], 1),
                     lambda p: -np.log(softmax(p["a"])[1]), ()),
}


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_against_finite_differences(name: str) -> None:
    params = {"a": vec(4), "b": vec(4), "w": vec(12).reshape(3, 4),
              "m": vec(8).reshape(4, 2), "v": vec(48).reshape(3, 4, 4)}
    build, numpy_fn, shape = RULES[name]
    model, loss = one_op(build, numpy_fn, params, shape)
    _, grads = recir.value_and_grad(model, engine="interpret")(*())
    assert_grads_close(grads, numeric_grad(loss, params))


def small_params(module, **sizes):
    params = module.init_params(np.random.default_rng(3), **sizes)
    return {k: (v * 0.6).astype(np.float32) for k, v in params.items()}


def small_trees(seed: int, count: int) -> list:
    """Trees of 1 to 12 leaves, every shape: enough for the interpreter as
    the oracle (it runs SST-length trees slowly)."""
    rng = np.random.default_rng(seed)
    shapes = [("moderate", 1), ("balanced", 2), ("linear", 4), ("moderate", 6),
              ("balanced", 8), ("moderate", 12)]
    return [make_tree(shape, leaves, rng, vocab_size=100)
            for shape, leaves in shapes[:count]]


TREE_MODELS = {
    "tree_rnn": (tree_rnn, {"hidden": 4, "vocab": 10, "classes": 3}),
    "rntn": (rntn, {"hidden": 3, "vocab": 10, "classes": 3}),
    "tree_lstm": (tree_lstm, {"hidden": 3, "embed": 3, "vocab": 10, "classes": 3}),
}


def tree_inputs(tree):
    return tree.left, tree.right, tree.word, tree.label, tree.root


@pytest.mark.parametrize("name", sorted(TREE_MODELS))
def test_tree_model_against_finite_differences(name: str) -> None:
    module, sizes = TREE_MODELS[name]
    params = small_params(module, **sizes)
    tree = make_tree("moderate", 4, np.random.default_rng(5), vocab_size=10)
    tree.label[:] = tree.label % sizes["classes"]
    model = module.trace_model(params)
    (h, loss), grads = recir.value_and_grad(model, engine="interpret")(*tree_inputs(tree))
    want = numeric_grad(lambda p: module.reference(tree, tree.root, p)[1], params)
    assert loss == pytest.approx(module.reference(tree, tree.root, params)[1], rel=1e-5)
    assert_grads_close(grads, want)


def test_td_tree_lstm_against_finite_differences() -> None:
    params = small_params(td_tree_lstm, hidden=3, inputs=2)
    x = np.array([0.3, -0.8], np.float32)
    params["u_score"] = np.tanh(params["w_in"] @ x)  # the root expands
    model = td_tree_lstm.trace_model(params)
    (count, total), grads = recir.value_and_grad(model, engine="interpret")(x, 3)
    ref_count, ref_total = td_tree_lstm.reference(x, 3, params)
    assert count == ref_count and count > 1
    want = numeric_grad(lambda p: td_tree_lstm.reference(x, 3, p)[1], params)
    assert_grads_close(grads, want)


@pytest.mark.parametrize("name", sorted(TREE_MODELS))
def test_native_gradients_equal_interpreter(name: str) -> None:
    module, sizes = TREE_MODELS[name]
    params = small_params(module, **{**sizes, "vocab": 100, "classes": 5})
    model = module.trace_model(params)
    native = recir.value_and_grad(model)
    interp = recir.value_and_grad(model, engine="interpret")
    for tree in small_trees(seed=2, count=5):
        (h1, l1), g1 = native(*tree_inputs(tree))
        (h2, l2), g2 = interp(*tree_inputs(tree))
        assert l1 == pytest.approx(l2, rel=1e-5)
        assert_grads_close(g1, g2, rtol=1e-5, atol=1e-6)
        assert native.last_tape_bytes > 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(TREE_MODELS))
def test_deferred_outer_products_equal_interpreter(name: str, threads: int,
                                                   monkeypatch) -> None:
    """Every weight's outer products logged per thread and added after the
    call (one SGEMM each) give the interpreter's gradients: single calls,
    and batches whose trees run side by side."""
    from recir import pipeline

    deferred = pipeline.INFERENCE.replace(
        f"defer-outer-bytes={pipeline.DEFER_OUTER_BYTES}", "defer-outer-bytes=0")
    assert deferred != pipeline.INFERENCE
    monkeypatch.setattr(pipeline, "INFERENCE", deferred)  # defer all of them
    module, sizes = TREE_MODELS[name]
    params = small_params(module, **{**sizes, "vocab": 100, "classes": 5})
    model = module.trace_model(params)
    native = recir.value_and_grad(model, threads=threads)
    assert native.native.logged  # the path under test
    interp = recir.value_and_grad(model, engine="interpret")
    trees = small_trees(seed=7, count=6)
    want = {k: np.zeros_like(v) for k, v in params.items()}
    for tree in trees:
        (_, l1), g1 = native(*tree_inputs(tree))
        (_, l2), g2 = interp(*tree_inputs(tree))
        assert l1 == pytest.approx(l2, rel=1e-5)
        assert_grads_close(g1, g2, rtol=1e-5, atol=1e-6)
        for k in want:
            want[k] += g2[k]
    _, total = native.batch([tree_inputs(t) for t in trees], threads=threads)
    assert_grads_close(total, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("rows", "cols"), [(5, 3), (40, 19)])
def test_outer_logs_are_added_into_their_buffer(threads: int, rows: int, cols: int) -> None:
    """Logs of records [dy | x] (one a thread, of 7, 0 and 12 records) add
    DY^T X into their buffer (`gemm.py`'s tn kernel, or on two threads the
    team form over every log, told a team pays at any size)."""
    from recir.backend.kernels.gemm import add_outer_logs

    rng = np.random.default_rng(9)
    logs = [rng.standard_normal((count, rows + cols), dtype=np.float32) for count in (7, 0, 12)]
    acc = rng.standard_normal((rows, cols), dtype=np.float32)
    want = acc.astype(np.float64) + sum(
        log[:, :rows].T.astype(np.float64) @ log[:, rows:] for log in logs)
    segments = np.array([(log.ctypes.data, rows + cols, log.ctypes.data + 4 * rows, rows + cols,
                          len(log)) for log in logs], np.int64)
    add_outer_logs(acc.ctypes.data, rows, cols, segments, threads,
                   0 if threads > 1 else -1)
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-5)


def test_native_td_tree_lstm_equals_interpreter() -> None:
    params = small_params(td_tree_lstm, hidden=6, inputs=4)
    x = np.array([0.5, -0.2, 0.9, 0.1], np.float32)
    params["u_score"] = np.tanh(params["w_in"] @ x)
    model = td_tree_lstm.trace_model(params)
    (n1, t1), g1 = recir.value_and_grad(model, threads=1)(x, 6)  # teams: test_parallel
    (n2, t2), g2 = recir.value_and_grad(model, engine="interpret")(x, 6)
    assert n1 == n2 and t1 == pytest.approx(t2, rel=1e-5)
    assert_grads_close(g1, g2, rtol=1e-5, atol=1e-6)


def test_into_accumulates_over_calls() -> None:
    params = small_params(tree_rnn, hidden=4, vocab=10, classes=5)
    vg = recir.value_and_grad(tree_rnn.trace_model(params))
    trees = make_treebank(3, vocab_size=10, seed=4)
    total = {k: np.zeros_like(v) for k, v in params.items()}
    for tree in trees:
        vg(*tree_inputs(tree), into=total)
    separate = [vg(*tree_inputs(t))[1] for t in trees]
    for name in params:
        np.testing.assert_allclose(total[name], sum(g[name] for g in separate), rtol=1e-5,
                                   atol=1e-7)
    with pytest.raises(RecirError, match="into"):
        vg(*tree_inputs(trees[0]), into={k: v.astype(np.float64) for k, v in total.items()})
    for array in total.values():
        array.flags.writeable = False  # (as a file mapped for reading is: writes would fault)
    with pytest.raises(RecirError, match="writable"):
        vg(*tree_inputs(trees[0]), into=total)
    with pytest.raises(RecirError, match="into: expected a dict of gradient buffers by "
                                         "parameter name, got list"):
        vg(*tree_inputs(trees[0]), into=list(total.values()))
    with pytest.raises(RecirError, match=r"^error: into: no gradient buffer for parameter "
                                         r"'emb' \(keys: w, b\)$"):
        vg(*tree_inputs(trees[0]), into={"w": total["w"], "b": total["b"]})
    with pytest.raises(RecirError, match=r"^error: into: gradient buffer 'emb' must be a "):
        vg(*tree_inputs(trees[0]), into={**total, "emb": None})  # (not "no buffer", keys: emb)
    with pytest.raises(RecirError, match=r"^error: into: 'W' names no parameter "
                                         r"\(parameters: emb, w, b"):
        fresh = {k: np.zeros_like(v) for k, v in params.items()}
        vg(*tree_inputs(trees[0]), into={**fresh, "W": fresh["w"]})  # (a typo: never filled)
    model = tree_rnn.trace_model(params)
    before = {k: v.copy() for k, v in model.params.items()}
    for batching in ("recursive", "frontier"):  # (both added the gradients into the weights)
        vg = recir.value_and_grad(model, batching=batching, threads=1)
        with pytest.raises(RecirError, match="into: gradient buffer 'emb' is the parameter"):
            vg(*tree_inputs(trees[0]), into=model.params)
        with pytest.raises(RecirError, match="into: gradient buffer 'w' is the parameter"):
            fresh = {k: np.zeros_like(v) for k, v in params.items()}
            vg(*tree_inputs(trees[0]), into={**fresh, "w": model.params["w"][:]})
    assert all((model.params[k] == before[k]).all() for k in before)


def test_a_failed_pool_batch_leaves_no_gradient_behind() -> None:
    """`batch(threads=2)` of a function compiled for one thread runs trees
    on pool workers with spare gradient buffers. When one tree failed, the
    batch raised while the other worker still added into its buffers, which
    went back to the spares dirty: every later batch's gradients were wrong.
    The batch raises the tree's own error, whichever worker it ran on."""
    params = small_params(tree_rnn, hidden=4, vocab=10, classes=5)
    vg = recir.value_and_grad(tree_rnn.trace_model(params), threads=1)
    good = [tree_inputs(t) for t in make_treebank(4, vocab_size=10, seed=4)]
    expected = vg.batch(good)[1]  # one thread: no pool
    bad = list(good[0])
    bad[2] = np.where(bad[2] >= 0, 10**6, -1).astype(np.int32)  # a word id out of range
    long = [tree_inputs(t) for t in make_treebank(6, "linear", num_leaves=3000,
                                                  vocab_size=10, seed=5)]
    for at in (0, 1):  # on the first worker, then the second (the first one's error)
        with pytest.raises(RecirError, match="'tmath.gather' op index 1000000 out of range for length 10 "):
            vg.batch([*long[:at], tuple(bad), *long[at:]], threads=2)
        got = vg.batch(good, threads=2)[1]
        for name in params:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)


def test_pool_batches_keep_their_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool batch on another thread count made a pool of new threads that
    never end, and dropped the old one: a training loop whose thread count
    varied leaked threads until none could start. The pool grows to the
    most threads a batch used; a thread that cannot start is a RecirError,
    and the pool's started threads serve the next batch."""
    import threading

    params = small_params(tree_rnn, hidden=4, vocab=10, classes=5)
    vg = recir.value_and_grad(tree_rnn.trace_model(params), threads=1)
    batch = [tree_inputs(t) for t in make_treebank(4, vocab_size=10, seed=4)]
    expected = vg.batch(batch)[1]
    vg.batch(batch, threads=3)
    running = set(threading.enumerate())
    for threads in (2, 3, 2, 3, 8, 100):  # (more threads than trees: one a tree)
        got = vg.batch(batch, threads=threads)[1]
        for name in params:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)
    assert len(vg.pool.workers) == 4
    # the deep-stack threads started since: the fourth tree's worker alone (the
    # process's thread count moves with other tests' threads ending)
    started = {t for t in set(threading.enumerate()) - running
               if t.name.startswith("recir-deep-worker")}
    assert started == {vg.pool.workers[3].thread}
    assert all(w.thread in running for w in vg.pool.workers[:3])

    def out_of_threads(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")  # what CPython raises then

    fresh = recir.value_and_grad(tree_rnn.trace_model(params), threads=1)
    assert fresh.pool.map(lambda w, item: item, [7], 1) == [7]  # its first worker started
    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", out_of_threads)
        with pytest.raises(RecirError, match="cannot start another thread .*ask for fewer"):
            fresh.batch(batch, threads=2)  # (the first worker ran its trees meanwhile)
    got = fresh.batch(batch, threads=2)[1]
    for name in params:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batching", ["recursive", "frontier", "auto"])
def test_loss_must_name_an_f32_output(batching) -> None:
    """loss=5 of two outputs wrapped around to output 1 (recursive), and
    loss=0, the hidden vector, was differentiated as its sum (frontier);
    `auto` refuses them before it compiles, not at its first batch."""
    model = tree_rnn.trace_model(small_params(tree_rnn, hidden=4, vocab=10, classes=5))
    for loss, message in [(5, r"result 5 is out of range: @tree_rnn has 2 results|"
                              r"output 5 of @tree_rnn is not a loss"),
                          (0, r"result 0 must be an f32 loss|output 0 of @tree_rnn is "
                              r"tensor<4xf32>, not an f32 loss"),
                          ("x", r"loss must be an integer, the index of an output, got 'x'"),
                          (1.0, r"loss must be an integer")]:
        with pytest.raises(RecirError, match=message):
            recir.value_and_grad(model, loss, batching=batching, threads=1)
    vg = recir.value_and_grad(model, np.int64(1), batching=batching, threads=1)  # NumPy's too
    inputs = tree_inputs(make_treebank(1, vocab_size=10, seed=4)[0])
    for threads in (0, -2, "2", True):
        with pytest.raises(RecirError, match="threads must be a positive integer"):
            vg.batch([inputs, inputs], threads=threads)
    outputs, _ = vg.batch([inputs], threads=np.int64(1))
    assert outputs[0][1] == pytest.approx(vg(*inputs)[0][1])


def test_wrong_input_count_names_the_model_inputs() -> None:
    """The native gradient entry also takes the parameters and their
    buffers; the error counts what the caller passes."""
    params = small_params(tree_rnn, hidden=4, vocab=10, classes=5)
    vg = recir.value_and_grad(tree_rnn.trace_model(params), threads=1)
    inputs = tree_inputs(make_treebank(1, vocab_size=10, seed=4)[0])
    with pytest.raises(RecirError, match=r"^error: @tree_rnn takes 5 inputs, got 4$"):
        vg(*inputs[:4])


def test_deep_linear_tree_gradient() -> None:
    params = small_params(tree_rnn, hidden=4, vocab=10, classes=5)
    tree = make_tree("linear", 3000, np.random.default_rng(0), vocab_size=10)
    vg = recir.value_and_grad(tree_rnn.trace_model(params))
    (_, loss), grads = vg(*tree_inputs(tree))
    assert np.isfinite(loss) and all(np.isfinite(g).all() for g in grads.values())


def test_one_thread_gradient_on_switched_stack_equals_deep_worker(monkeypatch) -> None:
    """A one-thread gradient call starts its packed entry on the caller's
    switched deep stack (no hand-over to the deep-stack worker); a tree too
    deep for the caller's own stack works, as on the worker."""
    from recir.backend import stack

    params = small_params(tree_rnn, hidden=4, vocab=10, classes=5)
    tree = make_tree("linear", 60_000, np.random.default_rng(1), vocab_size=10)
    vg = recir.value_and_grad(tree_rnn.trace_model(params), threads=1)
    assert vg.native.packed, "one-thread gradient code has a packed entry"
    (_, loss), grads = vg(*tree_inputs(tree))
    monkeypatch.setattr(stack, "SWITCHING", False)  # as without glibc's ucontext
    (_, loss_worker), grads_worker = vg(*tree_inputs(tree))
    assert loss == loss_worker
    for name, g in grads.items():
        np.testing.assert_array_equal(g, grads_worker[name], err_msg=name)


MUTUAL = """
func.func @chain(%n: i32, %h: tensor<3xf32>, %w: tensor<3x3xf32>, %u: tensor<3x3xf32>) -> f32 {
  %r = invoke.invoke @even(%n, %h, %w, %u) : (i32, tensor<3xf32>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3xf32>
  %s = tmath.sum %r : tensor<3xf32> -> f32
  func.return %s : f32
}
func.func private @even(%n: i32, %h: tensor<3xf32>, %w: tensor<3x3xf32>, %u: tensor<3x3xf32>) -> tensor<3xf32> {
  %zero = arith.constant 0 : i32
  %done = arith.cmpi sle, %n, %zero : i32
  %r = scf.if %done -> (tensor<3xf32>) {
    scf.yield %h : tensor<3xf32>
  } else {
    %wh = tmath.matvec %w, %h : tensor<3x3xf32>, tensor<3xf32> -> tensor<3xf32>
    %t = tmath.tanh %wh : tensor<3xf32>
    %one = arith.constant 1 : i32
    %m = arith.subi %n, %one : i32
    %o = invoke.invoke @odd(%m, %t, %w, %u) : (i32, tensor<3xf32>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3xf32>
    scf.yield %o : tensor<3xf32>
  }
  func.return %r : tensor<3xf32>
}
func.func private @odd(%n: i32, %h: tensor<3xf32>, %w: tensor<3x3xf32>, %u: tensor<3x3xf32>) -> tensor<3xf32> {
  %uh = tmath.matvec %u, %h : tensor<3x3xf32>, tensor<3xf32> -> tensor<3xf32>
  %s = tmath.sigmoid %uh : tensor<3xf32>
  %p = tmath.mul %s, %h : tensor<3xf32>
  %r = invoke.invoke @even(%n, %p, %w, %u) : (i32, tensor<3xf32>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3xf32>
  func.return %r : tensor<3xf32>
}
"""


def mutual_reference(n, h, p):
    while n > 0:
        h = np.tanh(p["w"] @ h)
        h = sig(p["u"] @ h) * h
        n -= 1
    return float(h.sum())


@pytest.mark.parametrize("engine", ["interpret", "native"])
def test_mutual_recursion_from_ir(engine: str) -> None:
    module = parse_module(make_context(), MUTUAL, "mutual.mlir")
    params = {"w": vec(9).reshape(3, 3), "u": vec(9).reshape(3, 3)}
    h = vec(3)
    model = recir.TracedModel(module, "chain", ["n", "h"], params)
    (value,), grads = recir.value_and_grad(model, engine=engine)(4, h)
    assert value == pytest.approx(mutual_reference(4, h.astype(np.float64), params), rel=1e-5)
    want = numeric_grad(lambda p: mutual_reference(4, h.astype(np.float64), p), params)
    assert_grads_close(grads, want)


def test_op_without_rule_is_a_located_error() -> None:
    text = """
func.func @f(%w: tensor<2xf32>) -> f32 {
  %s = tmath.sum %w : tensor<2xf32> -> f32
  %d = arith.extf %s : f32 to f64
  %m = arith.truncf %d : f64 to f32
  func.return %m : f32
}
"""
    model = recir.TracedModel(parse_module(make_context(), text, "norule.mlir"), "f", [],
                              {"w": vec(2)})
    with pytest.raises(RecirError, match=r"norule.mlir:5:\d+: error: 'arith.truncf' op "
                       "has no gradient rule"):
        recir.value_and_grad(model, engine="interpret")
