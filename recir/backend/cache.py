"""The on-disk object cache: compiled code keyed by IR, CPU and versions.

An entry is `<key>.o` (the object file) and `<key>.json` (what the runtime
needs besides code, such as the error-site messages, and a SHA-256 of the
object and that metadata together). Writes go through a temporary file and a
rename, so concurrent compilers never read half an entry (a store removes
the temporaries of writers that died before their rename, `remove_stale`);
a load checks the digest (of the key too: another entry's files copied
under this key) and the metadata's fields, so an entry that is truncated,
overwritten or garbled (a full disk, a crash mid-copy, another tool) is
rebuilt rather than handed to LLVM, which trusts object files and crashes
on bad ones. The key hashes the IR with its source locations:
error sites name the lines of the program that was compiled, not of
another with the same ops.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import io
import json
import os
import secrets
import stat
import time
import typing
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm
from xdsl.dialects.builtin import FunctionType
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.printer import Printer

from recir.context import make_context
from recir.diagnostics import RecirError

VERSION = "recir-object-cache-4"


@functools.cache
def host_description() -> str:
    """What a cached object depends on besides the IR: CPU and library
    versions (xDSL's: its passes and printer run before the key's IR and after)."""
    llvm.initialize_native_target()
    return "|".join((llvm.get_process_triple(), llvm.get_host_cpu_name(),
                     llvm.get_host_cpu_features().flatten(), llvmlite.__version__,
                     xdsl_version()))


def xdsl_version() -> str:
    try:
        return importlib.metadata.version("xdsl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def compiler_digest() -> str:
    """A hash of the code that turns IR into objects: a changed lowering must
    not load objects an older one produced (the key hashes the input IR).
    The package's top level, interpreter and autodiff count too: a frontier
    function and a recursive gradient are keyed by the traced IR they are
    made from (`frontier_compile.origin`, `pipeline.compile_module`'s
    `derive`), not by the IR their passes make of it; and the kernels'
    builders (`backend/kernels`, the optimizer's `train/fused_step.py`),
    whose objects are keyed by a fixed description."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for folder in (".", "interpreter", "passes", "backend", "backend/kernels", "autodiff",
                   "dialects"):
        for path in sorted((root / folder).glob("*.py")):
            digest.update(path.read_bytes())
    digest.update((root / "train" / "fused_step.py").read_bytes())
    return digest.hexdigest()[:16]


