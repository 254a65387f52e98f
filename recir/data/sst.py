"""Stanford Sentiment Treebank loader (PTB bracket files) and a vocabulary.

One tree per line, a label 0-4 on every node, strictly binary:
`(3 (2 It) (4 (4 (2 's) (4 good)) (2 .)))`. A leaf's word is everything after
its label up to the closing bracket, because one SST word contains a space
(`(2 8 1\\/2)`). Parsing is iterative, so deep trees cannot exhaust Python's
stack, and errors say `file:line: error: ...` so a bad line is easy to find.

`python -m recir.data.sst FILE` prints tree/node counts, depth and vocabulary;
`python -m recir.data.sst fetch [DIR]` downloads SST (`recir.data.download`).
"""

from __future__ import annotations

import argparse
import os
import sys
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from recir.data.download import DownloadError, data_dir, download
from recir.data.trees import Tree

LABELS = frozenset("01234")


class TreeParseError(ValueError):
    """Malformed tree text; the message starts with `file:line: error:`."""


class Vocabulary:
    """Word -> id in first-seen order; id 0 is `<unk>`, used for unseen words."""

    UNK = "<unk>"

    def __init__(self) -> None:
        self.ids: dict[str, int] = {self.UNK: 0}
        self.words: list[str] = [self.UNK]

    @classmethod
    def from_words(cls, words: Iterable[str]) -> Vocabulary:
        vocab = cls()
        for w in words:
            vocab.lookup(w, grow=True)
        return vocab

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.ids

    def __getitem__(self, word: str) -> int:
        return self.ids.get(word, 0)

    def lookup(self, word: str, grow: bool = False) -> int:
        """The word's id; a new word gets the next id when `grow`, else 0."""
        found = self.ids.get(word)
        if found is not None:
            return found
        if not grow:
            return 0
        self.ids[word] = len(self.words)
        self.words.append(word)
        return self.ids[word]


def parse_tree(
    text: str, vocab: Vocabulary, *, file: str | os.PathLike[str] | None = None,
    line: int | None = None, grow: bool = True, labelled: bool = True,
) -> Tree:
    """One bracketed tree -> post-order structure arrays (see `recir.data.trees`).

    `file` and `line` only locate errors; `grow=False` maps new words to 0.
    With `labelled=False` a node's label may be left out (`((a) (b))`, label
    -1); a digit is then a label only when something follows it, so `(3)` is
    the word 3 and `(2 3)` the word 3 labelled 2.
    """
    name = "<string>" if file is None else os.fspath(file)
    return TreeText(text, vocab, f"{name}:{1 if line is None else line}", grow,
                    labelled).parse()


