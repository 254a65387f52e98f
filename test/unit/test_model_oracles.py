"""The models' NumPy references refuse what the traced models refuse, and
`validate_structure` says why a root that is also a child is refused."""

from __future__ import annotations

import numpy as np
import pytest

from recir.data import Tree, TreeStructureError, validate_structure
from recir.diagnostics import RecirError
from recir.models import rntn, tree_lstm, tree_rnn


def two_leaves(word: list[int], label: list[int]) -> Tree:
    return Tree(np.array([-1, -1, 0]), np.array([-1, -1, 1]), np.array(word),
                np.array(label))


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm], ids=lambda m: m.__name__)
@pytest.mark.parametrize(("word", "label", "message"), [
    ([3, 1, -1], [2, 5, 1], r"label 5 out of range \[0, 5\)"),
    ([-1, 1, -1], [2, 2, 1], r"leaf 0 has word id -1, out of range \[0, 5\)"),  # was row 4
])
def test_reference_refuses_an_index_the_model_refuses(model, word, label, message):
    params = model.init_params(np.random.default_rng(0), hidden=2, vocab=5)
    tree = two_leaves(word, label)
    args = (tree.left, tree.right, tree.word, tree.label, tree.root)
    with pytest.raises(RecirError, match="out of range"):
        model.trace_model(params).run(*args)
    with pytest.raises(IndexError, match=message):
        model.reference(tree, tree.root, params)


@pytest.mark.parametrize("model", [tree_rnn, rntn, tree_lstm], ids=lambda m: m.__name__)
def test_an_unknown_label_has_no_loss_and_the_states_of_a_known_one(model):
    """-1 (unknown) was scored as the last class; an unlabelled tree's
    states (what prediction reads) stay readable."""
    params = model.init_params(np.random.default_rng(0), hidden=2, vocab=5)
    known, unknown = two_leaves([3, 1, -1], [2, 2, 1]), two_leaves([3, 1, -1], [2, 2, -1])
    with pytest.raises(RecirError, match="out of range"):  # the model's loss refuses it
        model.trace_model(params).run(unknown.left, unknown.right, unknown.word,
                                      unknown.label, unknown.root)
    states, loss = model.reference(unknown, unknown.root, params)
    assert np.isnan(loss)
    for a, b in zip(states, model.reference(known, known.root, params)[0], strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_root_that_is_a_child_names_its_parent():
    left, right = np.array([-1, -1, 0]), np.array([-1, -1, 1])
    for roots, parent in (([1], 2), ([2, 0], 2)):
        message = f"node {roots[-1]} is reached twice: a root and a child of node {parent}"
        with pytest.raises(TreeStructureError, match=f"^{message}$"):
            validate_structure(left, right, roots)
    with pytest.raises(TreeStructureError, match=r"^node 2 is reached twice \(a shared"):
        validate_structure(left, right, [2, 2])
