"""Tree loading, validation and synthesis against hand-computed arrays."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recir.data import (
    SHAPES,
    Tree,
    TreeParseError,
    TreeStructureError,
    Vocabulary,
    batch_trees,
    load_sst,
    make_tree,
    make_treebank,
    parse_tree,
    sentiment_label,
    sst_path,
    validate_structure,
    validate_trees,
    word_polarity,
)

ROOT = Path(__file__).resolve().parents[2]


def reference_depths(tree: Tree) -> list[int]:
    """Depth per node, pushed down from the root with an explicit stack."""
    depth = [-1] * tree.num_nodes
    stack = [(tree.root, 0)]
    while stack:
        node, d = stack.pop()
        depth[node] = d
        if tree.left[node] >= 0:
            stack += [(int(tree.left[node]), d + 1), (int(tree.right[node]), d + 1)]
    return depth


def leaves_under(tree: Tree, node: int) -> list[int]:
    stack, found = [node], []
    while stack:
        i = stack.pop()
        if tree.left[i] < 0:
            found.append(i)
        else:
            stack += [int(tree.left[i]), int(tree.right[i])]
    return found


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "recir.data.sst", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_parse_tree_gives_post_order_arrays():
    vocab = Vocabulary()
    tree = parse_tree("(3 (2 It) (4 (2 's) (4 good)))", vocab)
    assert tree.left.tolist() == [-1, -1, -1, 1, 0]
    assert tree.right.tolist() == [-1, -1, -1, 2, 3]
    assert tree.word.tolist() == [1, 2, 3, -1, -1]
    assert tree.label.tolist() == [2, 2, 4, 4, 3]
    fields = (tree.left, tree.right, tree.word, tree.label)
    assert all(a.dtype == np.int32 for a in fields)
    assert vocab.ids == {"<unk>": 0, "It": 1, "'s": 2, "good": 3}
    assert vocab.words == ["<unk>", "It", "'s", "good"]
    assert (tree.num_nodes, tree.root, tree.depth()) == (5, 4, 2)
    assert tree.leaves.tolist() == [0, 1, 2] and tree.roots.tolist() == [4]


def test_left_branching_tree_and_a_single_leaf():
    vocab = Vocabulary.from_words(["a", "b", "c"])
    tree = parse_tree("(1 (2 (3 a) (0 b)) (4 c))", vocab, grow=False)
    assert tree.left.tolist() == [-1, -1, 0, -1, 2]
    assert tree.right.tolist() == [-1, -1, 1, -1, 3]
    assert tree.word.tolist() == [1, 2, -1, 3, -1]
    assert tree.label.tolist() == [3, 0, 2, 4, 1]
    single = parse_tree("  (0 alone)\n", vocab)
    assert single.left.tolist() == [-1] and single.word.tolist() == [4]
    assert single.depth() == 0 and single.leaves.tolist() == [0]


def test_word_with_a_space_and_unknown_words():
    vocab = Vocabulary()
    tree = parse_tree("(2 (2 8 1\\/2) (2 hours))", vocab)
    assert vocab.words[1] == "8 1\\/2" and tree.word.tolist() == [1, 2, -1]
    frozen = parse_tree("(1 (1 new) (2 hours))", vocab, grow=False)
    assert frozen.word.tolist() == [0, 2, -1] and len(vocab) == 3
    assert vocab["never seen"] == 0 and "hours" in vocab


def test_a_file_numbers_words_in_first_seen_order(tmp_path):
    path = tmp_path / "three.txt"
    path.write_text("(2 (2 b) (2 a))\n\n(1 (2 a) (1 c))\n")
    trees, vocab = load_sst(path)
    assert len(trees) == 2 and vocab.ids == {"<unk>": 0, "b": 1, "a": 2, "c": 3}
    path.write_text("(2 a)\n(2 a\n")
    with pytest.raises(TreeParseError, match=rf"^{re.escape(str(path))}:2: error: "):
        load_sst(path)


def test_a_vocabulary_that_is_no_vocabulary_is_refused_by_name(tmp_path):
    """A dict (`{}`: falsy, so not replaced) was an AttributeError from parse_tree."""
    path = tmp_path / "one.txt"
    path.write_text("(2 (2 b) (2 a))\n")
    with pytest.raises(TypeError, match=r"^load_sst: vocab must be a Vocabulary .*got dict$"):
        load_sst(path, vocab={})
    trees, vocab = load_sst(path, Vocabulary.from_words(["a"]), grow_vocab=False)
    assert trees[0].word[trees[0].left < 0].tolist() == [0, 1]  # b unseen: <unk>


def test_a_folder_given_as_a_tree_file_is_one_line_error(tmp_path):
    """It was a raw IsADirectoryError."""
    with pytest.raises(TreeParseError, match=rf"^{re.escape(str(tmp_path))}: error: is a "
                                             "folder, expected a tree file$"):
        load_sst(tmp_path)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n": -1}, r"n \(the number of trees\) must be an integer >= 0, got -1"),
    ({"n": -1, "num_leaves": 3}, r"n \(the number of trees\) must be an integer >= 0, "
                                 "got -1"),
    ({"n": 2.0}, r"n \(the number of trees\) must be an integer >= 0, got 2.0"),
    ({"n": 2, "seed": -1}, r"seed must be >= 0, got -1"),
    ({"n": 2, "num_leaves": 2.5}, r"num_leaves must be an integer >= 1, got 2.5"),
    ({"n": 2, "num_leaves": 0}, r"num_leaves must be an integer >= 1, got 0"),
])
def test_make_treebank_names_a_bad_argument(kwargs, message):
    """NumPy's messages (negative dimensions, expected non-negative integer) did not."""
    with pytest.raises(ValueError, match=rf"^make_treebank: {message}$"):
        make_treebank(**kwargs)
    assert make_treebank(0) == []
    assert len(make_treebank(np.int64(2), seed=np.int64(1))) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(3 (2 a) (2 b)", "unbalanced brackets: missing '\\)' for column 1"),
        ("(3 (2 a) (2 b)))", "unbalanced brackets: unexpected '\\)' at column 16"),
        ("(x (2 a) (2 b))", "expected a label 0-4 at column 2, got 'x'"),
        ("(7 (2 a) (2 b))", "expected a label 0-4 at column 2, got '7'"),
        ("((2 a) (2 b))", "expected a label 0-4 at column 2, got nothing"),
        ("(2.5 a)", "expected a label 0-4 at column 2, got '2.5'"),
        ("(3 (2 a) (2 b) (2 c))", "node at column 1 has 3 children"),
        ("(3 (2 a))", "node at column 1 has 1 child; trees must be binary"),
        ("(3 )", "node at column 1 has no word and no children"),
        ("(3 a (2 b))", "node at column 1 mixes a word and children"),
        ("(3 (2 a) (2 b)) junk", "text after the end of the tree at column 17"),
        ("(3 (2 a) (2 b)) (2 c)", "text after the end of the tree at column 17"),
        ("junk (2 a)", "unexpected 'j' at column 1"),
    ],
)
def test_malformed_text_names_file_and_line(tmp_path, text: str, message: str):
    path = tmp_path / "bad.txt"
    path.write_text("(2 (2 fine) (2 tree))\n\n" + text + "\n")
    located = re.escape(str(path))
    with pytest.raises(TreeParseError, match=rf"^{located}:3: error: {message}"):
        load_sst(path)
    with pytest.raises(TreeParseError, match=rf"^<string>:1: error: {message}"):
        parse_tree(text, Vocabulary())
    with pytest.raises(ValueError, match=rf"^f.txt:9: error: {message}"):
        parse_tree(text, Vocabulary(), file="f.txt", line=9)


