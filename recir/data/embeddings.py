"""Pretrained word vectors in GloVe or word2vec text format, for a vocabulary.

A line is a word and its values separated by spaces or tabs; word2vec files
start with a `count dim` header line, GloVe files do not. Blank lines are
skipped. A few GloVe 840B words hold spaces (`. . .`, `at name@domain.com`):
a line's last `dim` fields are its values, and fields before them that do
not start like a number belong to the word. The first vector sets `dim`, so
its values must all be numbers; later lines are parsed only for the
vocabulary's words, and a word listed twice keeps its first vector. Files may be plain,
`.gz` or `.zip` (its one text member). The file is streamed and only the
vocabulary's rows are kept, so GloVe 840B (5.6 GB) costs the memory of the
SST table. A vocabulary word missing from the file takes the vector of its
lowercase form when the file has that (GloVe 6B is lowercased; SST is not).
"""

from __future__ import annotations

import gzip
import io
import os
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np

from recir.data.sst import Vocabulary


class EmbeddingError(ValueError):
    """An unreadable or malformed vectors file; the message is one line."""


@contextmanager
def open_text(path: Path) -> Iterator[IO[str]]:
    """The file as UTF-8 text, unpacking `.gz` and `.zip` on the fly."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8-sig", errors="replace") as f:
            yield f
    elif path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            members = [n for n in z.namelist() if not n.endswith("/")]
            if len(members) != 1:
                raise EmbeddingError(f"{path}: a .zip of vectors must hold one file, "
                                     f"found {len(members)}")
            with z.open(members[0]) as raw:
                yield io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace")
    else:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            yield f


def read_embeddings(path: str | os.PathLike[str], vocab: Vocabulary
                    ) -> tuple[np.ndarray, np.ndarray]:
    """`(vectors, found)`: a `(len(vocab), dim)` float32 table with the file's
    vector in each found row (zeros elsewhere) and the boolean mask of found
    rows. Raises `EmbeddingError` naming the file and line."""
    path = Path(path)
    if not isinstance(vocab, Vocabulary):  # (a dict failed at `vocab.ids`, as in load_sst)
        raise TypeError(f"read_embeddings: vocab must be a Vocabulary (Vocabulary.from_words "
                        f"makes one from words), got {type(vocab).__name__}")
    lower: dict[str, list[int]] = {}
    for word, index in vocab.ids.items():
        if word.lower() != word:
            lower.setdefault(word.lower(), []).append(index)
    try:
        with open_text(path) as f:
            return scan(f, path, vocab, lower)
    # (zipfile's RuntimeError: an encrypted member; NotImplementedError: a
    # compression method it lacks)
    except (OSError, zipfile.BadZipFile, EOFError, zlib.error, RuntimeError,
            NotImplementedError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise EmbeddingError(f"{path}: cannot read vectors: {reason}") from None


def scan(lines: IO[str], path: Path, vocab: Vocabulary, lower: dict[str, list[int]]
         ) -> tuple[np.ndarray, np.ndarray]:
    vectors = np.zeros((len(vocab), 0), np.float32)  # its width: the first vector's
    exact = np.zeros(len(vocab), bool)
    by_lowercase = np.zeros(len(vocab), bool)
    dim, first = 0, True
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\r\n")
        if "\t" in text:  # (tested first: most files have none, and a copy costs)
            text = text.replace("\t", " ")
        text = text.rstrip(" ")
        if not text:  # (anywhere: a blank first line was an error, later ones not)
            continue
        word, _, rest = text.partition(" ")
        if first and not dim and word.isdecimal() and rest.strip().isdecimal():
            dim = int(rest)  # the word2vec header: count and dimension ('²' is a digit)
            continue
        # (the same test on every line: `the 0x1 2` first set a width of 1,
        # its word read as 'the 0x1')
        spaced = not starts_a_value(rest) and not is_number(rest.split(" ", 1)[0])
        if first:  # the first vector's width: the header's is used once it agrees
            if spaced:
                word, rest = spaced_word(word, rest, trailing_numbers(rest))
            first, dim = False, first_width(path, number, word, rest, dim)
            vectors = np.zeros((len(vocab), dim), np.float32)
            # read even for a word not in the vocabulary: a file of text (not
            # vectors) set a width of its first line's words and matched nothing
            row_values(path, number, word, rest, dim)
        elif spaced:
            word, rest = spaced_word(word, rest, dim)
        # the word's own row, and the rows of its other-case forms not yet found
        own = [r for r in [vocab.ids.get(word)] if r is not None and not exact[r]]
        cased = [r for r in lower.get(word, ()) if not (exact[r] or by_lowercase[r])]
        if own or cased:
            vectors[own + cased] = row_values(path, number, word, rest, dim)
            exact[own], by_lowercase[cased] = True, True
    if first:
        raise EmbeddingError(f"{path}: no vectors in the file")
    return vectors, exact | by_lowercase


def starts_a_value(rest: str) -> bool:
    """A digit or a minus and a digit: how every value of GloVe and word2vec
    starts, seen without converting it (a line's one check, on 2 million lines)."""
    return rest[:1].isdigit() or (rest[:1] == "-" and rest[1:2].isdigit())


def is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def trailing_numbers(rest: str) -> int:
    """How many of the last fields are numbers: the first line's width if its
    word holds spaces (checked against a header after)."""
    fields = rest.split()
    count = 0
    while count < len(fields) and is_number(fields[-1 - count]):
        count += 1
    return count


def spaced_word(word: str, rest: str, dim: int) -> tuple[str, str]:
    """`(word, values)` with the fields before the last `dim` joined to the
    word, where none of them is a number and the last `dim` all are; otherwise
    unchanged, so that a line with a value too many is still reported so."""
    fields = rest.split()
    if (not 0 < dim < len(fields) or any(map(is_number, fields[:-dim]))
            or not all(map(is_number, fields[-dim:]))):
        return word, rest
    return " ".join([word, *fields[:-dim]]), " ".join(fields[-dim:])


def first_width(path: Path, number: int, word: str, rest: str, header: int) -> int:
    """The first vector's number of values, which must agree with the
    word2vec header's dimension where there is one (`header`, else 0)."""
    width = len(rest.split())
    if not width:
        raise EmbeddingError(f"{path}:{number}: expected a word and its values")
    if header and width != header:
        raise EmbeddingError(f"{path}:{number}: '{word}' has {width} values, the "
                             f"header says {header}")
    return width


def row_values(path: Path, number: int, word: str, rest: str, dim: int) -> np.ndarray:
    """Line `number`'s `dim` values: finite float32 numbers."""
    try:
        with np.errstate(over="ignore"):  # (refused below)
            values = np.array(rest.split(), np.float32)
    except ValueError:
        values = np.array([np.nan], np.float32)
    if not np.isfinite(values).all():  # (as float32: 1e39 is inf)
        raise EmbeddingError(f"{path}:{number}: '{word}' has a value that is not a "
                             f"finite float32 number")
    if values.shape != (dim,):
        raise EmbeddingError(f"{path}:{number}: '{word}' has {values.size} values, "
                             f"expected {dim}")
    return values