def default_dir() -> Path:
    configured = os.environ.get("RECIR_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "recir"


def default_source() -> str:
    """What named the default folder, for `usable`'s message."""
    if os.environ.get("RECIR_CACHE_DIR"):
        return "RECIR_CACHE_DIR"
    return "the default cache folder ($XDG_CACHE_HOME/recir, else ~/.cache/recir)"


def cache_folder(cache_dir: Path | str | None) -> Path:
    """The folder a `cache_dir` names (None: `default_dir`); '' names none
    (Path('') is the working folder, which got the cache's files)."""
    if cache_dir is None:
        return usable(default_dir(), default_source())
    if not isinstance(cache_dir, str | os.PathLike) or not os.fspath(cache_dir):
        raise RecirError(f"error: cache_dir must name a folder (a str or a path), got "
                         f"{cache_dir!r}")
    return usable(Path(cache_dir), "cache_dir")


def usable(folder: Path, source: str) -> Path:
    """`folder`, refused where it or the nearest of its parents that exists
    is no folder (a file): `store` could never write there, and the cache
    that its user set was silently off. A folder it cannot write (read-only,
    shared) is still taken: that costs speed, not correctness."""
    for part in (folder, *folder.parents):
        try:
            mode = os.stat(part).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # not made yet (or under a file, found further up)
        except OSError:
            return folder  # (cannot tell: `store` tries and copes)
        if stat.S_ISDIR(mode):
            return folder
        where = "is" if part == folder else f"is under {str(part)!r}, which is"
        raise RecirError(f"error: {source} names {str(folder)!r}, which {where} a "
                         "file, not a folder: the object cache cannot be kept there "
                         "(name a folder, or one that does not exist yet)")
    return folder


def anchored(directory: Path) -> Path:
    try:
        return directory.absolute()
    except OSError:  # (the working folder is gone: kept relative, it fails alike)
        return directory


def located_text(module: Operation) -> str:
    """`module` printed with its ops' source locations, for `cache_key`: the
    run-time error messages compiled into an object quote them."""
    text = io.StringIO()
    Printer(stream=text, print_debuginfo=True).print_op(module)
    return text.getvalue()


def cache_key(ir_text: str, entry: str) -> str:
    digest = hashlib.sha256()
    for part in (VERSION, compiler_digest(), host_description(), entry, ir_text):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def entry_digest(key: str, obj: bytes, meta: dict[str, Any]) -> str:
    """The SHA-256 of the entry's key, object and metadata: another entry's
    two files copied under this key do not verify (they were loaded as this
    model's: wrong outputs, a heap corrupted, a segfault)."""
    digest = hashlib.sha256(key.encode() + b"\0")
    digest.update(obj)
    digest.update(json.dumps(meta, sort_keys=True).encode())
    return digest.hexdigest()


def regular_bytes(path: Path) -> bytes:
    """The file's bytes; OSError where it is not a regular file (a FIFO in
    an entry's place blocked the read for ever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()


def conforms(value: Any, shape: Any) -> bool:
    """`value` (parsed JSON) has the type `shape`: int, float, str or list[...]."""
    if typing.get_origin(shape) is list:
        (item,) = typing.get_args(shape)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if isinstance(value, bool):
        return shape is bool
    if shape is float:
        return isinstance(value, int | float)
    return isinstance(value, shape)


class ObjectCache:
    def __init__(self, directory: Path | str | None = None):
        """A relative `directory` is taken from the working folder now: a
        compile stores its entry on another thread, after the program may
        have changed folder."""
        self.directory = anchored(cache_folder(directory))

    def load(self, key: str, fields: dict[str, Any] | None = None
             ) -> tuple[bytes, dict[str, Any]] | None:
        """The entry's object and metadata if it verifies and its metadata has
        `fields` (name -> type), else None: the caller compiles again and
        `store` replaces the entry."""
        try:
            obj = regular_bytes(self.directory / f"{key}.o")
            record = json.loads(regular_bytes(self.directory / f"{key}.json"))
        except (OSError, ValueError, RecursionError):  # missing, unreadable, not JSON
            return None  # (or not UTF-8, or nested past the parser's depth)
        if not (isinstance(record, dict) and isinstance(record.get("meta"), dict)
                and record.get("sha256") == entry_digest(key, obj, record["meta"])):
            return None
        meta: dict[str, Any] = record["meta"]
        if not all(name in meta and conforms(meta[name], shape)
                   for name, shape in (fields or {}).items()):
            return None
        return obj, meta

    def store(self, key: str, obj: bytes, meta: dict[str, Any]) -> None:
        record = {"sha256": entry_digest(key, obj, meta), "meta": meta}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            remove_stale(self.directory)
            self._write(f"{key}.o", obj)
            try:
                self._write(f"{key}.json", json.dumps(record).encode())
            except OSError:  # (a full disk) no half entry holding its space
                (self.directory / f"{key}.o").unlink(missing_ok=True)
                raise
        except OSError:
            return  # a read-only cache costs speed, not correctness

    def _write(self, name: str, data: bytes) -> None:
        """`name`'s file, whole or not at all. Its mode is the umask's, as
        `open` gives (mkstemp's is 0600): a folder a group shares is read
        by all of it."""
        tmp = self.directory / f"{TEMPORARY}{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.directory / name)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise


# A write's temporary file, `.tmp-<pid>-<random>`: its writer's process id
# tells a live write from one a killed process left.
TEMPORARY = ".tmp-"
# A write takes milliseconds: a temporary this old whose writer is not a live
# process here was left by one that died before its rename (killed, a crash,
# a power cut) and would stay forever. Those of another machine sharing the
# folder, whose process ids mean nothing here, are spared until then too.
STALE_SECONDS = 3600.0


def remove_stale(directory: Path) -> None:
    """Removes `directory`'s temporaries older than `STALE_SECONDS` whose
    writer does not run here (one whose name carries no process id, an
    older version's, by its age alone). Never one of a live process here;
    another machine's writer stopped for longer than that fails its rename,
    and that entry is only not kept."""
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(TEMPORARY):
            continue
        try:
            if (entry.is_file(follow_symlinks=False)
                    and now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS
                    and not writer_alive(entry.name)):
                os.unlink(entry.path)
        except OSError:  # gone meanwhile (removed by another), or not ours to remove
            continue


def writer_alive(name: str) -> bool:
    """Whether the process a temporary's name carries runs here (False
    where the name carries none)."""
    pid, dash, _ = name[len(TEMPORARY):].partition("-")
    if not (dash and pid.isdecimal() and int(pid) > 0):
        return False
    try:
        os.kill(int(pid), 0)  # (signal 0: only asks whether it exists)
    except PermissionError:  # another user's
        return True
    except (OSError, OverflowError):  # none of that id
        return False
    return True


def stored_function_type(text: str) -> FunctionType | None:
    """The function type an entry's metadata holds printed, None where it
    does not parse as one (the entry is then built again)."""
    try:
        parsed = Parser(make_context(), text).parse_attribute()
    except Exception:  # whatever the text holds
        return None
    return parsed if isinstance(parsed, FunctionType) else None