@pytest.mark.parametrize(("text", "message"), [
    ("(3\u00a0(2 a) (4 b))",
     "expected a label 0-4 at column 2, got '3\\xa0' (U+00A0 NO-BREAK SPACE)"),
    ("(3 (2 a)\x0b(4 b))", "unexpected '\\x0b' (U+000B) at column 9, expected '('"),
    ("(3 (2 a) (4 b))\x0c", "text after the end of the tree at column 16: '\\x0c' "
                            "(U+000C)"),
    ("\u200b(2 a)", "unexpected '\\u200b' (U+200B ZERO WIDTH SPACE) at column 1, "
                    "expected '('"),
])
def test_invisible_characters_are_escaped_and_named(text: str, message: str):
    """They were printed as they are: a no-break space read "got '3 '", a
    vertical tab or form feed showed as nothing at all."""
    with pytest.raises(TreeParseError) as caught:
        parse_tree(text, Vocabulary())
    assert str(caught.value) == f"<string>:1: error: {message}"


def test_a_file_whose_lines_end_in_cr_alone_says_so(tmp_path):
    """Read as one line, it said only "text after the end of the tree"."""
    path = tmp_path / "mac.txt"
    path.write_bytes(b"(3 (2 a) (4 b))\r(2 (2 c) (2 d))\r")
    with pytest.raises(TreeParseError) as caught:
        load_sst(path)
    assert str(caught.value) == (f"{path}:1: error: text after the end of the tree at "
                                 "column 17: lines end in CR alone; tree files need LF "
                                 "or CR LF line ends")
    (tmp_path / "crlf.txt").write_bytes(b"(3 (2 a) (4 b))\r\n(2 (2 c) (2 d))\r\n")
    assert len(load_sst(tmp_path / "crlf.txt")[0]) == 2


