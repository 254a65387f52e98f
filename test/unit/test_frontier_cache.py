"""A frontier function's cache hit runs no pass: its batched IR comes back
from a summary keyed by what the IR is made from (`frontier_summary.py`),
and computes bit for bit what the cold compile computes, close to the
recursive path; a changed input, a missing object or unreadable metadata
builds the IR again."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from test_invoke_to_frontier import trees

import recir
from recir import frontier_compile, frontier_gradients
from recir.autodiff import synthesize_gradients
from recir.backend.cache import entry_digest
from recir.backend.engine import openmp
from recir.models import td_tree_lstm, tree_lstm

TD_XS = np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
TD_DEPTHS = [0, 1, 3, 6, 2, 4]


def tree_case(hidden: int = 4):
    params = tree_lstm.init_params(np.random.default_rng(1), hidden=hidden, vocab=100)
    return tree_lstm.trace_model(params), [
        (t.left, t.right, t.word, t.label, t.root) for t in trees()]


def top_down_case():
    """TD-TreeLSTM: ops before the schedule, and a differentiated expansion."""
    params = td_tree_lstm.init_params(np.random.default_rng(3), hidden=4, inputs=4)
    return td_tree_lstm.trace_model(params), [(x, d) for x, d in zip(TD_XS, TD_DEPTHS)]


@pytest.fixture
def passes_run(monkeypatch) -> list[str]:
    """The pass lists the frontier path runs, and the entries synthesized."""
    runs: list[str] = []
    for module in (frontier_compile, frontier_gradients):
        original = module.run_passes

        def run_passes(ir, passes, *args, _original=original, **kwargs):
            runs.append(passes)
            return _original(ir, passes, *args, **kwargs)

        monkeypatch.setattr(module, "run_passes", run_passes)
    synthesize = synthesize_gradients.Synthesis.run

    def run(self):
        runs.append(f"synthesize {self.entry}")
        return synthesize(self)

    monkeypatch.setattr(synthesize_gradients.Synthesis, "run", run)
    return runs


def both(traced, cache_dir, threads=1):
    return (recir.compile(traced, batching="frontier", cache_dir=cache_dir, threads=threads),
            recir.value_and_grad(traced, batching="frontier", cache_dir=cache_dir,
                                 threads=threads))


def results(pair, batch):
    inference, gradient = pair
    return inference.batch(batch), gradient.batch(batch)


def assert_bit_equal(got, expected):
    (outs, (grad_outs, grads)), (outs0, (grad_outs0, grads0)) = got, expected
    for a, b in zip([*outs, *grad_outs], [*outs0, *grad_outs0], strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert grads.keys() == grads0.keys()
    for name in grads:
        np.testing.assert_array_equal(grads[name], grads0[name], err_msg=name)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A cache holding the small TreeLSTM's frontier entries, the functions
    compiled into it and their results."""
    directory = tmp_path_factory.mktemp("frontier-cache")
    traced, batch = tree_case()
    cold = both(traced, directory)
    return directory, traced, batch, cold, results(cold, batch)


