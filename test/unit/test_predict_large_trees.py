"""Predicting a line far larger than SST's trees: scored without a node score
table (whose mask grows as the square of the nodes: a 60,000-leaf line asked
for 64 GiB), and parsed in time linear in the line."""

from __future__ import annotations

import numpy as np

from recir.data.sst import Vocabulary, parse_tree
from recir.models import tree_rnn
from recir.train import load, save_model
from recir.train.metrics import TABLE_NODES
from recir.train.model_file import describe

SIZES = {"hidden": 4, "vocab": 9, "classes": 5}


def balanced(words: list[str]) -> str:
    """An unlabelled, balanced tree over `words`, as `predict` reads lines."""
    if len(words) == 1:
        return f"({words[0]})"
    half = len(words) // 2
    return f"({balanced(words[:half])} {balanced(words[half:])})"


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max())
    return e / e.sum()


def test_a_tree_beyond_the_table_is_scored_without_one(tmp_path, monkeypatch) -> None:
    words = [f"w{k}" for k in range(SIZES["vocab"] - 1)]
    params = tree_rnn.init_params(np.random.default_rng(3), **SIZES)
    save_model(tmp_path / "m.npz", params,
               describe("tree_rnn", SIZES, Vocabulary.from_words(words)))
    model = load(tmp_path / "m.npz")
    text = balanced([words[k % len(words)] for k in range(TABLE_NODES)])
    tree = parse_tree(text, model.vocabulary, grow=False, labelled=False)
    assert tree.num_nodes > TABLE_NODES
    asked: list[int] = []
    traced = model.model.with_node_scores
    monkeypatch.setattr(model.model, "with_node_scores",
                        lambda nodes: asked.append(nodes) or traced(nodes))
    p = model.model.params

    def logits(i: int) -> np.ndarray:  # the float64 NumPy oracle
        return p["w_out"] @ tree_rnn.reference(tree, i, p)[0] + p["b_out"]

    (root,) = model.predict([tree])
    np.testing.assert_allclose(root["probabilities"], softmax(logits(tree.root)),
                               atol=1e-5)
    (every,) = model.predict([tree], all_nodes=True)
    assert every["nodes"] == [int(np.argmax(logits(i))) for i in range(tree.num_nodes)]
    assert asked and max(asked) <= TABLE_NODES, asked  # (a table of 2048 before)


class Counted(str):
    """A line that counts the characters its slices copy."""

    copied = 0

    def __getitem__(self, key):  # type: ignore[override]
        part = str.__getitem__(self, key)
        Counted.copied += len(part)
        return part


def test_a_long_line_is_parsed_in_linear_time() -> None:
    """An unlabelled parse copied the rest of the line at every label: 33 s
    for a 120,000-node line."""
    leaves = 3000
    text = "(2 w0)"
    for k in range(1, leaves):
        text = f"(2 {text} (2 w{k}))"
    vocab = Vocabulary()
    Counted.copied = 0
    tree = parse_tree(Counted(text), vocab, labelled=False)
    assert Counted.copied < 4 * len(text), (Counted.copied, len(text))
    want = parse_tree(text, Vocabulary(), labelled=True)  # no lookahead when labelled
    for field in ("left", "right", "word", "label"):
        np.testing.assert_array_equal(getattr(tree, field), getattr(want, field))
    assert tree.num_nodes == 2 * leaves - 1