def test_an_unlabelled_tree_names_a_number_that_is_no_label():
    """`(9 (2 a) (3 b))` read 9 as a word (a label may be left out): the
    message said only that a node mixes a word and children."""
    with pytest.raises(TreeParseError, match=r"node at column 1 mixes a word and children "
                                             r"\('9' is no label 0-4\)$"):
        parse_tree("(9 (2 a) (3 b))", Vocabulary(), labelled=False)
    with pytest.raises(TreeParseError, match=r"mixes a word and children$"):
        parse_tree("(a (2 b) (3 c))", Vocabulary(), labelled=False)


def test_deep_trees_parse_without_recursion():
    depth = 20_000  # far past Python's recursion limit
    text = "(2 (2 w) " * depth + "(2 w)" + ")" * depth
    tree = parse_tree(text, Vocabulary())
    assert tree.num_nodes == 2 * depth + 1 and tree.depth() == depth
    validate_structure(tree.left, tree.right, tree.roots, max_depth=depth)
    with pytest.raises(TreeStructureError, match="deeper than the limit 10000"):
        validate_structure(tree.left, tree.right, tree.roots)


def test_validate_structure_accepts_good_trees():
    good = parse_tree("(3 (2 a) (4 (2 b) (4 c)))", Vocabulary())
    validate_structure(good.left, good.right, good.roots)
    validate_structure(good.left, good.right, good.roots, 4, word=good.word)
    validate_structure(good.left, good.right, [good.root], max_depth=2)
    # A subset of a batch's roots is fine: unreachable nodes are still well formed.
    batch = batch_trees([good, good])
    validate_structure(batch.left, batch.right, batch.roots[1:], 4, word=batch.word)


@pytest.mark.parametrize(
    ("left", "right", "roots", "message"),
    [
        ([-1, -1, 0], [-1, -1, 7], [2], r"node 2 has right child 7, out of range"),
        ([-1, -1, -2], [-1, -1, 1], [2], "node 2 has left child -2, out of range"),
        ([-1], [-1], [5], "root 5 is out of range \\[0, 1\\)"),
        ([-1], [-1], [-1], "root -1 is out of range"),
        ([-1, 0], [-1, -1], [1], "node 1 has one child"),
        ([-1, -1, 0], [-1, -1, 0], [2], "node 0 is reached twice"),
        ([-1, 0, 0, 1], [-1, 0, 0, 2], [3], "node 0 is reached twice"),
        ([-1, -1, 0, 2], [-1, -1, 1, 1], [3], "node 1 is reached twice"),
        ([1, 0], [1, 0], [0], "node 0 is its own descendant: left and right make a cycle through it"),  # through the root
        ([-1, 2, 1, 0, -1, -1], [-1, 4, 5, 1, -1, -1], [3], "node 1 is its own descendant"),
        ([-1, 1], [-1, 0], [1], "node 1 is its own descendant"),  # a self loop
        ([-1, -1, 0], [-1, -1, 1], [2, 2], "node 2 is reached twice"),
        ([-1, -1, 0], [-1, -1], [2], "left has 3 nodes but right has 2"),
    ],
)
def test_validate_structure_catches_each_problem(left, right, roots, message: str):
    with pytest.raises(TreeStructureError, match=message):
        validate_structure(np.array(left), np.array(right), np.array(roots))


