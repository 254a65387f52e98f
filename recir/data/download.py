"""Fetch SST's train/dev/test trees from the Stanford NLP archive, verified.

The archive is streamed to a hidden temporary file beside the target, each
split is checked (MD5 and tree count) before any is renamed into place, and
the temporaries are removed on every exit: an interrupted or corrupt download
never leaves a usable-looking `train.txt`. The standard library does the HTTP
(one GET of a 6 MB zip needs no retry logic or cache index, which is what a
library such as pooch would add); tqdm draws the progress bar.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import NamedTuple

from tqdm import tqdm

SST_URL = "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip"
CHUNK = 1 << 16


class Expected(NamedTuple):
    md5: str | None  # None: not checked
    trees: int | None


SST_FILES = {
    "train": Expected("b12d531b1b913a3bb49719ba5cc1f67a", 8544),
    "dev": Expected("c405f1d724964e6f72314b5a51fea691", 1101),
    "test": Expected("97b75f6ca1ae58b4d52fbf9381dc6f8c", 2210),
}


class DownloadError(RuntimeError):
    """The download failed or did not verify; the message is one line."""


def data_dir() -> Path:
    """Where `download` puts SST: `$RECIR_DATA_DIR/sst`, by default
    `~/.cache/recir/data/sst`."""
    root = os.environ.get("RECIR_DATA_DIR")
    return (Path(root) if root else Path.home() / ".cache/recir/data") / "sst"


def download(dir: str | os.PathLike[str] | None = None, *, url: str = SST_URL,
             files: dict[str, Expected] | None = None, progress: bool = True,
             timeout: float = 30.0, force: bool = False) -> Path:
    """Download and unpack `<split>.txt` for each split of `files` into `dir`
    (default `data_dir()`); returns the folder. Files already there that
    verify are kept unless `force`. Raises `DownloadError`."""
    folder = Path(dir) if dir is not None else data_dir()
    files = SST_FILES if files is None else files
    if not force and present(folder, files):
        return folder
    if folder.exists() and not folder.is_dir():  # (mkdir says only 'File exists')
        raise DownloadError(f"{folder} is a file, not a folder to put SST in")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DownloadError(f"cannot create {folder}: {e.strerror}") from None
    temporaries: list[Path] = []
    try:
        archive = temporary(folder, ".zip", temporaries)
        fetch(url, archive, progress, timeout)
        unpacked = {split: temporary(folder, f".{split}.txt", temporaries)
                    for split in files}
        unpack(archive, url, files, unpacked)
        for split, path in unpacked.items():
            path.replace(folder / f"{split}.txt")
    except OSError as e:  # (writing into the folder: no room, no permission)
        raise DownloadError(f"cannot write SST into {folder}: {e.strerror or e}") from None
    finally:
        for path in temporaries:
            path.unlink(missing_ok=True)
    return folder


def present(folder: Path, files: dict[str, Expected]) -> bool:
    """Every split is there and verifies."""
    try:
        for split, expected in files.items():
            verify(split, (folder / f"{split}.txt").read_bytes(), expected, str(folder))
    except (OSError, DownloadError):
        return False
    return True


def temporary(folder: Path, suffix: str, made: list[Path]) -> Path:
    handle, name = tempfile.mkstemp(prefix=".sst-download-", suffix=suffix, dir=folder)
    os.close(handle)
    made.append(Path(name))
    return made[-1]


def fetch(url: str, target: Path, progress: bool, timeout: float) -> None:
    """Stream `url` into `target`, refusing a body shorter than announced."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            size = response.headers.get("Content-Length")
            total = int(size) if size and size.isdecimal() else None
            got = 0
            with open(target, "wb") as out, tqdm(
                    total=total, unit="B", unit_scale=True, disable=not progress,
                    desc="SST", leave=False) as bar:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
    except http.client.IncompleteRead as e:
        raise DownloadError(f"download of {url} was cut short after "
                            f"{len(e.partial)} more bytes") from None
    except urllib.error.HTTPError as e:
        raise DownloadError(f"cannot download {url}: HTTP {e.code} "
                            f"{e.reason}") from None
    except urllib.error.URLError as e:
        raise DownloadError(f"cannot download {url}: {e.reason}") from None
    except (OSError, http.client.HTTPException, ValueError) as e:  # (ValueError: a url
        # with no scheme, 'unknown url type')
        raise DownloadError(f"cannot download {url}: {e}") from None
    if total is not None and got != total:
        raise DownloadError(f"download of {url} was cut short: {got} of {total} bytes")


def unpack(archive: Path, url: str, files: dict[str, Expected],
           targets: dict[str, Path]) -> None:
    """Each split's member into its target, checked against `files`."""
    try:
        with zipfile.ZipFile(archive) as z:
            names = z.namelist()
            for split, expected in files.items():
                member = next((n for n in names if n == f"{split}.txt"
                               or n.endswith(f"/{split}.txt")), None)
                if member is None:
                    raise DownloadError(f"{url}: the archive has no {split}.txt")
                data = z.read(member)
                verify(split, data, expected, url)
                targets[split].write_bytes(data)
    except DownloadError:  # (a RuntimeError too: already says what is wrong)
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, RuntimeError,
            NotImplementedError) as e:  # (an encrypted member; a method zipfile lacks)
        raise DownloadError(f"{url}: not a valid zip archive ({e})") from None


def verify(split: str, data: bytes, expected: Expected, url: str) -> None:
    trees = sum(1 for line in data.splitlines() if line.strip())
    if expected.trees is not None and trees != expected.trees:
        raise DownloadError(f"{url}: {split}.txt has {trees} trees, expected "
                            f"{expected.trees}")
    digest = hashlib.md5(data).hexdigest()
    if expected.md5 is not None and digest != expected.md5:
        raise DownloadError(f"{url}: {split}.txt has MD5 {digest}, expected "
                            f"{expected.md5}")
