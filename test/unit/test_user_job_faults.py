"""Faults found walking the user's job: pretrained vectors (case fallback, a
corrupt archive), a checkpoint write that fails, MPI without its library, and
`--save-model` under several ranks."""

from __future__ import annotations

import errno
import gzip
import io
import re
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

from recir.data.embeddings import EmbeddingError, read_embeddings
from recir.data.sst import Vocabulary
from recir.examples import sentiment
from recir.train import SGD, CheckpointError, load_checkpoint, save_checkpoint
from recir.train import checkpoint as checkpoint_module
from recir.train.distributed import import_mpi

VECTORS = "".join(f"w{i} {i} {i + 1} {i + 2}\n" for i in range(2000)).encode()


def test_a_capitalised_word_takes_its_lowercase_vector_when_both_are_words(tmp_path):
    """GloVe 6B is lowercased: 'The' (1688 such SST words) kept a random
    vector because 'the' was in the vocabulary too."""
    words = ["The", "the", "It", "Good", "good", "Movie"]
    (tmp_path / "v.txt").write_text("the 1 2\nit 3 4\ngood 5 6\nGood 7 8\nthe 9 9\n")
    vectors, found = read_embeddings(tmp_path / "v.txt", Vocabulary.from_words(words))
    # the file's first line for a word wins; its own case wins over lowercase
    want = {"The": [1, 2], "the": [1, 2], "It": [3, 4], "Good": [7, 8], "good": [5, 6]}
    for k, word in enumerate(["<unk>", *words], start=0):
        assert found[k] == (word in want), word
        np.testing.assert_array_equal(vectors[k], want.get(word, [0, 0]), err_msg=word)


def corrupt(form: str) -> bytes:
    """`VECTORS` packed as `form`, with deflate data overwritten."""
    if form == "gz":
        data = bytearray(gzip.compress(VECTORS, mtime=0))
        data[30:60] = b"\xff" * 30
        return bytes(data)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("v.txt", VECTORS)
    data = bytearray(out.getvalue())
    data[55:85] = b"\xff" * 30  # (the member's data starts at byte 35)
    return bytes(data)


