"""Tree loading, validation and synthesis against hand-computed arrays."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from recir.data import (
    TreeParseError,
    TreeStructureError,
    Vocabulary,
    batch_trees,
    load_sst,
    make_tree,
    make_treebank,
    parse_tree,
    sst_path,
    validate_structure,
)


def test_parse_tree_gives_post_order_arrays():
    vocab = Vocabulary()
    tree = parse_tree("(3 (2 It) (4 (2 's) (4 good)))", vocab)
    assert tree.left.tolist() == [-1, -1, -1, 1, 0]
    assert tree.right.tolist() == [-1, -1, -1, 2, 3]
    assert tree.label.tolist() == [2, 2, 4, 4, 3]
    assert [w for w in tree.word.tolist()] == [1, 2, 3, -1, -1]
    assert vocab.ids == {"<unk>": 0, "It": 1, "'s": 2, "good": 3}
    assert tree.depth() == 2 and tree.root == 4


def test_word_with_a_space_and_unknown_words():
    vocab = Vocabulary()
    tree = parse_tree("(2 (2 8 1\\/2) (2 hours))", vocab)
    assert "8 1\\/2" in vocab.ids
    frozen = parse_tree("(1 (1 new) (2 hours))", vocab, grow=False)
    assert frozen.word.tolist()[:2] == [0, vocab.ids["hours"]]
    assert tree.num_nodes == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(3 (2 a) (2 b)", "unbalanced brackets"),
        ("(3 (2 a) (2 b)))", "unbalanced brackets"),
        ("(x (2 a) (2 b))", "expected a label 0-4"),
        ("((2 a) (2 b))", "expected a label 0-4"),
        ("(3 (2 a) (2 b) (2 c))", "3 children"),
        ("(3 (2 a))", "1 children"),
        ("(3 (2 a) (2 b)) junk", "unexpected 'j'"),
    ],
)
def test_malformed_text_names_file_and_line(tmp_path, text: str, message: str):
    path = tmp_path / "bad.txt"
    path.write_text("(2 (2 fine) (2 tree))\n" + text + "\n")
    with pytest.raises(TreeParseError, match=rf"bad.txt:2: error: .*{message}"):
        load_sst(path)


def test_validate_structure_catches_each_problem():
    good = parse_tree("(3 (2 a) (4 (2 b) (4 c)))", Vocabulary())
    validate_structure(good.left, good.right, good.roots, 4, good.word)
    cases = {
        "out of range": (np.array([-1, -1, 0]), np.array([-1, -1, 7]), [2]),
        "reached twice": (np.array([-1, 0, 0]), np.array([-1, 0, 1]), [2]),
        "one child": (np.array([-1, 0]), np.array([-1, -1]), [1]),
        "root 5 is out of range": (np.array([-1]), np.array([-1]), [5]),
    }
    for message, (left, right, roots) in cases.items():
        with pytest.raises(TreeStructureError, match=message):
            validate_structure(left, right, np.array(roots))
    cyclic_left, cyclic_right = np.array([1, 0]), np.array([1, 0])
    with pytest.raises(TreeStructureError, match="reached twice"):
        validate_structure(cyclic_left, cyclic_right, np.array([0]))
    chain = make_tree("linear", 50, np.random.default_rng(0))
    with pytest.raises(TreeStructureError, match="deeper than the limit 10"):
        validate_structure(chain.left, chain.right, chain.roots, max_depth=10)
    with pytest.raises(TreeStructureError, match="word id 3, out of range"):
        validate_structure(good.left, good.right, good.roots, 3, good.word)


def test_batch_offsets_children_and_roots():
    a = parse_tree("(3 (2 a) (4 b))", Vocabulary())
    b = parse_tree("(1 x)", Vocabulary())
    batch = batch_trees([a, b, a])
    assert batch.roots.tolist() == [2, 3, 6]
    assert batch.left.tolist() == [-1, -1, 0, -1, -1, -1, 4]
    assert batch.right.tolist() == [-1, -1, 1, -1, -1, -1, 5]
    validate_structure(batch.left, batch.right, batch.roots)


@pytest.mark.parametrize("leaves", [1, 2, 5, 19, 32])
def test_synthetic_shapes_have_the_expected_depth(leaves: int):
    rng = np.random.default_rng(leaves)
    linear = make_tree("linear", leaves, rng)
    balanced = make_tree("balanced", leaves, rng)
    assert linear.depth() == leaves - 1
    assert balanced.depth() == int(np.ceil(np.log2(leaves)))
    for tree in (linear, balanced, make_tree("moderate", leaves, rng)):
        assert tree.num_leaves == leaves and tree.num_nodes == 2 * leaves - 1
        validate_structure(tree.left, tree.right, tree.roots, 100, tree.word)


def test_synthetic_treebank_is_sst_sized_and_deterministic():
    bank = make_treebank(300, "moderate", seed=3)
    assert 8 <= np.mean([t.depth() for t in bank]) <= 12
    assert 17 <= np.mean([t.num_leaves for t in bank]) <= 21
    again = make_treebank(300, "moderate", seed=3)
    assert all(np.array_equal(x.left, y.left) for x, y in zip(bank, again, strict=True))


def test_sst_dev_counts():
    path = sst_path("dev")
    if path is None:
        pytest.skip("SST dev split not present")
    trees, _ = load_sst(path)
    assert len(trees) == 1101
    assert sum(t.num_nodes for t in trees) == 41447
    result = subprocess.run([sys.executable, "-m", "recir.data.sst", str(path)],
                            capture_output=True, text=True, check=True)
    assert result.stdout.startswith("1101 trees, 41447 nodes")


def test_cli_reports_a_bad_file(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("(3 (2 a) (2 b)\n")
    result = subprocess.run([sys.executable, "-m", "recir.data.sst", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "bad.txt:1: error: unbalanced brackets" in result.stderr
