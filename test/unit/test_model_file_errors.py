"""Foreign model and checkpoint files: one `CheckpointError` line, never a
traceback, and never a parameter silently changed on the way in."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recir.data import Tree, TreeStructureError
from recir.data.sst import Vocabulary, parse_tree
from recir.models import tree_rnn
from recir.train import SGD, CheckpointError, load, load_checkpoint, save_checkpoint
from recir.train.model_file import describe, save_model

SIZES = {"hidden": 4, "vocab": 3, "classes": 5}


def model_file(tmp_path, **replace: np.ndarray):
    """A tree_rnn model file with entries `replace`d (as a foreign writer might)."""
    params = tree_rnn.init_params(np.random.default_rng(0), **SIZES)
    path = tmp_path / "m.npz"
    save_model(path, params, describe("tree_rnn", SIZES, Vocabulary.from_words("ab")))
    np.savez(path, **(dict(np.load(path)) | replace))
    return path, params


def test_a_deeply_nested_description_is_one_error(tmp_path) -> None:
    """json recursed once per '[': a RecursionError traceback from `predict`."""
    path, _ = model_file(tmp_path, model=np.array("[" * 100_000))
    with pytest.raises(CheckpointError, match=r"m\.npz: the model description nests "
                                              r"too deeply \(not a recir model\)$"):
        load(path)


def test_float64_parameters_must_fit_float32(tmp_path) -> None:
    """1e300 is finite as float64 and read as float32 inf: the model loaded
    and predicted from an infinite bias."""
    b = np.zeros(SIZES["hidden"], np.float64)
    path, _ = model_file(tmp_path, **{"param/b": b + 1e300})
    with pytest.raises(CheckpointError, match="parameter 'b' holds values beyond "
                                              "float32's range"):
        load(path)
    path, _ = model_file(tmp_path, **{"param/b": b + 0.5})  # float64 in range: read
    np.testing.assert_array_equal(load(path).model.params["b"], np.full(4, 0.5))


def test_a_resume_file_is_checked_the_same_way(tmp_path) -> None:
    """Also through `load_checkpoint`, which restores nothing on an error."""
    params = tree_rnn.init_params(np.random.default_rng(0), **SIZES)
    path = tmp_path / "c.npz"
    save_checkpoint(path, params, SGD(params, 0.1), 1, np.random.default_rng(0))
    saved = dict(np.load(path))
    before = {k: v.copy() for k, v in params.items()}
    for change, message in (
            ({"param/b": np.full(4, -1e300)}, "parameter 'b' holds values beyond "
                                              "float32's range"),
            ({"rng": np.array("[" * 100_000)},
             "the shuffling rng state is unreadable")):
        np.savez(path, **(saved | change))
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(path, params, SGD(params, 0.1))
        for k, v in params.items():
            np.testing.assert_array_equal(v, before[k])


def test_a_model_and_a_checkpoint_save_to_a_path_given_as_a_str(tmp_path) -> None:
    """`load` took a str; `save_model` and `save_checkpoint` raised an
    AttributeError ('str' object has no attribute 'with_name')."""
    params = tree_rnn.init_params(np.random.default_rng(0), **SIZES)
    save_model(str(tmp_path / "m.npz"), params, describe("tree_rnn", SIZES, None))
    np.testing.assert_array_equal(load(str(tmp_path / "m.npz")).model.params["b"],
                                  params["b"])
    save_checkpoint(str(tmp_path / "c.npz"), params, SGD(params, 0.1), 2,
                    np.random.default_rng(0))
    assert load_checkpoint(tmp_path / "c.npz", params, SGD(params, 0.1))[0] == 2


@pytest.mark.parametrize("words", [["a", "<unk>", "b"], ["<unk>", "a", "a"],
                                   ["x", "a", "b"]])
def test_a_vocabulary_whose_ids_are_not_its_rows_is_refused(tmp_path, words) -> None:
    """`<unk>` after 'a' loaded, and 'a' read row 1 (written as `<unk>`'s);
    a repeated or missing `<unk>` said only 'N vocabulary words for 3
    embedding rows'."""
    info = describe("tree_rnn", SIZES, None) | {"vocabulary": words}
    path, _ = model_file(tmp_path, model=np.array(json.dumps(info)))
    with pytest.raises(CheckpointError, match=r"m\.npz: the vocabulary is not '<unk>' "
                                              r"then distinct words"):
        load(path)


@pytest.mark.parametrize(("trees", "message"), [
    (["(2 (1 a) (3 b))"], r"got a str \(recir\.data\.parse_tree makes one of text\)$"),
    ("(2 a)", r"got a str alone \(recir\.data\.parse_tree"),
    (parse_tree("(2 a)", Vocabulary.from_words("ab")), "got a Tree alone$"),
    (5, "got a int alone$"),  # (a TypeError from inside: 'int' object is not iterable)
])
def test_predict_names_what_is_not_a_tree(tmp_path, trees, message) -> None:
    """Text, or one tree not in a list, was an AttributeError or TypeError
    from inside the scorer ('str' object has no attribute 'num_nodes')."""
    path, _ = model_file(tmp_path)
    with pytest.raises(TypeError, match=f"^predict takes a list of Tree, {message}"):
        load(path).predict(trees)


def test_predict_takes_trees_from_a_generator(tmp_path) -> None:
    """The type check used the generator up: nothing was predicted."""
    path, params = model_file(tmp_path)
    vocabulary = Vocabulary.from_words("ab")
    trees = [parse_tree(text, vocabulary) for text in ("(2 (1 a) (3 b))", "(0 b)")]
    records = load(path).predict(t for t in trees)
    assert len(records) == 2
    for tree, record in zip(trees, records, strict=True):
        h = tree_rnn.reference(tree, tree.root, params)[0]  # the float64 NumPy oracle
        logits = params["w_out"] @ h + params["b_out"]
        want = np.exp(logits - logits.max())
        np.testing.assert_allclose(record["probabilities"], want / want.sum(), atol=1e-5)


def test_predict_names_a_tree_with_a_cycle(tmp_path) -> None:
    """A node made its own descendant ran the model round the cycle until
    its stack ran out: 'recursion in @node is too deep for the native stack'."""
    path, _ = model_file(tmp_path)
    good = parse_tree("(2 (1 a) (3 b))", Vocabulary.from_words("ab"))
    cycle = Tree([-1, -1, 2, 0], [-1, -1, 1, 2], [1, 2, -1, -1], [0, 0, 0, 0])
    with pytest.raises(TreeStructureError, match="^tree 1: node 2 is its own descendant: "
                                                 "left and right make a cycle through it$"):
        load(path).predict([good, cycle])
