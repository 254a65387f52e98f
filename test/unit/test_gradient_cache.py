"""A gradient's object-cache entry is keyed by the traced module and the
passes that make the gradient from it: a hit synthesizes nothing and prints
nothing but the traced module, and computes what a cold compile and the
interpreter compute; a change to any input of the object misses."""

from __future__ import annotations

import json

import numpy as np
import pytest

import recir
from recir import pipeline
from recir.autodiff import synthesize_gradients
from recir.backend.cache import ObjectCache
from recir.context import make_context
from recir.data import make_tree
from recir.diagnostics import RecirError
from recir.models import tree_rnn
from recir.parsing import parse_module

TREES = [make_tree(shape, leaves, np.random.default_rng(4), vocab_size=10)
         for shape, leaves in [("moderate", 1), ("balanced", 4), ("linear", 5)]]


def small_model(hidden: int = 3):
    params = tree_rnn.init_params(np.random.default_rng(3), hidden=hidden, vocab=10, classes=3)
    return tree_rnn.trace_model({k: (0.6 * v).astype(np.float32) for k, v in params.items()})


def inputs(tree):
    return tree.left, tree.right, tree.word, tree.label % 3, tree.root


@pytest.fixture
def synthesized(monkeypatch) -> list[str]:
    """The entries `synthesize-gradients` runs for, as it runs them."""
    runs: list[str] = []
    original = synthesize_gradients.Synthesis.run

    def run(self):
        runs.append(self.entry)
        return original(self)

    monkeypatch.setattr(synthesize_gradients.Synthesis, "run", run)
    return runs


@pytest.fixture
def printed(monkeypatch) -> list:
    """The modules the compiler prints for cache keys."""
    modules: list = []
    original = pipeline.located_text

    def located_text(module):
        modules.append(module)
        return original(module)

    monkeypatch.setattr(pipeline, "located_text", located_text)
    return modules


def test_a_hit_synthesizes_nothing_and_computes_the_same(tmp_path, synthesized, printed):
    model = small_model()
    cold = recir.value_and_grad(model, cache_dir=tmp_path, threads=1).wait()  # stored
    assert synthesized == ["tree_rnn"]
    warm = recir.value_and_grad(model, cache_dir=tmp_path, threads=1)
    assert synthesized == ["tree_rnn"]  # not again
    assert all(m is model.module for m in printed)  # the traced module alone
    assert len(list(tmp_path.glob("*.o"))) == 1
    interpreted = recir.value_and_grad(model, engine="interpret")
    assert len(synthesized) == 2
    assert warm.wrt == cold.wrt == interpreted.wrt
    # what the runtime's schedule reads, from the entry's metadata
    assert (warm.native.call_work, warm.native.larger_share) == (
        cold.native.call_work, cold.native.larger_share)
    assert warm.native.arguments.inputs == cold.native.arguments.inputs
    for tree in TREES:
        (h1, l1), g1 = warm(*inputs(tree))
        (h2, l2), g2 = cold(*inputs(tree))
        (h3, l3), g3 = interpreted(*inputs(tree))
        assert l1 == l2 and l1 == pytest.approx(l3, rel=1e-5)
        np.testing.assert_array_equal(h1, h2)
        np.testing.assert_allclose(h1, h3, rtol=1e-5, atol=1e-6)
        for name in model.params:
            np.testing.assert_array_equal(g1[name], g2[name])
            np.testing.assert_allclose(g1[name], g3[name], rtol=1e-5, atol=1e-6,
                                       err_msg=f"gradient of {name}")
    # the module, for those who read it, is synthesized when asked for
    assert "tree_rnn_grad" in {f.sym_name.data for f in warm.module.ops}
    assert len(synthesized) == 3


@pytest.mark.parametrize("change", [
    pytest.param({"threads": 2}, id="threads"),
    pytest.param({"fuse": False}, id="pass-options"),
    pytest.param({"loss": 0}, id="loss"),
])
def test_a_changed_option_misses(tmp_path, synthesized, change):
    """Each option that changes the object (the lowering's passes and their
    options, the gradient pass's loss) is part of the key."""
    model = small_model()
    recir.value_and_grad(model, cache_dir=tmp_path, threads=1).wait()
    options = {"threads": 1, **change}
    loss = options.pop("loss", -1)
    if loss == 0:  # output 0, the root's state, is not a scalar loss
        with pytest.raises(RecirError, match="f32 loss"):
            recir.value_and_grad(model, loss, cache_dir=tmp_path, **options)
    else:
        recir.value_and_grad(model, loss, cache_dir=tmp_path, **options).wait()
    assert len(synthesized) == 2
    assert len(list(tmp_path.glob("*.o"))) == 1 + (loss != 0)


