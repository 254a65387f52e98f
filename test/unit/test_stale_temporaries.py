"""A store removes the temporaries (`.tmp-*`) that writers killed before
their rename left in the cache folder, which otherwise stayed forever; never
one a live process may still be writing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from recir.backend.cache import STALE_SECONDS, ObjectCache

# A writer killed between writing its temporary and renaming it.
KILLED = """
import os, sys
from recir.backend import cache
os.replace = lambda *args: os.kill(os.getpid(), 9)
cache.ObjectCache(sys.argv[1]).store("k" * 64, b"object", {})
"""


def aged(path: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def gone_pid() -> int:
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_writers_temporary_is_removed_by_a_later_store(tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)], check=False)
    assert done.returncode == -9
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(".tmp-")
    ObjectCache(tmp_path).store("a" * 64, b"object", {})
    assert names(tmp_path) == [left.name, "a" * 64 + ".json", "a" * 64 + ".o"]  # (fresh)
    aged(left, 2 * STALE_SECONDS)  # its writer long gone: no write takes this long
    ObjectCache(tmp_path).store("b" * 64, b"object", {})
    assert names(tmp_path) == ["a" * 64 + ".json", "a" * 64 + ".o",
                               "b" * 64 + ".json", "b" * 64 + ".o"]


def test_only_old_temporaries_of_writers_that_are_gone_are_removed(tmp_path):
    dead, old = gone_pid(), 2 * STALE_SECONDS
    files = {f".tmp-{os.getpid()}-00aa": old,  # a live writer's (stopped): kept
             f".tmp-{dead}-00bb": 0,  # fresh: perhaps another machine's write: kept
             ".tmp-00cc": 0,  # an older version's, fresh: kept
             "notes.tmp-1": old, "0" * 64: old,  # not temporaries: kept
             f".tmp-{dead}-00dd": old,  # its writer gone: removed
             ".tmp-00ee": old}  # an older version's, old: removed
    for name, age in files.items():
        (tmp_path / name).write_bytes(b"half")
        aged(tmp_path / name, age)
    (tmp_path / ".tmp-folder").mkdir()  # not a file: left alone
    aged(tmp_path / ".tmp-folder", old)
    ObjectCache(tmp_path).store("a" * 64, b"object", {})
    removed = {f".tmp-{dead}-00dd", ".tmp-00ee"}
    assert names(tmp_path) == sorted([*(set(files) - removed), ".tmp-folder",
                                      "a" * 64 + ".json", "a" * 64 + ".o"])


def test_a_temporary_is_named_for_its_writer(tmp_path, monkeypatch):
    """The name carries the writer's process id, which tells a live write
    from a dead one's."""
    written: list[str] = []
    real = os.replace

    def replace(source, target):
        written.append(Path(source).name)
        real(source, target)

    monkeypatch.setattr(os, "replace", replace)
    ObjectCache(tmp_path).store("a" * 64, b"object", {})
    assert [n.split("-")[:2] for n in written] == [[".tmp", str(os.getpid())]] * 2