@pytest.mark.parametrize("form", ["gz", "zip"])
def test_a_corrupt_archive_of_vectors_is_an_embedding_error(tmp_path, capsys, form):
    """zlib.error went up as a traceback from the sentiment job."""
    path = tmp_path / f"v.txt.{form}"
    path.write_bytes(corrupt(form))
    where = re.escape(str(path))
    with pytest.raises(EmbeddingError, match=rf"^{where}: cannot read vectors: Error"):
        read_embeddings(path, Vocabulary.from_words(["w1999"]))
    data = tmp_path / "sst"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.txt").write_text("(3 (2 w1) (3 w2))\n")
    assert sentiment.main(["--data", str(data), "--embeddings", str(path),
                           "--no-progress", "--threads", "1"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: cannot read vectors: ")


def test_a_checkpoint_that_cannot_be_written_leaves_no_temporary(tmp_path, monkeypatch):
    """A failed write left `c.npz.tmp.npz` half-written and raised OSError."""
    params = {"w": np.arange(3, dtype=np.float32)}
    path = tmp_path / "c.npz"
    save_checkpoint(path, params, SGD(params, lr=0.1), 1, np.random.default_rng(0))
    good = path.read_bytes()

    def disk_full(file, **arrays):
        Path(file).write_bytes(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module.np, "savez", disk_full)
    where = re.escape(str(path))
    with pytest.raises(CheckpointError, match=rf"^{where}: cannot write: No space"):
        save_checkpoint(path, params, SGD(params, lr=0.1), 2, np.random.default_rng(0))

    def interrupted(file, **arrays):
        Path(file).write_bytes(b"PK\x03\x04 partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint_module.np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, params, SGD(params, lr=0.1), 2, np.random.default_rng(0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]
    assert path.read_bytes() == good
    assert load_checkpoint(path, params, SGD(params, lr=0.1))[0] == 1


def test_mpi4py_without_an_mpi_library_says_what_is_missing(monkeypatch, capsys):
    """mpi4py 4 raises RuntimeError (two lines) when it finds no libmpi: that
    went through unexplained."""
    fake = types.ModuleType("mpi4py")

    def no_library(name: str):
        raise RuntimeError("cannot load MPI library\n/x/libmpi.so: cannot open shared "
                           "object file: No such file or directory")

    fake.__getattr__ = no_library
    monkeypatch.setitem(sys.modules, "mpi4py", fake)
    want = ("distributed training needs mpi4py and an MPI library: pip install "
            "'recir[distributed]' (cannot load MPI library)")
    with pytest.raises(RuntimeError) as caught:
        import_mpi()
    assert str(caught.value) == want
    assert sentiment.main(["--distributed", "--synthetic", "--no-progress"]) == 2
    assert capsys.readouterr().err == f"error: --distributed: {want}\n"
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # mpi4py itself absent
    with pytest.raises(RuntimeError) as caught:
        import_mpi()
    assert str(caught.value) == want.removesuffix(" (cannot load MPI library)")


SPY = """
import sys
from mpi4py import MPI
from recir.examples import sentiment
save = sentiment.save_model
def spy(*args):
    print(f"rank {MPI.COMM_WORLD.Get_rank()} saves", file=sys.stderr, flush=True)
    save(*args)
sentiment.save_model = spy
sys.exit(sentiment.main(sys.argv[1:]))
"""


def test_save_model_under_two_ranks_is_written_by_rank_0_alone(tmp_path):
    """Every rank wrote the model through the same temporary file: one
    rank's rename found it gone (a traceback), and the file kept could be a
    non-root rank's last-epoch parameters instead of the best epoch's."""
    pytest.importorskip("mpi4py")
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if not mpiexec.exists():
        pytest.skip("no mpiexec beside this Python (pip install 'recir[distributed]')")
    model = tmp_path / "m.npz"
    command = [str(mpiexec), "-n", "2", sys.executable, "-c", SPY, "--synthetic",
               "--hidden", "4", "--embed", "4", "--epochs", "1", "--max-train", "10",
               "--no-all-nodes", "--no-progress", "--threads", "1", "--distributed",
               "--save-model", str(model)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    saves = [line for line in result.stderr.splitlines() if line.endswith(" saves")]
    assert saves == ["rank 0 saves"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


FILE_LIMIT = """
import resource, signal, sys
from recir.data.download import DownloadError, Expected, download
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.RLIM_INFINITY))
try:
    download(sys.argv[1], url=sys.argv[2], files={"train": Expected(None, 2000)},
             progress=False)
except DownloadError as e:
    print(f"DownloadError: {e}")
"""


def test_sst_that_cannot_be_written_is_a_download_error(tmp_path):
    """Unpacking into a folder without room raised OSError (a traceback from
    `python -m recir.data.sst fetch`); the archive itself fits."""
    source = tmp_path / "trees.zip"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("trees/train.txt", "(2 a)\n" * 2000)  # 12 kB, deflated to ~100 B
    folder = tmp_path / "sst"
    result = subprocess.run(
        [sys.executable, "-c", FILE_LIMIT, str(folder), source.as_uri(), "4096"],
        capture_output=True, text=True, timeout=60)
    want = f"DownloadError: cannot write SST into {folder}: File too large\n"
    assert result.stdout == want, result.stderr
    assert list(folder.iterdir()) == []


def test_a_tree_file_with_a_byte_order_mark_reads_as_without(tmp_path):
    """Predicting and the vectors reader took a BOM; training's reader said
    "unexpected '\\ufeff' at column 1"."""
    from recir.data.sst import load_sst

    text = "(3 (2 good) (4 film))\n(1 bad)\n"
    (tmp_path / "plain.txt").write_text(text)
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + text.encode())
    plain, plain_vocab = load_sst(tmp_path / "plain.txt")
    marked, marked_vocab = load_sst(tmp_path / "bom.txt")
    assert plain_vocab.ids == marked_vocab.ids
    for a, b in zip(plain, marked, strict=True):
        assert repr(a) == repr(b)


def test_one_file_for_two_outputs_is_refused(tmp_path, capsys):
    """--save-model over --checkpoint's file replaced the checkpoint, and a
    later --resume failed."""
    same = tmp_path / "run.npz"
    code = sentiment.main(["--synthetic", "--no-progress", "--checkpoint", str(same),
                           "--save-model", str(tmp_path / "." / "run.npz")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --metrics, --checkpoint and --save-model must name different files")
    assert not same.exists()


def test_a_resume_that_freezes_what_was_trained_says_so(tmp_path):
    """Resuming with --freeze-embeddings, where the saved run trained the
    embeddings, said "optimizer state m of 'emb' is not a parameter of this
    model (another model's checkpoint?)"."""
    from recir.train import Adam

    def model():
        return {"emb": np.ones((4, 2), np.float32), "w": np.ones(2, np.float32)}

    params, path = model(), tmp_path / "c.npz"
    optimizer = Adam(params, lr=0.1)
    optimizer.step({k: np.full_like(v, 0.5) for k, v in params.items()})
    save_checkpoint(path, params, optimizer, 1, np.random.default_rng(0))
    again = Adam(fresh := model(), lr=0.1)
    again.frozen = frozenset({"emb"})
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: 'emb' was trained "
                       "when it was saved and is frozen now: resume with the same"):
        load_checkpoint(path, fresh, again)
    assert load_checkpoint(path, fresh, Adam(fresh, lr=0.1))[0] == 1
