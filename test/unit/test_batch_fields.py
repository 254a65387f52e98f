"""`batch_fields`: a recursive batch's fields laid out by columns are the
fields `prepare` gives call by call (each structure array's descriptor a
row of one table), and a batch it does not lay out takes `prepare`'s checks."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import recir
from recir.backend.batch_fields import batch_fields
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import tree_lstm


def inputs(tree):
    return tree.left, tree.right, tree.word, tree.label, tree.root


@pytest.fixture(scope="module")
def functions():
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=7, vocab=50)
    model = tree_lstm.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    return recir.compile(model, threads=1), recir.compile(model, threads=3)


def test_fields_are_prepares_with_one_table_of_descriptors(functions):
    native = functions[1]
    arguments = native.arguments
    batch = [inputs(t) for t in make_treebank(6, vocab_size=50, seed=2)]
    keep: list = []
    fields, longest, _ = batch_fields(arguments, batch, keep)
    assert longest.tolist() == [len(t[0]) for t in batch]  # the node arrays
    for k, item in enumerate(batch):
        args = arguments.prepare(item, [], outputs=False)[0]
        want = np.array(arguments.fields(args), np.uint64).view(np.int64)
        for j, value in enumerate(item):
            if isinstance(value, np.ndarray):  # {length, data} read through both
                length, data = np.frombuffer(ctypes.string_at(int(fields[k, j]), 16), np.int64)
                assert (length, data) == (len(value), value.ctypes.data)  # as `prepare`
            else:
                assert fields[k, j] == want[j]
        np.testing.assert_array_equal(fields[k, len(item):], want[len(item):])  # parameters


def forms(trees):
    """Each tree's inputs in another form than plain i32 arrays: big-endian,
    i64, a strided view, a NumPy integer root."""
    first, second, third, fourth = trees[:4]
    wide = np.repeat(third.word, 2)[::2]  # i32, not contiguous
    assert not wide.flags.c_contiguous
    return [(first.left.astype(">i4"), first.right, first.word, first.label, first.root),
            (second.left.astype(np.int64), second.right, second.word, second.label,
             second.root),
            (third.left, third.right, wide, third.label, third.root),
            (fourth.left, fourth.right, fourth.word, fourth.label, np.int64(fourth.root))]


def test_other_forms_take_prepare_and_give_the_same_outputs(functions):
    serial, team = functions
    trees = make_treebank(8, vocab_size=50, seed=5)
    for odd in forms(trees):
        batch = [inputs(t) for t in trees[4:]] + [odd]
        assert batch_fields(team.arguments, batch, []) is None
        for (h1, l1), (h, loss) in zip([serial(*b) for b in batch], team.batch(batch),
                                       strict=True):
            np.testing.assert_array_equal(h, h1)
            assert loss == l1


def test_a_bad_input_in_a_batch_gets_prepares_error(functions):
    _, team = functions
    trees = make_treebank(3, vocab_size=50, seed=7)
    batch = [inputs(t) for t in trees]
    batch[1] = (*batch[1][:4], 1 << 40)  # a root past i32
    with pytest.raises(RecirError, match="out of range|does not fit"):
        team.batch(batch)
    with pytest.raises(RecirError, match="takes 5 inputs"):
        team.batch([inputs(trees[0]), inputs(trees[1])[:4]])


def test_one_tree_in_every_call_and_batches_of_none_or_one(functions):
    serial, team = functions
    tree = make_treebank(1, vocab_size=50, seed=9)[0]
    h1, l1 = serial(*inputs(tree))
    for h, loss in team.batch([inputs(tree)] * 4):  # each input one object in every call
        np.testing.assert_array_equal(h, h1)
        assert loss == l1
    assert team.batch([]) == []
    assert len(team.batch([inputs(tree)])) == 1


def test_where_arrays_are_not_read_in_place_a_batch_goes_call_by_call(functions,
                                                                      monkeypatch):
    """Where the probe finds array objects laid out otherwise (another
    interpreter), no column is laid out natively and the outputs stay."""
    from recir.backend.kernels import array_columns

    serial, team = functions
    batch = [inputs(t) for t in make_treebank(5, vocab_size=50, seed=13)]
    monkeypatch.setattr(array_columns, "column_kernel", lambda folder=None: None)
    assert batch_fields(team.arguments, batch, []) is None
    for (h1, l1), (h, loss) in zip([serial(*b) for b in batch], team.batch(batch),
                                   strict=True):
        np.testing.assert_array_equal(h, h1)
        assert loss == l1


def variant(array: np.ndarray, form: int):
    """An input array in one of several forms: as it is, i64, big-endian,
    strided, F-ordered 2-D (rank wrong), a list, floats."""
    if form == 0:
        return array
    if form == 1:
        return array.astype(np.int64)
    if form == 2:
        return array.astype(">i4")
    if form == 3:
        return np.repeat(array, 2)[::2]
    if form == 4:
        return np.asfortranarray(np.stack([array, array], axis=1))
    if form == 5:
        return list(array)
    return array.astype(np.float32)


def test_random_forms_fail_or_match_as_call_by_call(functions):
    """Batches of random trees, half of them with one input in another form
    (or a root out of range): a batch raises where some call alone would,
    and otherwise gives each call's own outputs."""
    serial, team = functions
    trees = make_treebank(40, vocab_size=50, seed=11)
    rng = np.random.default_rng(12)
    for round_ in range(40):
        batch = [inputs(trees[int(k)]) for k in rng.integers(len(trees), size=int(
            rng.integers(2, 9)))]
        if round_ % 2:  # one input of one call in another form
            k, j = int(rng.integers(len(batch))), int(rng.integers(5))
            item = list(batch[k])
            item[j] = variant(item[j], int(rng.integers(1, 7))) if j < 4 else [
                np.int64(item[4]), -1, 1 << 40][int(rng.integers(3))]
            batch[k] = tuple(item)
        try:
            expected = [serial(*item) for item in batch]
        except RecirError:
            with pytest.raises(RecirError):
                team.batch(batch)
            continue
        for (h1, l1), (h, loss) in zip(expected, team.batch(batch), strict=True):
            np.testing.assert_array_equal(h, h1)
            assert loss == l1, round_
