"""`recir.data.sst.download` over real HTTP from a server in the test: a good
archive, a corrupt one, a truncated one, a refused connection; and where SST
is looked for."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import threading
import zipfile
from pathlib import Path

import pytest

from recir.data import sst
from recir.data.download import DownloadError, Expected, download

SPLITS = {"train": "(3 (2 a) (4 good))\n(1 (1 bad) (2 b))\n",
          "dev": "(4 (2 a) (4 great))\n",
          "test": "(0 (0 awful) (2 .))\n(2 (2 a) (2 b))\n(3 (2 a) (3 nice))\n"}


def archive(splits: dict[str, str] = SPLITS) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for split, text in splits.items():
            z.writestr(f"trees/{split}.txt", text)
    return buffer.getvalue()


def expected(splits: dict[str, str] = SPLITS) -> dict[str, Expected]:
    return {s: Expected(hashlib.md5(t.encode()).hexdigest(), t.count("\n"))
            for s, t in splits.items()}


class Server:
    """Serves `body` at any path; `announce` overrides Content-Length (a
    larger value with a shorter body is a cut-off transfer)."""

    def __init__(self, body: bytes, announce: int | None = None):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(announce or len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: object) -> None:
                pass

        self.body = body
        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/trees.zip"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_good_archive_is_unpacked_and_verified(tmp_path) -> None:
    with Server(archive()) as server:
        folder = download(tmp_path / "sst", url=server.url, files=expected(),
                          progress=False)
    assert leftovers(folder) == ["dev.txt", "test.txt", "train.txt"]
    trees, vocab = sst.load_sst(folder / "test.txt")
    assert len(trees) == 3 and "awful" in vocab
    # verified files are kept: no second download (the server is gone)
    assert download(folder, url=server.url, files=expected(), progress=False) == folder


@pytest.mark.parametrize(("body", "announce", "message"), [
    (archive()[:-40], None, "not a valid zip"),  # corrupt: the directory is cut
    (archive()[:200], len(archive()), "cut short"),  # the connection closes early
    (archive({**SPLITS, "dev": "(4 (2 a) (4 grea7))\n"}), None, "dev.txt has MD5"),
    (archive({**SPLITS, "train": SPLITS["train"] * 2}), None, "train.txt has 4 trees"),
])
def test_bad_downloads_leave_nothing_usable(tmp_path, body, announce, message) -> None:
    folder = tmp_path / "sst"
    with Server(body, announce) as server, pytest.raises(DownloadError, match=message):
        download(folder, url=server.url, files=expected(), progress=False)
    assert leftovers(folder) == []


def test_refused_connection(tmp_path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match="cannot download"):
        download(tmp_path, url=f"http://127.0.0.1:{port}/x.zip", files=expected(),
                 progress=False, timeout=5)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("url", ["nlp.stanford.edu/x.zip", ""])
def test_a_url_without_a_scheme_is_a_download_error(tmp_path, url) -> None:
    """urllib's ValueError ('unknown url type') came out of `download` as it was."""
    with pytest.raises(DownloadError, match=f"^cannot download {url}: unknown url type"):
        download(tmp_path, url=url, files=expected(), progress=False)
    assert leftovers(tmp_path) == []


def test_fetch_cli_and_sst_path_find_the_download(tmp_path, monkeypatch,
                                                  capsys) -> None:
    monkeypatch.delenv("RECIR_SST_DIR", raising=False)
    monkeypatch.setenv("RECIR_DATA_DIR", str(tmp_path))
    with Server(archive()) as server:
        monkeypatch.setattr(sst, "download", lambda dir, force: download(
            dir, url=server.url, files=expected(), progress=False, force=force))
        assert sst.main(["fetch"]) == 0
    assert "verified" in capsys.readouterr().out
    assert sst.sst_path("test") == tmp_path / "sst" / "test.txt"
    assert sst.sst_folder("train", "dev") == tmp_path / "sst"
    monkeypatch.setattr(sst, "download", lambda dir, force: download(
        dir, url="http://127.0.0.1:1/x.zip", files=expected(), progress=False,
        force=True))
    assert sst.main(["fetch", str(tmp_path / "other")]) == 1
    assert capsys.readouterr().err.startswith("error: cannot download")


def test_unlabelled_trees_parse_with_labels_optional() -> None:
    vocab = sst.Vocabulary()
    tree = sst.parse_tree("((It) ((3) (good)))", vocab, labelled=False)
    assert tree.label.tolist() == [-1, -1, -1, -1, -1]
    assert vocab.words == ["<unk>", "It", "3", "good"]
    mixed = sst.parse_tree("(4 (2 It) ((2 3) (good)))", vocab, labelled=False)
    assert mixed.label.tolist() == [2, 2, -1, -1, 4]
    with pytest.raises(sst.TreeParseError, match="expected a label"):
        sst.parse_tree("((It) (good))", vocab)


def test_fetch_into_a_file_says_it_is_a_file(tmp_path, capsys) -> None:
    """mkdir's 'File exists' read as if the folder were fine."""
    (tmp_path / "notes.txt").write_text("keep me")
    assert sst.main(["fetch", str(tmp_path / "notes.txt")]) == 1
    assert capsys.readouterr().err == (f"error: {tmp_path / 'notes.txt'} is a file, not "
                                       "a folder to put SST in\n")
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_a_valid_zip_that_does_not_verify_says_what_is_wrong(tmp_path) -> None:
    """DownloadError is a RuntimeError, which unpack's zip check caught and
    reworded: every failure read "not a valid zip archive", URL twice."""
    bad_dev = {**SPLITS, "dev": "(4 (2 a) (4 grea7))\n"}
    digest = hashlib.md5(bad_dev["dev"].encode()).hexdigest()
    no_test = {s: t for s, t in SPLITS.items() if s != "test"}
    cases = [
        (archive(bad_dev), f"dev.txt has MD5 {digest}, expected "
                           f"{expected()['dev'].md5}"),
        (archive({**SPLITS, "train": SPLITS["train"] * 2}),
         "train.txt has 4 trees, expected 2"),
        (archive(no_test), "the archive has no test.txt"),
    ]
    for body, message in cases:
        with Server(body) as server, pytest.raises(DownloadError) as caught:
            download(tmp_path / "sst", url=server.url, files=expected(),
                     progress=False)
        assert str(caught.value) == f"{server.url}: {message}"
        assert leftovers(tmp_path / "sst") == []
