"""Stanford Sentiment Treebank loader (PTB bracket files) and a vocabulary.

One tree per line, a label 0-4 on every node, strictly binary:
`(3 (2 It) (4 (4 (2 's) (4 good)) (2 .)))`. A leaf's word is everything after
its label up to the closing bracket (one SST word contains a space: `8 1\\/2`).
Parsing is iterative, so deep trees cannot exhaust Python's stack.

`python -m recir.data.sst FILE` prints the number of trees and nodes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from recir.data.trees import Tree


class TreeParseError(ValueError):
    """Malformed tree text; the message starts with `file:line: error:`."""


class Vocabulary:
    """Word -> id; id 0 is `<unk>` for words never seen while growing."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"<unk>": 0}

    def __len__(self) -> int:
        return len(self.ids)

    def lookup(self, word: str, grow: bool) -> int:
        if grow:
            return self.ids.setdefault(word, len(self.ids))
        return self.ids.get(word, 0)


def parse_tree(
    text: str, vocab: Vocabulary, *, grow: bool = True, where: str = "<string>:1"
) -> Tree:
    """One bracketed tree -> post-order structure arrays."""

    def fail(msg: str) -> TreeParseError:
        return TreeParseError(f"{where}: error: {msg}")

    left: list[int] = []
    right: list[int] = []
    words: list[int] = []
    labels: list[int] = []
    open_nodes: list[tuple[int, list[int]]] = []  # (label, finished children)
    finished: list[int] = []
    pos, n = 0, len(text)
    while pos < n:
        ch = text[pos]
        if ch.isspace():
            pos += 1
        elif ch == "(":
            if finished and not open_nodes:
                raise fail(f"text after the end of the tree at column {pos + 1}")
            end = pos + 1
            while end < n and text[end] not in " ()":
                end += 1
            token = text[pos + 1 : end]
            if not token.isdigit() or not 0 <= int(token) <= 4:
                raise fail(f"expected a label 0-4 at column {pos + 2}, got '{token}'")
            pos = end + 1 if end < n and text[end] == " " else end
            if pos < n and text[pos] not in "()":
                close = text.find(")", pos)
                if close < 0:
                    raise fail("unbalanced brackets: missing ')'")
                left.append(-1), right.append(-1), labels.append(int(token))
                words.append(vocab.lookup(text[pos:close], grow))
                (open_nodes[-1][1] if open_nodes else finished).append(len(left) - 1)
                pos = close + 1
            else:
                open_nodes.append((int(token), []))
        elif ch == ")":
            if not open_nodes:
                raise fail(f"unbalanced brackets: unexpected ')' at column {pos + 1}")
            label, kids = open_nodes.pop()
            if len(kids) != 2:
                raise fail(f"a node has {len(kids)} children; trees must be binary")
            left.append(kids[0]), right.append(kids[1])
            words.append(-1), labels.append(label)
            (open_nodes[-1][1] if open_nodes else finished).append(len(left) - 1)
            pos += 1
        else:
            raise fail(f"unexpected '{ch}' at column {pos + 1}")
    if open_nodes:
        raise fail("unbalanced brackets: missing ')'")
    if len(finished) != 1:
        raise fail("expected exactly one tree on the line")
    as_array = lambda v: np.array(v, dtype=np.int32)  # noqa: E731
    return Tree(as_array(left), as_array(right), as_array(words), as_array(labels))


def load_sst(
    path: str | os.PathLike[str], vocab: Vocabulary | None = None, *, grow: bool = True
) -> tuple[list[Tree], Vocabulary]:
    """All trees of a file; the vocabulary grows unless `grow=False`."""
    vocab = Vocabulary() if vocab is None else vocab
    trees = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                trees.append(parse_tree(line, vocab, grow=grow, where=f"{path}:{number}"))
    return trees, vocab


def sst_path(split: str) -> Path | None:
    """`<split>.txt` from $RECIR_SST_DIR or ../shared/data/sst, if present."""
    folder = os.environ.get("RECIR_SST_DIR")
    base = Path(folder) if folder else Path(__file__).resolve().parents[3] / "shared/data/sst"
    path = base / f"{split}.txt"
    return path if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m recir.data.sst FILE", file=sys.stderr)
        return 2
    try:
        trees, vocab = load_sst(args[0])
    except OSError as e:
        print(f"error: cannot read '{args[0]}': {e.strerror}", file=sys.stderr)
        return 1
    except TreeParseError as e:
        print(e, file=sys.stderr)
        return 1
    nodes = sum(t.num_nodes for t in trees)
    depths = [t.depth() for t in trees]
    print(f"{len(trees)} trees, {nodes} nodes")
    print(f"depth mean {np.mean(depths):.1f} max {max(depths)}, vocabulary {len(vocab)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
