"""`into=` gradient buffers that share memory with a parameter or with
each other are refused (`gradients.accumulators`): the call would add
gradients into weights it reads (a height loop's packed copy of a weight,
`passes/gemm_cached.py`, would not even see them), or two parameters'
gradients into one buffer. The reference: NumPy's `may_share_memory` on
every pair."""

from __future__ import annotations

import itertools
import weakref

import numpy as np
import pytest

import recir
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir import gradients
from recir.gradients import CheckedBuffers, accumulators, bounds, overlapping
from recir.models import tree_rnn


def tree_inputs(tree):
    return tree.left, tree.right, tree.word, tree.label, tree.root


def views(memory: np.ndarray, shapes: dict[str, tuple[int, ...]], starts: list[int]
          ) -> dict[str, np.ndarray]:
    """A C-contiguous float32 array of each shape, at `starts` (floats) in `memory`."""
    return {name: memory[at:at + int(np.prod(shape))].reshape(shape)
            for (name, shape), at in zip(shapes.items(), starts, strict=True)}


def shares(params: dict[str, np.ndarray], into: dict[str, np.ndarray]) -> bool:
    """Whether a buffer shares memory with any parameter or another buffer."""
    return any(np.may_share_memory(into[a], params[b]) for a in into for b in params) or any(
        np.may_share_memory(into[a], into[b]) for a, b in itertools.combinations(into, 2))


@pytest.mark.parametrize("seed", range(6))
def test_a_buffer_sharing_memory_with_any_parameter_or_buffer_is_refused(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shapes = {"a": (3, 4), "b": (5,), "c": (2, 2, 2), "d": (0, 3)}
    memory = np.zeros(200, np.float32)
    refused = 0
    for _ in range(60):
        params = views(memory, shapes, list(rng.integers(0, 100, len(shapes))))
        if rng.integers(2):  # a parameter not C-contiguous: its memory's bounds
            params["a"] = memory[150:174:2].reshape(3, 4)
        into = views(memory, shapes, list(rng.integers(0, 150, len(shapes))))
        if shares(params, into):
            refused += 1
            with pytest.raises(RecirError, match="error: into: gradient buffer"):
                accumulators(params, into)
        else:
            assert accumulators(params, into) is into
    assert 0 < refused < 60  # both answers were asked for


def test_the_messages_name_both_arrays() -> None:
    memory = np.zeros(100, np.float32)
    params = views(memory, {"w": (4, 4), "b": (4,)}, [0, 16])
    fresh = {"w": np.zeros((4, 4), np.float32), "b": np.zeros(4, np.float32)}
    with pytest.raises(RecirError, match="gradient buffer 'w' is the parameter itself"):
        accumulators(params, {**fresh, "w": params["w"]})
    with pytest.raises(RecirError, match="gradient buffer 'b' shares memory with parameter "
                                         "'w': gradients would be added into the weights"):
        accumulators(params, {**fresh, "b": memory[12:16]})
    with pytest.raises(RecirError, match="gradient buffers 'w' and 'b' share memory"):
        accumulators(params, {"w": memory[40:56].reshape(4, 4), "b": memory[52:56]})


def test_a_buffer_over_another_parameter_leaves_the_weights_as_they_were() -> None:
    """Before, only a buffer over its own parameter was refused: a buffer
    over another parameter's memory took the gradients into the weights."""
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=10, classes=5)
    model = tree_rnn.trace_model(params)
    before = {k: v.copy() for k, v in model.params.items()}
    vg = recir.value_and_grad(model, batching="recursive", threads=1)
    into = {k: np.zeros_like(v) for k, v in params.items()}
    into["b"] = model.params["w"].reshape(-1)[:4]  # C-contiguous, float32, writable
    tree = make_treebank(1, vocab_size=10, seed=4)[0]
    with pytest.raises(RecirError, match="gradient buffer 'b' shares memory with parameter 'w'"):
        vg(*tree_inputs(tree), into=into)
    assert all((model.params[k] == before[k]).all() for k in before)


def test_bounds_overlap_as_numpy_answers_for_views_of_one_buffer() -> None:
    """`overlapping` of a parameter and a buffer (`bounds` of strided and
    reversed views too) against `np.may_share_memory`."""
    rng = np.random.default_rng(0)
    base = np.zeros(300, np.float32)
    for _ in range(2000):
        i, j = sorted(rng.integers(0, 301, 2))
        k, m = sorted(rng.integers(0, 301, 2))
        a = base[i:j]
        b = base[k:m:1 + int(rng.integers(0, 2))][::1 - 2 * int(rng.integers(0, 2))]
        start, end, _ = bounds(b, False)
        first = b.__array_interface__["data"][0]
        assert (start, end) == ((first, first) if not b.size else (
            first + min(0, b.strides[0]) * (len(b) - 1),
            first + max(0, b.strides[0]) * (len(b) - 1) + 4))
        assert overlapping({"p": b}, {"p": a}) == bool(np.may_share_memory(a, b))
    assert not overlapping({"p": base}, {"p": np.zeros(300, np.float32)})


def test_a_functions_last_clear_buffers_skip_the_search_and_others_do_not(monkeypatch):
    """The same array objects as the last clear call are not searched again
    (they are held, so they lie where they lay); a new buffer over a
    parameter is searched and refused each time, and leaves the last clear
    ones as they were."""
    searched = []
    search = gradients.overlapping
    monkeypatch.setattr(gradients, "overlapping",
                        lambda p, i: searched.append(1) or search(p, i))
    memory = np.zeros(100, np.float32)
    params = views(memory, {"w": (4, 4), "b": (4,)}, [0, 16])
    into = {"w": np.zeros((4, 4), np.float32), "b": np.zeros(4, np.float32)}
    checked = CheckedBuffers()
    for _ in range(3):
        assert accumulators(params, into, checked) is into
    assert len(searched) == 1
    over = {**into, "b": memory[12:16]}  # over w
    for _ in range(2):
        with pytest.raises(RecirError, match="gradient buffer 'b' shares memory"):
            accumulators(params, over, checked)
    assert len(searched) == 3
    assert accumulators(params, into, checked) is into and len(searched) == 3


def test_the_last_clear_buffers_are_not_kept_alive():
    memory = np.zeros(100, np.float32)
    params = views(memory, {"w": (4, 4)}, [0])
    into = {"w": np.zeros((4, 4), np.float32)}
    checked = CheckedBuffers()
    accumulators(params, into, checked)
    gone = weakref.ref(into["w"])
    del into
    assert gone() is None
    assert accumulators(params, {"w": np.zeros((4, 4), np.float32)}, checked) is not None