def test_many_trees_are_validated_at_once_and_the_bad_one_named():
    """A cycle passes every bounds check of a compiled model, which recursed
    round it until its stack ran out ('recursion in @node is too deep')."""
    trees = [parse_tree("(3 (2 a) (4 (2 b) (4 c)))", Vocabulary()), *make_treebank(1)]
    validate_trees(trees)
    validate_trees([])
    cycle = Tree([-1, -1, 2, 0], [-1, -1, 1, 2], [0, 1, -1, -1], [0, 0, 0, 0])
    with pytest.raises(TreeStructureError, match="^training tree 2: node 2 is its own "
                                                 "descendant: left and right make a cycle"):
        validate_trees([*trees, cycle, cycle], "training tree")
    # a child out of its own tree's range must not pass as a node of the next tree
    spilled = Tree([-1, -1, 0], [-1, -1, 3], [0, 1, -1], [0, 0, 0])
    with pytest.raises(TreeStructureError, match=r"^tree 0: node 2 has right child 3, out "
                                                 r"of range \[0, 3\)$"):
        validate_trees([spilled, *trees])
    shared = Tree([-1, 0, 1, 2], [-1, 0, 1, 2], [0, -1, -1, -1], [0, 0, 0, 0])
    with pytest.raises(TreeStructureError, match="^tree 1: node 0 is reached twice"):
        validate_trees([trees[0], shared])


def test_depth_of_a_tree_of_shared_children_is_refused_not_expanded():
    """Each level of the walk doubled at a shared child: `depth()` of this
    26-node chain walked 2**26 entries (and answered 25), a 60-node one 2**60."""
    chain = np.array([-1, *range(25)])
    tree = Tree(chain, chain, np.zeros(26, int), np.zeros(26, int))
    with pytest.raises(TreeStructureError, match="^node 0 is reached twice"):
        tree.depth()
    cycle = Tree([-1, -1, 2, 0], [-1, -1, 1, 2], [0, 1, -1, -1], [0, 0, 0, 0])
    with pytest.raises(TreeStructureError, match="^node 2 is its own descendant"):
        cycle.depth()


def test_validate_structure_checks_words_and_depth():
    good = parse_tree("(3 (2 a) (4 (2 b) (4 c)))", Vocabulary())  # words 1, 2, 3
    out_of_range = r"leaf 2 has word id 3, out of range \[0, 3\)"
    with pytest.raises(TreeStructureError, match=out_of_range):
        validate_structure(good.left, good.right, good.roots, 3, word=good.word)
    negative = good.word.copy()
    negative[0] = -1
    with pytest.raises(TreeStructureError, match="leaf 0 has word id -1, negative"):
        validate_structure(good.left, good.right, good.roots, word=negative)
    with pytest.raises(TypeError, match="word array"):
        validate_structure(good.left, good.right, good.roots, 4)
    too_deep = "node 1 is at depth 2, deeper than the limit 1"
    with pytest.raises(TreeStructureError, match=too_deep):
        validate_structure(good.left, good.right, good.roots, max_depth=1)
    with pytest.raises(TreeStructureError, match="1-d integer array"):
        validate_structure(good.left.astype(float), good.right, good.roots)
    assert issubclass(TreeStructureError, ValueError)
    assert issubclass(TreeParseError, ValueError)


