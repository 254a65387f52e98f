"""The word-vector reader on tiny files in each format: GloVe and word2vec
text, plain, .gz and .zip; lowercase fallback and malformed lines."""

from __future__ import annotations

import gzip
import zipfile

import numpy as np
import pytest

from recir.data.embeddings import EmbeddingError, read_embeddings
from recir.data.sst import Vocabulary

GLOVE = "the 0.1 0.2 0.3\ngood 1 2 3\nGood 4 5 6\nbad -1 -2 -3.5\nunused 9 9 9\n"


def vocab() -> Vocabulary:
    return Vocabulary.from_words(["Good", "good", "Bad", "movie", "the"])


def check(vectors: np.ndarray, found: np.ndarray) -> None:
    v = vocab()
    assert vectors.shape == (6, 3) and vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors[v["Good"]], [4, 5, 6])  # exact beats "good"
    np.testing.assert_array_equal(vectors[v["good"]], [1, 2, 3])
    np.testing.assert_array_equal(vectors[v["Bad"]], [-1, -2, -3.5])  # lowercase
    np.testing.assert_allclose(vectors[v["the"]], [0.1, 0.2, 0.3])
    assert found.tolist() == [False, True, True, True, False, True]
    assert not vectors[~found].any()


@pytest.mark.parametrize("form", ["glove", "word2vec.gz", "glove.zip"])
def test_reader_in_each_format(tmp_path, form: str) -> None:
    text = GLOVE if form.startswith("glove") else "5 3\n" + GLOVE
    if form == "glove":
        path = tmp_path / "v.txt"
        path.write_text(text)
    elif form.endswith(".gz"):
        path = tmp_path / "v.txt.gz"
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path = tmp_path / "v.zip"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("glove.6B.3d.txt", text)
    check(*read_embeddings(path, vocab()))


@pytest.mark.parametrize("form", ["glove", "word2vec.gz", "glove.zip"])
def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path, form: str) -> None:
    """A file saved with a BOM (Windows editors) lost its first word: it was
    read as '\ufeffthe' and matched nothing, silently."""
    text = "\ufeff" + (GLOVE if form.startswith("glove") else "5 3\n" + GLOVE)
    path = tmp_path / ("v.txt" if form == "glove" else "v.txt.gz" if form.endswith(".gz")
                       else "v.zip")
    if form == "glove":
        path.write_text(text, encoding="utf-8")
    elif form.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("glove.6B.3d.txt", text.encode("utf-8"))
    check(*read_embeddings(path, vocab()))


@pytest.mark.parametrize(("text", "message"), [
    ("good 1 2 3\nbad 1 2\n", r"v.txt:2: 'bad' has 2 values, expected 3"),
    ("good 1 x 3\n", r"v.txt:1: 'good' has a value that is not a finite float32 number"),
    ("", "no vectors"),
    # non-finite values would train to NaN without a word said (1e39 is inf as float32)
    ("good nan 2 3\n", r"v.txt:1: 'good' has a value that is not a finite float32 number"),
    ("other 1 2 3\ngood 1 -inf 3\n", r"v.txt:2: 'good' has a value that is not a finite"),
    ("good 1 1e39 3\n", r"v.txt:1: 'good' has a value that is not a finite"),
    # a word2vec header's width was allocated for the vocabulary before any line agreed
    ("3 999999999999\nother 1 2 3\n", r"v.txt:2: 'other' has 3 values, the header says "
                                        "999999999999"),
    ("3 999999999999\n", "no vectors"),
    # a text file, not vectors: its first line's words set the width (1 here)
    # and no word matched, so training went on with 1-d embeddings
    ("hello world\nbye for now\n", r"v.txt:1: 'hello' has a value that is not a "
                                      "finite float32 number"),
    # '²' is a digit to str.isdigit, not to int(): a ValueError read it as a header
    ("3 \u00b2\ngood 1 2 3\n", r"v.txt:1: '3' has a value that is not a finite"),
])
def test_malformed_files(tmp_path, text: str, message: str) -> None:
    (tmp_path / "v.txt").write_text(text)
    with pytest.raises(EmbeddingError, match=message):
        read_embeddings(tmp_path / "v.txt", vocab())
    with pytest.raises(EmbeddingError, match="cannot read"):
        read_embeddings(tmp_path / "missing.txt", vocab())