class TreeText:
    """One tree's text read left to right: a node's arrays are appended when
    it closes (so they come out in post order), open nodes on a stack."""

    def __init__(self, text: str, vocab: Vocabulary, where: str, grow: bool, labelled: bool):
        self.text, self.vocab, self.where = text, vocab, where
        self.grow, self.labelled = grow, labelled
        self.left: list[int] = []
        self.right: list[int] = []
        self.words: list[int] = []
        self.labels: list[int] = []
        # open nodes as (label, column of '(', finished child indices)
        self.stack: list[tuple[int, int, list[int]]] = []
        self.done = False  # the root has closed

    def fail(self, msg: str) -> TreeParseError:
        return TreeParseError(f"{self.where}: error: {msg}")

    def parse(self) -> Tree:
        text, pos, n, stack = self.text, 0, len(self.text), self.stack
        while pos < n:
            ch = text[pos]
            if ch in " \t\r\n":
                pos += 1
            elif ch == ")" and not stack:
                raise self.fail(f"unbalanced brackets: unexpected ')' at column {pos + 1}")
            elif self.done:
                raise self.fail(self.after_the_end(pos))
            elif ch == "(":
                pos = self.open(pos)
            elif ch == ")":
                self.close()
                pos += 1
            else:
                raise self.fail(f"unexpected {shown(ch)} at column {pos + 1}, expected '('")
        if stack:
            raise self.fail(f"unbalanced brackets: missing ')' for column {stack[-1][1]}")
        if not self.done:
            raise self.fail("expected a tree, got an empty line")
        return Tree(*(np.array(v, dtype=np.int32)
                      for v in (self.left, self.right, self.words, self.labels)))

    def after_the_end(self, pos: int) -> str:
        """A second tree on the line most often means a file whose lines end
        in CR alone (classic Mac OS): read as one line, it said only this."""
        text = self.text
        where = f"text after the end of the tree at column {pos + 1}"
        if "\r" in text[len(text[:pos].rstrip(" \t\r\n")) : pos]:
            return f"{where}: lines end in CR alone; tree files need LF or CR LF line ends"
        return where if text[pos].isprintable() else f"{where}: {shown(text[pos])}"

    def open(self, pos: int) -> int:
        """The node whose '(' is at `pos`: its label, then its word (a leaf,
        finished at once) or its children to come; where reading goes on."""
        text, n = self.text, len(self.text)
        end = pos + 1
        while end < n and text[end] not in " \t\r\n()":
            end += 1
        column, token = pos + 1, text[pos + 1 : end]
        if token in LABELS and (self.labelled or self.next_char(end) != ")"):
            label, pos = int(token), end
        elif self.labelled:
            got = shown(token) if token else "nothing"
            raise self.fail(f"expected a label 0-4 at column {pos + 2}, got {got}")
        else:
            label, pos = -1, pos + 1
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos < n and text[pos] not in "()":  # a leaf: the word runs to ')'
            return self.leaf(label, column, pos)
        self.stack.append((label, column, []))
        return pos

    def next_char(self, pos: int) -> str:
        """The first character from `pos` on that is not a space, without
        copying the rest of the line (a copy per node made a long line's
        parse quadratic: 33 s for 120,000 nodes)."""
        text, n = self.text, len(self.text)
        while pos < n and text[pos].isspace():  # (as `str.lstrip` skips)
            pos += 1
        return text[pos : pos + 1]

    def leaf(self, label: int, column: int, pos: int) -> int:
        close = self.text.find(")", pos)
        if close < 0:
            raise self.fail(f"unbalanced brackets: missing ')' for column {column}")
        word = self.text[pos:close].rstrip()
        if "(" in word:
            first = word.split("(")[0].strip()  # (unlabelled: `(9 (2 a) ...` read 9 as a word)
            hint = f" ('{first}' is no label 0-4)" if first.isdigit() and not self.labelled \
                else ""
            raise self.fail(f"node at column {column} mixes a word and children{hint}")
        self.finish(-1, -1, self.vocab.lookup(word, self.grow), label)
        return close + 1

    def close(self) -> None:
        label, column, kids = self.stack.pop()
        if len(kids) != 2:
            count = "no word and no children" if not kids else (
                f"{len(kids)} child{'ren' if len(kids) > 1 else ''}")
            raise self.fail(f"node at column {column} has {count}; trees must be binary")
        self.finish(kids[0], kids[1], -1, label)

    def finish(self, left: int, right: int, word: int, label: int) -> None:
        """A node's arrays, the node given to its parent; the root's end the tree."""
        self.left.append(left)
        self.right.append(right)
        self.words.append(word)
        self.labels.append(label)
        if self.stack:
            self.stack[-1][2].append(len(self.left) - 1)
        self.done = not self.stack


def shown(text: str) -> str:
    """`text` quoted, with each invisible or unusual character escaped and
    named: printed as it is, a no-break space read as a plain space."""
    odd = [ch for ch in dict.fromkeys(text) if not ch.isprintable()]
    quoted = "".join(ch.encode("unicode_escape").decode() if ch in odd else ch
                     for ch in text)
    names = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip() for ch in odd)
    return f"'{quoted}' ({names})" if odd else f"'{quoted}'"


