"""value_and_grad(batching="frontier"): @f__post_bwd (from the one rules
table) compiled natively and run by the schedule backwards. The outputs and
the parameter gradients of a mixed batch equal the interpreter running the
same batched gradient IR (`@entry__frontier_grad`, NumPy), and the outputs
the recursive function's in the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from test_cache_dir import kernels
from test_frontier_gradients import batched_gradients
from test_invoke_to_frontier import tree_batch_args, trees

import recir
from recir.backend.cache import located_text
from recir.diagnostics import RecirError
from recir.frontier_compile import public_copies
from recir.interpreter import run_function
from recir.models import rntn, td_tree_lstm, tree_lstm
from recir.pipeline import run_passes


@pytest.mark.parametrize("model", [rntn, tree_lstm],  # TreeRNN: a subset of their ops
                         ids=lambda m: m.__name__.split(".")[-1])
def test_batched_gradients_equal_the_interpreted_ones(model):
    params = model.init_params(np.random.default_rng(1), hidden=4, vocab=100)
    traced = model.trace_model(params)
    batch = trees()  # single leaves, linear, random and balanced trees
    inputs = [(t.left, t.right, t.word, t.label, t.root) for t in batch]
    into = {k: np.ones_like(v) for k, v in params.items()}  # added into
    outs, grads = recir.value_and_grad(traced, batching="frontier").batch(inputs, into)
    assert grads is into

    module = traced.module.clone()
    run_passes(module, batched_gradients(5, "node", traced.entry))
    expected = {k: np.ones_like(v) for k, v in params.items()}
    h, losses, *_ = run_function(module, f"{traced.entry}__frontier_grad",
                                 [*tree_batch_args(batch, params), *expected.values()])
    for k, item in enumerate(inputs):
        np.testing.assert_allclose(outs[k][0], h[k], rtol=1e-5, atol=1e-6)
        assert outs[k][1] == pytest.approx(losses[k], rel=1e-5)
        assert outs[k][1] == pytest.approx(traced.run(*item)[1], rel=1e-4)
    for k, g in expected.items():
        assert np.abs(g - 1).max() > 0, k  # every parameter has a gradient
        np.testing.assert_allclose(grads[k], g, rtol=1e-4, atol=1e-5, err_msg=k)


def test_top_down_tree_lstm_gradients_run_the_expansion_and_the_prefix_backwards():
    """@grow__expand_bwd by depth, then the entry's own ops before the
    schedule (tanh(W_in x)) backwards: all native, equal to the interpreter."""
    params = td_tree_lstm.init_params(np.random.default_rng(3), hidden=4, inputs=4)
    traced = td_tree_lstm.trace_model(params)
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((9, 4)).astype(np.float32)
    depths = np.array([0, 1, 3, 6, 6, 5, 2, 6, 4], np.int32)
    native = recir.value_and_grad(traced, batching="frontier")
    outs, grads = native.batch([(xs[k], int(depths[k])) for k in range(len(xs))])

    module = traced.module.clone()
    run_passes(module, batched_gradients(2, "grow", "td_tree_lstm", top_down=True))
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    counts, totals = run_function(module, "td_tree_lstm__frontier_grad", [
        xs, depths, *params.values(), np.zeros_like(xs), *expected.values()])
    assert [int(c) for c, _ in outs] == counts.tolist()
    np.testing.assert_allclose([t for _, t in outs], totals, rtol=1e-5, atol=1e-6)
    assert np.abs(grads["w_in"]).max() > 0  # through the prefix
    for k, g in expected.items():
        np.testing.assert_allclose(grads[k], g, rtol=1e-4, atol=1e-5, err_msg=k)


def test_gradient_buffers_that_cannot_be_added_into_are_an_error():
    params = tree_lstm.init_params(np.random.default_rng(1), hidden=4, vocab=100)
    native = recir.value_and_grad(tree_lstm.trace_model(params), batching="frontier")
    into = {k: np.zeros_like(v) for k, v in params.items()}
    into["u"] = into["u"].astype(np.float64)
    tree = trees()[0]
    with pytest.raises(RecirError, match="'u' must be a C-contiguous float32 array of "
                       r"shape \(20, 8\)"):
        native.batch([(tree.left, tree.right, tree.word, tree.label, tree.root)], into)


@pytest.mark.parametrize("model", [tree_lstm, td_tree_lstm],
                         ids=lambda m: m.__name__.split(".")[-1])
def test_the_gradient_loads_the_expansion_the_inference_compiled(model, tmp_path):
    """A gradient's passes leave `@expand` as the inference has it (what
    the expansion's object is keyed by assumes), so the gradient compiled
    after the inference writes only its own objects."""
    params = model.init_params(np.random.default_rng(2), hidden=4)
    traced = model.trace_model(params)
    inference = recir.compile(traced, batching="frontier", cache_dir=tmp_path).wait()
    # an object per function (the expansion's among them) and the batched IR's
    # summary, beside the kernels they run
    written = {p.stem for p in tmp_path.glob("*.o")} - kernels(tmp_path)
    assert len(written) == len(inference.native.engines) + 1
    gradient = recir.value_and_grad(traced, batching="frontier", cache_dir=tmp_path).wait()
    # its own functions' objects and its summary: none for the expansion
    mine = {p.stem for p in tmp_path.glob("*.o")} - kernels(tmp_path) - written
    assert len(mine) == len(gradient.native.engines)
    expand = inference.schedule.expand.root_reference.data
    assert expand in gradient.native.functions
    assert (located_text(public_copies([gradient.native.callees[expand]]))
            == located_text(public_copies([inference.native.callees[expand]])))


@pytest.mark.parametrize("form", ["one thread", "team by heights", "team by groups",
                                  "heights in blocks"])
def test_each_call_finds_the_gradient_tables_zeroed_by_the_last_one(form, tmp_path,
                                                                     monkeypatch):
    """The `_bwd` zeroes each height's rows of the results' gradient tables
    once read (`CLEARED`), so the next call skips zeroing them: calls of
    growing, shrinking and repeated batches, each equal to a fresh
    function's gradients, with every row of the kept tables zero after
    each; on one thread, on a team (the cost model's free start makes it
    pay) splitting heights or by groups of trees, and with heights cut into
    blocks of two rows."""
    from test_frontier_threads import free_teams

    from recir.backend import kept_plans, native_loops, native_schedule

    threads = 2 if form.startswith("team") else 1
    cache = free_teams(tmp_path) if threads > 1 else None
    if form == "team by heights":
        monkeypatch.setattr(native_schedule, "BY_GROUPS", False)
    if form == "heights in blocks":
        monkeypatch.setattr(native_schedule, "block_rows", lambda threads, per_row: 2)
    params = tree_lstm.init_params(np.random.default_rng(2), hidden=4, vocab=100)
    traced = tree_lstm.trace_model(params)
    every = [(t.left, t.right, t.word, t.label, t.root) for t in trees()]
    kept = recir.value_and_grad(traced, batching="frontier", threads=threads, cache_dir=cache)
    seen: list[tuple[int, bool, int]] = []  # each _bwd's team, groups, heights
    run = native_loops.HeightLoop.__call__

    def recorded(self, bounds, *args):
        if self.spec.reverse:
            seen.append((args[3], args[5] is not None, len(bounds) - 1))
        return run(self, bounds, *args)

    for batch in (every[:3], every, every[1:4], every[:3]):  # more rows, then fewer
        monkeypatch.setattr(native_loops.HeightLoop, "__call__", recorded)
        outs, grads = kept.batch(batch, {k: np.zeros_like(v) for k, v in params.items()})
        monkeypatch.setattr(native_loops.HeightLoop, "__call__", run)
        fresh = recir.value_and_grad(traced, batching="frontier", threads=threads,
                                     cache_dir=cache)
        want_outs, want = fresh.batch(batch, {k: np.zeros_like(v) for k, v in params.items()})
        for k in params:
            np.testing.assert_allclose(grads[k], want[k], rtol=1e-5, atol=1e-7, err_msg=k)
        np.testing.assert_allclose([o[1] for o in outs], [o[1] for o in want_outs])
        layouts = next(loop for loop in kept.native.loops.values() if isinstance(
            loop, native_loops.HeightLoop) and loop.spec.reverse).layouts
        assert layouts[kept_plans.CLEAN] is layouts["tables"][1].arrays
        assert all(not a.any() for a in layouts["tables"][1].arrays)
    team, groups, heights = seen[1]  # the whole batch's call
    assert team == threads and groups == (form == "team by groups")
    if form == "heights in blocks":  # every block of at most two rows
        assert heights >= sum(len(t[0]) for t in every) / 2


@pytest.mark.parametrize("where", ["python", "numbering call"])
def test_a_call_after_a_bwd_stopped_midway_zeroes_its_tables_again(where, monkeypatch):
    """A `_bwd` stopped after writing into its gradient tables leaves them
    not known zeroed: the next call zeroes them and is right; whether Python
    called the `_bwd` or it followed the `_fwd` in the numbering call
    (`kernels/height_call`)."""
    from recir.backend import native_backward, native_loops
    from recir.backend.kernels.height_call import HeightCall

    params = tree_lstm.init_params(np.random.default_rng(2), hidden=4, vocab=100)
    traced = tree_lstm.trace_model(params)
    every = [(t.left, t.right, t.word, t.label, t.root) for t in trees()]

    def gradients(function):
        return function.batch(every, {k: np.zeros_like(v) for k, v in params.items()})[1]

    kept = recir.value_and_grad(traced, batching="frontier")
    gradients(kept)
    owner, name = (native_loops.HeightLoop, "__call__") if where == "python" else (
        HeightCall, "done")
    run = getattr(owner, name)

    def fails(self, *args, **kwargs):
        loop = self if where == "python" else self.loop
        if loop.spec.reverse:  # stopped after adding into some rows
            for table in loop.layouts["tables"][1].arrays:
                table.fill(1.0)
            raise RecirError("error: stopped")
        return run(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, fails)
    if where == "python":  # no `_bwd` after the `_fwd` in the numbering call
        monkeypatch.setattr(native_backward.NativeBackward, "ready", lambda *args: None)
    with pytest.raises(RecirError, match="stopped"):
        gradients(kept)
    monkeypatch.undo()
    got, want = gradients(kept), gradients(recir.value_and_grad(traced, batching="frontier"))
    for k in params:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7, err_msg=k)


@pytest.mark.parametrize("model", [rntn, tree_lstm], ids=lambda m: m.__name__.split(".")[-1])
def test_a_bwd_after_the_fwd_in_the_numbering_call_equals_the_interpreted_one(model,
                                                                              monkeypatch):
    """From a function's second call its `_bwd` follows the `_fwd` in the
    numbering call, the loss's cotangents placed at the roots natively
    (`kernels/height_call`); where its scratch is short there, Python runs
    it after. Both give the interpreter's gradients, added into `into`."""
    from recir.backend.array_address import data_address
    from recir.backend.kernels.height_call import RAN
    from recir.backend.native_backward import NativeBackward

    params = model.init_params(np.random.default_rng(3), hidden=4, vocab=100)
    traced = model.trace_model(params)
    batch = trees()
    inputs = [(t.left, t.right, t.word, t.label, t.root) for t in batch]
    module = traced.module.clone()
    run_passes(module, batched_gradients(5, "node", traced.entry))
    expected = {k: np.ones_like(v) for k, v in params.items()}
    run_function(module, f"{traced.entry}__frontier_grad",
                 [*tree_batch_args(batch, params), *expected.values()])
    from test_repeat_call import schedule_only

    schedule_only(monkeypatch)  # every call through the schedule, which this looks inside
    function = recir.value_and_grad(traced, batching="frontier")
    for _ in range(2):  # the loops' first call, from Python; the scratch grown
        function.batch(inputs)
    ran: list[bool] = []
    backward = NativeBackward.backward
    monkeypatch.setattr(NativeBackward, "backward", lambda self, *args: (
        ran.append(bool(self.following.plan[RAN])), backward(self, *args))[1])
    loop = function.native.loops["node__post_bwd"].native
    for short in (False, True, False):
        if short:  # its next call grows it, from Python
            loop.scratch = np.empty(8, np.uint8)
            loop.scratch_at = data_address(loop.scratch)
        into = {k: np.ones_like(v) for k, v in params.items()}
        grads = function.batch(inputs, into)[1]
        assert ran[-1] is not short
        for k, g in expected.items():
            np.testing.assert_allclose(grads[k], g, rtol=1e-4, atol=1e-6, err_msg=k)