def test_a_changed_pass_option_in_the_lowering_misses(tmp_path, synthesized, monkeypatch):
    model = small_model()
    recir.value_and_grad(model, cache_dir=tmp_path, threads=1)
    deferred = pipeline.INFERENCE.replace(
        f"defer-outer-bytes={pipeline.DEFER_OUTER_BYTES}", "defer-outer-bytes=0")
    monkeypatch.setattr(pipeline, "INFERENCE", deferred)
    vg = recir.value_and_grad(model, cache_dir=tmp_path, threads=1).wait()
    assert len(synthesized) == 2 and vg.native.logged  # compiled with the new option


def test_a_changed_traced_module_misses(tmp_path, synthesized):
    recir.value_and_grad(small_model(3), cache_dir=tmp_path, threads=1)
    wider = small_model(4)
    vg = recir.value_and_grad(wider, cache_dir=tmp_path, threads=1)
    assert len(synthesized) == 2
    want = recir.value_and_grad(wider, engine="interpret")(*inputs(TREES[1]))[1]
    got = vg(*inputs(TREES[1]))[1]
    for name in wider.params:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("signature", ["not a type", "i32", "(i32) -> ("])
def test_an_entry_with_an_unreadable_signature_is_rebuilt(tmp_path, synthesized, signature):
    """An entry that verifies but whose signature does not parse as a
    function type is compiled again, never loaded with a guessed layout."""
    model = small_model()
    recir.value_and_grad(model, cache_dir=tmp_path, threads=1).wait()
    (obj,) = tmp_path.glob("*.o")
    cache = ObjectCache(tmp_path)
    record = json.loads(obj.with_suffix(".json").read_text())
    cache.store(obj.stem, obj.read_bytes(), {**record["meta"], "signature": signature})
    vg = recir.value_and_grad(model, cache_dir=tmp_path, threads=1).wait()
    assert len(synthesized) == 2
    (_, loss), _ = vg(*inputs(TREES[0]))
    assert loss == pytest.approx(
        recir.value_and_grad(model, engine="interpret")(*inputs(TREES[0]))[0][1], rel=1e-5)
    _, meta = cache.load(obj.stem, pipeline.META_FIELDS)
    assert meta["signature"] != signature


LOOKUP = """func.func @lookup(%i: i32, %emb: tensor<4x2xf32>) -> f32 {
  %x = tmath.gather %emb[%i] : tensor<4x2xf32>, i32 -> tensor<2xf32>
  %s = tmath.sum %x : tensor<2xf32> -> f32
  func.return %s : f32
}
"""


def test_same_ops_at_other_lines_report_their_own_location(tmp_path):
    """The traced module is keyed with its locations: a gradient's run-time
    errors name the lines of the program it was made from."""
    emb = np.arange(8, dtype=np.float32).reshape(4, 2)

    def gradient(text: str, name: str):
        model = recir.TracedModel(parse_module(make_context(), text, name), "lookup", ["i"],
                                  {"emb": emb})
        return recir.value_and_grad(model, cache_dir=tmp_path, threads=1).wait()

    first = gradient(LOOKUP, "first.mlir")
    second = gradient("// another program\n\n" + LOOKUP, "second.mlir")
    again = gradient(LOOKUP, "first.mlir")  # the first's entry, loaded
    assert len(list(tmp_path.glob("*.o"))) == 2
    for vg, where in ((first, "first.mlir:2:3"), (second, "second.mlir:4:3"),
                      (again, "first.mlir:2:3")):
        (value,), grads = vg(2)
        assert value == 9.0
        np.testing.assert_array_equal(grads["emb"], [[0, 0], [0, 0], [1, 1], [0, 0]])
        with pytest.raises(RecirError, match=f"{where}: error: 'tmath.gather' op index"):
            vg(4)