def test_batch_offsets_children_and_roots():
    a = parse_tree("(3 (2 a) (4 b))", Vocabulary())
    b = parse_tree("(1 x)", Vocabulary())
    batch = batch_trees([a, b, a])
    assert batch.roots.tolist() == [2, 3, 6] and batch.num_trees == 3
    assert batch.left.tolist() == [-1, -1, 0, -1, -1, -1, 4]
    assert batch.right.tolist() == [-1, -1, 1, -1, -1, -1, 5]
    assert batch.word.tolist() == [1, 2, -1, 1, 1, 2, -1]
    assert batch.label.tolist() == [2, 4, 3, 1, 2, 4, 3]
    assert all(getattr(batch, f).dtype == np.int32
               for f in ("left", "right", "word", "label", "roots"))
    validate_structure(batch.left, batch.right, batch.roots, 3, word=batch.word)
    assert batch_trees([]).num_nodes == 0


def test_batch_trees_takes_trees_alone_and_any_iterable_of_them():
    """A TreeBatch in the list was read as one tree: the batch kept its last
    root and dropped the rest; a generator was consumed by the emptiness check
    and failed in NumPy ("need at least one array"); a non-tree was an
    AttributeError."""
    a = parse_tree("(3 (2 a) (4 b))", Vocabulary())
    b = parse_tree("(1 x)", Vocabulary())
    with pytest.raises(TypeError, match=r"^batch_trees takes a sequence of Tree, got "
                                        r"TreeBatch \(pass the trees it was made of\)$"):
        batch_trees([batch_trees([a, b])])
    with pytest.raises(TypeError, match=r"^batch_trees takes a sequence of Tree, got int$"):
        batch_trees([a, 1])
    batch = batch_trees(t for t in (a, b, a))
    assert batch.roots.tolist() == [2, 3, 6]
    assert batch.left.tolist() == [-1, -1, 0, -1, -1, -1, 4]


@pytest.mark.parametrize("leaves", [1, 2, 3, 5, 19, 32, 33, 200])
def test_synthetic_shapes_have_the_expected_depth(leaves: int):
    rng = np.random.default_rng(leaves)
    linear = make_tree("linear", leaves, rng)
    balanced = make_tree("balanced", leaves, rng)
    assert max(reference_depths(linear)) == linear.depth() == leaves - 1
    log_depth = math.ceil(math.log2(leaves))
    assert max(reference_depths(balanced)) == balanced.depth() == log_depth
    is_leaf = linear.left < 0
    assert all(is_leaf[linear.left[i]] or is_leaf[linear.right[i]]
               for i in np.flatnonzero(~is_leaf))  # each internal node has a leaf child
    for tree in (linear, balanced, make_tree("moderate", leaves, rng)):
        assert tree.num_leaves == leaves and tree.num_nodes == 2 * leaves - 1
        assert -1 not in reference_depths(tree)  # every node is in the tree
        assert all(max(tree.left[i], tree.right[i]) < i for i in range(tree.num_nodes))
        validate_structure(tree.left, tree.right, tree.roots, 100, word=tree.word)


@pytest.mark.parametrize(("leaves", "vocab"), [(2.5, 100), (3.0, 100), (True, 100),
                                                (3, 2.5), (3, 2**40)])
def test_make_tree_refuses_counts_that_are_no_integers_or_too_large(leaves, vocab):
    """A float leaf count split forever (2.5 leaves: 1 and 1.5, then 1 and
    0.5, 0 and 0.5, ...), hanging and growing memory; word ids from a
    vocabulary past int32 wrapped to negative ids."""
    with pytest.raises(ValueError, match=r"^make_tree: num_leaves and vocab_size must be "
                                         r"integers|^need num_leaves >= 1 and vocab_size"):
        make_tree("balanced", leaves, np.random.default_rng(0), vocab)
    tree = make_tree("balanced", np.int64(3), np.random.default_rng(0), 2**31)
    assert tree.num_leaves == 3 and tree.word[tree.left < 0].min() >= 0