@pytest.mark.parametrize(("flag", "method", "message"), [
    (1, 0, "is encrypted"),  # zipfile's RuntimeError
    (0, 99, "compression method is not supported"),  # its NotImplementedError
])
def test_a_zip_member_zipfile_cannot_read_is_an_embedding_error(tmp_path, flag, method,
                                                                 message) -> None:
    path = tmp_path / "v.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("v.txt", b"good 1 2 3\n")
    data = bytearray(path.read_bytes())
    for signature, at_flag in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature) + at_flag  # (each header: flags, then the method)
        data[at] |= flag
        data[at + 2] = method or data[at + 2]
    path.write_bytes(data)
    with pytest.raises(EmbeddingError, match=f"v.zip: cannot read vectors: .*{message}"):
        read_embeddings(path, vocab())


@pytest.mark.parametrize("header", ["", "4 2\n"])
def test_words_with_spaces_take_the_fields_before_the_values(tmp_path, header) -> None:
    """GloVe 840B has lines such as `. . . 0.1 0.2`: the first field was taken
    as the word and '.' as a value, and the whole file was refused."""
    path = tmp_path / "v.txt"
    path.write_text(header + ". . . 0.1 0.2\n. 0.3 0.4\nat name@domain.com 5 6\n"
                             "at 7 8\n")
    v = Vocabulary.from_words([".", "at", "film"])
    vectors, found = read_embeddings(path, v)
    np.testing.assert_allclose(vectors, [[0, 0], [0.3, 0.4], [7, 8], [0, 0]])
    assert found.tolist() == [False, True, True, False]


@pytest.mark.parametrize(("text", "message"), [
    # a field too many that is a number is a wrong width, not part of the word
    ("good 1 2\nbad 1 2 3\n", "v.txt:2: 'bad' has 3 values, expected 2"),
    ("good 1 2\n. . . nan 2\n", "v.txt:2: '. . .' has a value that is not a finite "
                                 "float32 number"),
    ("3 3\n. . . 0.1 0.2\n", "v.txt:2: '. . .' has 2 values, the header says 3"),
    ("good 1 x 3\n", "v.txt:1: 'good' has a value that is not a finite float32 number"),
])
def test_spaced_words_leave_malformed_lines_errors(tmp_path, text, message) -> None:
    (tmp_path / "v.txt").write_text(text)
    with pytest.raises(EmbeddingError) as caught:
        read_embeddings(tmp_path / "v.txt", Vocabulary.from_words(["bad", "good", ". . ."]))
    assert str(caught.value) == f"{tmp_path}/{message}"


@pytest.mark.parametrize("header", ["", "5 3\n", "\n5\t3\n"])
def test_tabs_separate_like_spaces_and_blank_lines_are_skipped(tmp_path, header) -> None:
    """A tab-separated file was refused ('expected a word and its values',
    no word of tabs); a blank first line was an error, later ones skipped."""
    text = "\n  \n" + header + GLOVE.replace(" ", "\t").replace("\n", "\n\n", 2)
    (tmp_path / "v.txt").write_text(text)
    check(*read_embeddings(tmp_path / "v.txt", vocab()))


@pytest.mark.parametrize(("text", "message"), [
    # a value that is not a number on the first line: read as part of the word
    # ('the 0x1', value 2), it set a width of 1 for the whole file
    ("the 0x1 2\ngood 1 2\n", "v.txt:1: 'the' has a value that is not a finite float32 "
                               "number"),
    ("\n\nthe 1 2,5\n", "v.txt:3: 'the' has a value that is not a finite float32 number"),
])
def test_the_width_comes_from_a_well_formed_first_vector(tmp_path, text, message) -> None:
    (tmp_path / "v.txt").write_text(text)
    with pytest.raises(EmbeddingError) as caught:
        read_embeddings(tmp_path / "v.txt", vocab())
    assert str(caught.value) == f"{tmp_path}/{message}"


def test_a_word_listed_twice_keeps_its_first_vector(tmp_path) -> None:
    (tmp_path / "v.txt").write_text("good 1 2\nGood 3 4\ngood 5 6\nGood 7 8\n")
    vectors, found = read_embeddings(tmp_path / "v.txt", vocab())
    v = vocab()
    assert vectors[v["good"]].tolist() == [1, 2] and vectors[v["Good"]].tolist() == [3, 4]
    assert found.sum() == 2


def test_a_vocabulary_that_is_no_vocabulary_is_named(tmp_path) -> None:
    """A dict of word ids was an AttributeError ('dict' object has no attribute 'ids')."""
    (tmp_path / "v.txt").write_text(GLOVE)
    with pytest.raises(TypeError, match=r"^read_embeddings: vocab must be a Vocabulary "
                                        r".*got dict$"):
        read_embeddings(tmp_path / "v.txt", {"the": 0})
