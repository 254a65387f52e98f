"""A batch laid out as the frontier-batched entry takes it
(`backend/frontier_inputs.py`) against a plain reference (each column's
arrays concatenated, each with its own offsets), on the joined path (every
structure array an i32 vector), the per-column path (an int64 or strided
array among them), and through the native function against the recursive
one; and the per-call check's quick form (`batch_items`) against its plain
answer."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
from test_frontier_native import compiled, tree_inputs
from test_invoke_to_frontier import tree_batch_args, trees
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType, i32

from recir.backend.arguments import batch_items
from recir.backend.frontier_inputs import InputLayout
from recir.diagnostics import RecirError
from recir.models import tree_lstm

RAGGED = TensorType(i32, [-1])


def reference(batch: list[tuple], ragged: list[bool]) -> list[np.ndarray]:
    """Each column's arrays one after another (as int32) with the offsets
    where each starts, or its values stacked."""
    args: list[np.ndarray] = []
    for column, is_ragged in zip(zip(*batch, strict=True), ragged, strict=True):
        if is_ragged:
            lengths = [len(v) for v in column]
            args += [np.concatenate([np.asarray(v, np.int32) for v in column]),
                     np.array(np.cumsum([0, *lengths]), np.int32)]
        else:
            args.append(np.array(column, np.int32))
    return args


def layout(types: list) -> InputLayout:
    return InputLayout(func.FuncOp("f", (types, [])), 0)


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_columns_of_other_lengths_get_their_own_offsets() -> None:
    rng = np.random.default_rng(0)
    batch = [(rng.integers(-5, 9, n).astype(np.int32), rng.integers(0, 4, n).astype(np.int32),
              rng.integers(0, 4, m).astype(np.int32), n) for n, m in [(3, 1), (0, 4), (7, 2)]]
    lay = layout([RAGGED, RAGGED, RAGGED, i32])
    got = lay(batch)
    assert_same(got, reference(batch, [True, True, True, False]))
    assert got[1] is got[3]  # equal lengths share offsets
    assert got[1] is not got[5]


@pytest.mark.parametrize("odd", ["int64", "strided", "list"])
def test_an_array_off_the_joined_path_gives_the_same_arguments(odd: str) -> None:
    rng = np.random.default_rng(1)
    batch = [(rng.integers(0, 9, n).astype(np.int32), rng.integers(0, 9, n).astype(np.int32), n)
             for n in (4, 2, 5)]
    wide = rng.integers(0, 9, 10).astype(np.int32)
    value = {"int64": batch[1][0].astype(np.int64), "strided": wide[::5],
             "list": batch[1][0]}[odd]
    batch[1] = (value, batch[1][1], 2)
    lay = layout([RAGGED, RAGGED, i32])
    if odd == "list":  # `coerce_tensor`'s error, as before
        batch[1] = (list(batch[1][0]), *batch[1][1:])
        with pytest.raises(RecirError, match="expects an array"):
            lay(batch)
        return
    assert_same(lay(batch), reference(batch, [True, True, False]))


def test_a_batch_element_with_too_few_inputs_is_named() -> None:
    batch = [(np.zeros(1, np.int32), 0), (np.zeros(1, np.int32),)]
    with pytest.raises(RecirError, match=r"takes 2 inputs, got 1 \(batch element 1\)"):
        layout([RAGGED, i32])(batch)


def test_a_tree_models_arguments_match_the_batched_entrys_reference() -> None:
    traced, native, _ = compiled(tree_lstm)
    batch = trees()
    want = tree_batch_args(batch, traced.params)[:-len(traced.params)]
    assert_same(native.layout([tree_inputs(t) for t in batch]), want)


def test_mixed_inputs_give_the_recursive_functions_outputs() -> None:
    """int64 and strided structure arrays beside i32 ones, natively."""
    _, native, recursive = compiled(tree_lstm)
    batch = [list(tree_inputs(t)) for t in trees()]
    batch[1][0] = batch[1][0].astype(np.int64)
    batch[2][2] = np.repeat(batch[2][2], 2)[::2]
    outs = native.batch([tuple(b) for b in batch])
    for (h, loss), inputs in zip(outs, batch, strict=True):
        h_native, loss_native = recursive(*inputs)
        np.testing.assert_allclose(h, h_native, rtol=1e-4, atol=1e-5)
        assert loss == pytest.approx(loss_native, rel=1e-4)


def test_batch_items_takes_lists_tuples_and_their_subclasses_and_names_a_bad_one() -> None:
    Pair = namedtuple("Pair", "a b")  # a tuple subclass: the per-item loop
    good = [(1, 2), [3, 4], Pair(5, 6)]
    assert batch_items(good, "f", 2) is good
    assert batch_items([], "f", 2) == []
    with pytest.raises(RecirError, match=r"takes 2 inputs, got 3 \(batch element 2\)"):
        batch_items([(1, 2), Pair(5, 6), (1, 2, 3)], "f", 2)
    with pytest.raises(RecirError, match="batch element 1 of @f is a list or tuple"):
        batch_items([(1, 2), {1, 2}], "f")