def test_synthetic_labels_follow_leaf_polarity():
    polarity = word_polarity(np.arange(1000))
    assert polarity[0] == 0 and set(polarity.tolist()) == {-1, 0, 1}
    assert 0.1 < (polarity == 1).mean() < 0.3 and 0.1 < (polarity == -1).mean() < 0.3
    labels = sentiment_label([-5, -3, -2, -1, 0, 1, 2, 3, 9]).tolist()
    assert labels == [0, 0, 1, 1, 2, 3, 3, 4, 4]
    for tree in make_treebank(20, seed=5):
        for node in range(tree.num_nodes):
            score = sum(int(polarity[tree.word[i]]) for i in leaves_under(tree, node))
            expected = 0 if score <= -3 else 1 if score < 0 else 2 if score == 0 else (
                3 if score <= 2 else 4)
            assert tree.label[node] == expected


def test_synthetic_treebank_is_sst_sized_and_deterministic():
    bank = make_treebank(500, "moderate", seed=3)
    assert 8.5 <= np.mean([t.depth() for t in bank]) <= 11.5
    assert 17 <= np.mean([t.num_leaves for t in bank]) <= 21
    again = make_treebank(500, "moderate", seed=3)
    for x, y in zip(bank, again, strict=True):
        for field in ("left", "right", "word", "label"):
            assert np.array_equal(getattr(x, field), getattr(y, field))
    other = make_treebank(500, "moderate", seed=4)
    assert any(x.num_nodes != y.num_nodes for x, y in zip(bank, other, strict=True))
    fixed = make_treebank(10, "balanced", num_leaves=19, vocab_size=7)
    assert all(t.num_leaves == 19 and t.depth() == 5 for t in fixed)
    assert max(int(t.word.max()) for t in fixed) < 7
    with pytest.raises(ValueError, match="unknown tree shape 'zigzag'"):
        make_tree("zigzag", 3, np.random.default_rng(0))
    assert SHAPES == ("balanced", "moderate", "linear")


def test_sst_path_honours_the_environment(tmp_path, monkeypatch):
    (tmp_path / "dev.txt").write_text("(2 a)\n")
    monkeypatch.setenv("RECIR_SST_DIR", str(tmp_path))
    assert sst_path("dev") == tmp_path / "dev.txt"
    assert sst_path("test") is None
    monkeypatch.delenv("RECIR_SST_DIR")
    found = sst_path("dev")
    assert found is None or found == ROOT.parent / "shared/data/sst/dev.txt"


def test_sst_dev_counts():
    path = sst_path("dev")
    if path is None:
        pytest.skip("SST dev split not present")
    trees, vocab = load_sst(path)
    assert len(trees) == 1101
    assert sum(t.num_nodes for t in trees) == 41447
    depths = [t.depth() for t in trees]
    assert round(float(np.mean(depths)), 1) == 9.9 and max(depths) == 27
    assert all(set(t.label.tolist()) <= {0, 1, 2, 3, 4} for t in trees)
    batch = batch_trees(trees)
    validate_structure(batch.left, batch.right, batch.roots, len(vocab),
                       word=batch.word)
    _, frozen = load_sst(path, Vocabulary.from_words(["the"]), grow_vocab=False)
    assert len(frozen) == 2


def test_cli_summarises_a_file(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("(3 (2 It) (4 (2 's) (4 good)))\n(1 (1 bad) (2 It))\n")
    result = run_cli(str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "2 trees, 8 nodes", "depth mean 1.5 max 2, vocabulary 5 words (with <unk>)"]
    dev = sst_path("dev")
    if dev is not None:
        assert run_cli(str(dev)).stdout.startswith("1101 trees, 41447 nodes\n")


def test_cli_reports_a_bad_file(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("(2 (2 a) (2 b))\n(3 (2 a) (2 b)\n")
    result = run_cli(str(path))
    assert result.returncode == 1 and result.stdout == ""
    message = "unbalanced brackets: missing ')' for column 1"
    assert result.stderr == f"{path}:2: error: {message}\n"
    missing = run_cli(str(tmp_path / "nope.txt"))
    assert missing.returncode == 1 and missing.stderr.startswith("error: cannot read")
    assert "Traceback" not in missing.stderr
