"""The on-disk object cache: compiled code keyed by IR, CPU and versions.

An entry is `<key>.o` (the object file) and `<key>.json` (what the runtime
needs besides code: the error-site messages). Writes go through a temporary
file and a rename, so concurrent compilers never read half an entry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm

VERSION = "recir-object-cache-2"


@functools.cache
def host_description() -> str:
    """What a cached object depends on besides the IR: CPU and library versions."""
    llvm.initialize_native_target()
    return "|".join((llvm.get_process_triple(), llvm.get_host_cpu_name(),
                     llvm.get_host_cpu_features().flatten(), llvmlite.__version__))


@functools.cache
def compiler_digest() -> str:
    """A hash of the code that turns IR into objects: a changed lowering must
    not load objects an older one produced (the key hashes the input IR)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for folder in ("passes", "backend", "autodiff", "dialects"):
        for path in sorted((root / folder).glob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def default_dir() -> Path:
    configured = os.environ.get("RECIR_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "recir"


def cache_key(ir_text: str, entry: str) -> str:
    digest = hashlib.sha256()
    for part in (VERSION, compiler_digest(), host_description(), entry, ir_text):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


class ObjectCache:
    def __init__(self, directory: Path | str | None = None):
        self.directory = Path(directory) if directory is not None else default_dir()

    def load(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        try:
            obj = (self.directory / f"{key}.o").read_bytes()
            meta = json.loads((self.directory / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        return obj, meta

    def store(self, key: str, obj: bytes, meta: dict[str, Any]) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._write(f"{key}.o", obj)
            self._write(f"{key}.json", json.dumps(meta).encode())
        except OSError:
            return  # a read-only cache costs speed, not correctness

    def _write(self, name: str, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, self.directory / name)