@pytest.mark.parametrize("top_down", [False, True], ids=["tree_lstm", "td_tree_lstm"])
def test_a_hit_runs_no_pass_and_computes_the_same(tmp_path, passes_run, compiled, top_down):
    if top_down:
        traced, batch = top_down_case()
        cold = both(traced, tmp_path)
        expected = results(cold, batch)
        assert any("invoke-to-frontier" in p for p in passes_run)
        assert any(p.startswith("synthesize") for p in passes_run)
    else:
        directory, traced, batch, cold, expected = compiled
        shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    passes_run.clear()
    warm = both(traced, tmp_path)
    assert passes_run == []  # neither invoke-to-frontier nor the gradient's synthesis
    assert_bit_equal(results(warm, batch), expected)
    # what the runtime read off the IR, from the summary
    for w, c in zip(warm, cold):
        assert w.row_facts == c.row_facts
        assert w.native.loops.keys() == c.native.loops.keys()
        for name, loop in c.native.loops.items():
            assert getattr(w.native.loops[name], "spec", None) == getattr(loop, "spec", None)
    # close to the recursive path: outputs per item, gradients summed
    outs, (grad_outs, grads) = results(warm, batch)
    recursive = recir.value_and_grad(traced, engine="interpret")
    summed = {k: np.zeros_like(v) for k, v in grads.items()}
    for item, out, grad_out in zip(batch, outs, grad_outs, strict=True):
        reference, reference_grads = recursive(*item)
        for x, y, z in zip(out, grad_out, reference, strict=True):
            np.testing.assert_allclose(x, z, rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(x, y)
        for k, g in reference_grads.items():
            summed[k] += g
    for k, g in summed.items():
        np.testing.assert_allclose(grads[k], g, rtol=1e-3, atol=1e-5, err_msg=k)


def test_a_changed_traced_module_misses(tmp_path, passes_run):
    both(tree_case(4)[0], tmp_path)
    passes_run.clear()
    traced, batch = tree_case(5)
    warm = both(traced, tmp_path)
    assert sum("invoke-to-frontier" in p for p in passes_run) == 2
    outs, (grad_outs, _) = results(warm, batch)
    for item, out, grad_out in zip(batch, outs, grad_outs, strict=True):
        assert out[0].shape == (5,)
        np.testing.assert_allclose(out[0], traced.run(*item)[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out[0], grad_out[0])


def test_a_summary_whose_objects_are_not_cached_builds_the_ir(tmp_path, passes_run, compiled):
    """Another thread count (other objects), or objects gone: the summary is
    at hand but the functions must be compiled from their IR."""
    directory, traced, batch, _, expected = compiled
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    for path in tmp_path.glob("*.o"):
        if path.stat().st_size > 0:  # the objects, not the summaries
            path.unlink()
    passes_run.clear()
    assert_bit_equal(results(both(traced, tmp_path), batch), expected)
    assert sum("invoke-to-frontier" in p for p in passes_run) == 2
    passes_run.clear()
    both(traced, tmp_path)
    assert passes_run == []


@pytest.mark.skipif(openmp() is None, reason="no OpenMP runtime")
def test_another_thread_count_compiles_its_objects_from_the_ir(tmp_path, passes_run, compiled):
    """The summary does not depend on the threads; the objects do (their
    products' and heights' teams), so they are compiled from the IR."""
    directory, traced, batch, _, expected = compiled
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    passes_run.clear()
    two = both(traced, tmp_path, threads=2)
    assert sum("invoke-to-frontier" in p for p in passes_run) == 2
    (outs, (grad_outs, grads)), (outs1, (_, grads1)) = results(two, batch), expected
    for a, b, c in zip(outs, grad_outs, outs1, strict=True):
        for x, y, z in zip(a, b, c, strict=True):
            np.testing.assert_allclose(x, z, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(x, y)
    for name, g in grads1.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=1e-6, err_msg=name)


def garbled(meta: dict, how: str) -> dict:
    meta = json.loads(json.dumps(meta))
    if how == "types":
        meta["types"] = ["tensor<?x" for _ in meta["types"]]
    elif how == "facts":
        meta["facts"] = {name: [1, 2] for name in meta["facts"]}
    elif how == "missing":  # an entry written before a field existed
        del meta["entry"]
    else:
        meta["entry"]["returned"] = [10_000]
    return meta


@pytest.mark.parametrize("how", ["types", "facts", "missing", "entry"])
def test_a_summary_with_unreadable_metadata_is_rebuilt(tmp_path, passes_run, compiled, how):
    directory, traced, batch, _, expected = compiled
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    summaries = [p for p in tmp_path.glob("*.o") if p.stat().st_size == 0]
    assert len(summaries) == 2  # the inference's and the gradient's
    for path in summaries:
        record_path = path.with_suffix(".json")
        meta = garbled(json.loads(record_path.read_text())["meta"], how)
        record_path.write_text(json.dumps({"sha256": entry_digest(path.stem, b"", meta),
                                           "meta": meta}))
    passes_run.clear()
    assert_bit_equal(results(both(traced, tmp_path), batch), expected)
    assert sum("invoke-to-frontier" in p for p in passes_run) == 2
    passes_run.clear()
    both(traced, tmp_path)  # stored again, readable
    assert passes_run == []