def load_sst(
    path: str | os.PathLike[str], vocab: Vocabulary | None = None, *,
    grow_vocab: bool = True,
) -> tuple[list[Tree], Vocabulary]:
    """All trees of a file (blank lines skipped) and the vocabulary they used.

    Pass the training split's vocabulary with `grow_vocab=False` for dev/test,
    so that unseen words map to `<unk>` (0) and embedding tables keep their size.
    """
    vocab = Vocabulary() if vocab is None else vocab
    if not isinstance(vocab, Vocabulary):  # (a dict failed at its first word, in parse_tree)
        raise TypeError(f"load_sst: vocab must be a Vocabulary (Vocabulary.from_words makes "
                        f"one from words), got {type(vocab).__name__}")
    trees: list[Tree] = []
    if os.path.isdir(path):
        raise TreeParseError(f"{os.fspath(path)}: error: is a folder, expected a tree file")
    with open(path, "rb") as f:  # decoded line by line: an error names its line
        for number, raw in enumerate(f, start=1):
            try:  # (a byte-order mark, as editors on Windows write one, is no text)
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                where = f"{os.fspath(path)}:{number}:{e.start + 1}"
                raise TreeParseError(f"{where}: error: byte 0x{raw[e.start]:02x} is not "
                                     "valid UTF-8 (tree files are UTF-8 text)") from None
            if text.strip():
                trees.append(parse_tree(text, vocab, file=path, line=number,
                                        grow=grow_vocab))
    return trees, vocab


def sst_folders() -> list[Path]:
    """Where SST is looked for, in order: $RECIR_SST_DIR when set, else the
    download folder (`data_dir()`) and the checkout's ../shared/data/sst."""
    folder = os.environ.get("RECIR_SST_DIR")
    if folder:
        return [Path(folder)]
    project = Path(__file__).resolve().parents[2]
    return [data_dir(), project.parent / "shared/data/sst"]


def sst_folder(*splits: str) -> Path | None:
    """The first of `sst_folders()` holding every `<split>.txt` asked for."""
    for folder in sst_folders():
        if all((folder / f"{s}.txt").is_file() for s in splits or ("train",)):
            return folder
    return None


def sst_path(split: str) -> Path | None:
    """`<split>.txt` from the first of `sst_folders()` that has it.

    None when the file is absent, so callers can fall back to synthetic trees;
    the data is read in place and never copied into the project.
    """
    folder = sst_folder(split)
    return folder / f"{split}.txt" if folder else None


def fetch_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recir.data.sst fetch",
        description="Download SST train/dev/test (trainDevTestTrees_PTB.zip), verify "
        "them and unpack them atomically.")
    parser.add_argument("dir", nargs="?", type=Path,
                        help=f"target folder (default {data_dir()}, from "
                        "$RECIR_DATA_DIR)")
    parser.add_argument("--force", action="store_true",
                        help="download even when verified files are there")
    args = parser.parse_args(argv)
    try:
        folder = download(args.dir, force=args.force)
    except DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"SST train, dev and test verified in {folder}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fetch"]:
        return fetch_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m recir.data.sst",
                                     description="Summarise an SST bracket file "
                                     "(`fetch [DIR]` downloads SST instead).")
    parser.add_argument("file", help="one bracketed tree per line")
    args = parser.parse_args(argv)
    try:
        trees, vocab = load_sst(args.file)
    except OSError as e:
        print(f"error: cannot read '{args.file}': {e.strerror}", file=sys.stderr)
        return 1
    except TreeParseError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"{len(trees)} trees, {sum(t.num_nodes for t in trees)} nodes")
    if trees:
        depths = [t.depth() for t in trees]
        print(f"depth mean {np.mean(depths):.1f} max {max(depths)}, "
              f"vocabulary {len(vocab)} words (with <unk>)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
