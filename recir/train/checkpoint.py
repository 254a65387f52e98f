"""Checkpoints: parameters, optimizer state, rng, the best-dev parameters and
what the model is (kind, sizes, vocabulary), in one `.npz`.

A resume file is checked completely before anything is restored, so a
truncated file, another model's or optimizer's, NaN parameters or a negative
epoch give one `CheckpointError` line and leave the run untouched.
"""

from __future__ import annotations

import contextlib
import json
import math
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.lib.format as npy

from recir.train.optimizers import Optimizer

Arrays = dict[str, np.ndarray]


class CheckpointError(ValueError):
    """A checkpoint or model file that cannot be used; the message is one line."""


@dataclass
class Best:
    """The parameters of the epoch with the best dev root accuracy so far."""

    epoch: int = 0  # 0: none yet
    score: float = -1.0
    params: Arrays | None = None

    def offer(self, epoch: int, score: float, params: Arrays) -> None:
        """Keep a copy of `params` when `score` beats the best (ties: earlier)."""
        if score > self.score:
            self.epoch, self.score = epoch, score
            self.params = {k: v.copy() for k, v in params.items()}


def save_checkpoint(path: str | Path, params: Arrays, optimizer: Optimizer, epoch: int,
                    rng: np.random.Generator, best: Best | None = None,
                    info: dict[str, Any] | None = None) -> None:
    """Written to a temporary file and renamed: a crash keeps the old one."""
    best = best or Best()
    arrays = {f"param/{k}": v for k, v in params.items()}
    arrays |= {f"opt/{k}": v for k, v in optimizer.state_dict().items()}
    arrays |= {f"best/{k}": v for k, v in (best.params or {}).items()}
    arrays["epoch"] = np.array(epoch)
    arrays["best_epoch"] = np.array(best.epoch)
    arrays["best_score"] = np.array(best.score)
    arrays["rng"] = np.array(json.dumps(rng.bit_generator.state))
    arrays["optimizer"] = np.array(type(optimizer).__name__.lower())
    if info is not None:
        arrays["model"] = np.array(json.dumps(info))
    write_npz(path, arrays)


def write_npz(path: str | Path, arrays: Arrays) -> None:
    """Via a temporary file beside `path`, removed if writing fails."""
    path = Path(path)  # (a str, as `load` takes: its `with_name` was an AttributeError)
    tmp = path.with_name(path.name + ".tmp.npz")
    if path.exists() and not path.is_file():  # (renamed over, a device would be replaced)
        raise CheckpointError(f"{path}: cannot write: not a regular file")
    try:
        np.savez(tmp, **arrays)
        tmp.replace(path)
    except BaseException as e:  # (Ctrl-C too: no half-written file is left)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(e, OSError):
            raise
        raise CheckpointError(f"{path}: cannot write: {e.strerror or e}") from None


class NpzArrays(Mapping[str, np.ndarray]):
    """The arrays of an `.npz`, each inflated when first asked for. Its
    header (shape, dtype) is read first: callers check the shape against the
    model's before the data is decompressed (a small compressed file can
    describe any amount of memory), and a shape its member has not the bytes
    for is refused before NumPy allocates it."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = guarded(path, lambda: zipfile.ZipFile(path))
        self.names = {name.removesuffix(".npy"): name for name in self.zip.namelist()}
        self.headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self.arrays: Arrays = {}

    def __enter__(self) -> NpzArrays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.zip.close()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, key: object) -> bool:
        return key in self.names

    def header(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        """(shape, dtype) of `key`, read without its data."""
        if key not in self.headers:
            self.headers[key] = guarded(self.path, lambda: self.read_header(key))
        return self.headers[key]

    def read_header(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        name = self.names[key]
        with self.zip.open(name) as f:
            version = npy.read_magic(f)
            read = {(1, 0): npy.read_array_header_1_0,
                    (2, 0): npy.read_array_header_2_0}.get(version)
            if read is None:
                raise ValueError(f"'{key}' is in .npy format {version}")
            shape, _, dtype = read(f)
            room = self.zip.getinfo(name).file_size - f.tell()
        if dtype.hasobject:
            raise ValueError(f"'{key}' holds Python objects")
        if math.prod(shape) * dtype.itemsize > room:
            raise ValueError(f"'{key}' of shape {shape} {dtype} needs more than its "
                             f"{room} bytes")
        return shape, dtype

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.arrays:
            self.header(key)

            def read() -> np.ndarray:
                with self.zip.open(self.names[key]) as f:
                    return npy.read_array(f, allow_pickle=False)

            self.arrays[key] = guarded(self.path, read)
        return self.arrays[key]


def guarded(path: Path, read: Callable[[], Any]) -> Any:
    """`read()`, its errors as a `CheckpointError` naming `path`."""
    try:
        return read()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a folder, not a checkpoint file") from None
    # (zipfile's NotImplementedError: a damaged header naming a version or
    # feature it lacks)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError, zlib.error,
            NotImplementedError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or not "
                              f".npz: {reason})") from None


def read_npz(path: Path) -> NpzArrays:
    """The file's arrays, read as they are asked for (`with` closes it); a
    `CheckpointError` names what is wrong."""
    return NpzArrays(path)


def scalar(data: NpzArrays, key: str, path: Path) -> Any:
    if key not in data:
        raise CheckpointError(f"{path}: no '{key}' entry (not a recir checkpoint)")
    if data.header(key)[0] != ():  # (before reading it)
        raise CheckpointError(f"{path}: '{key}' should be a single value")
    return data[key][()]


def real(data: NpzArrays, key: str, path: Path) -> float:
    """The entry `key`, a finite float."""
    value = scalar(data, key, path)
    if np.asarray(value).dtype.kind not in "iuf" or not np.isfinite(value):
        raise CheckpointError(f"{path}: '{key}' {value} is not a finite number")
    return float(value)


def count(data: NpzArrays, key: str, path: Path, what: str) -> int:
    """The entry `key`, a non-negative integer (`what` names it in errors)."""
    value = scalar(data, key, path)
    if not np.issubdtype(np.asarray(value).dtype, np.integer) or value < 0:
        raise CheckpointError(f"{path}: {what} {value} is not a non-negative integer")
    return int(value)


def model_info(data: NpzArrays, path: Path) -> dict[str, Any] | None:
    if "model" not in data:
        return None
    try:
        info = json.loads(str(scalar(data, "model", path)))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: the model description is not JSON: "
                              f"{e}") from None
    except RecursionError:  # (a foreign file's `[[[[...`: json recurses per level)
        raise CheckpointError(f"{path}: the model description nests too deeply "
                              "(not a recir model)") from None
    if not isinstance(info, dict) or "kind" not in info:
        raise CheckpointError(f"{path}: the model description has no 'kind'")
    return info


def check_same_model(stored: dict[str, Any] | None, run: dict[str, Any], path: Path) -> None:
    """The run trains the model the checkpoint holds: its kind, and its
    vocabulary word for word (the embedding's rows are the words' in
    order: another order of the same size would load, every word reading
    another's row)."""
    if stored is None:
        return
    if run.get("kind") is not None and stored["kind"] != run["kind"]:
        raise CheckpointError(f"{path}: a {stored['kind']} checkpoint, this run trains "
                              f"{run['kind']}")
    before, now = stored.get("vocabulary"), run.get("vocabulary")
    if before is not None and now is not None and before != now:
        k = next((k for k, (a, b) in enumerate(zip(before, now)) if a != b), None)
        how = (f"{len(before)} words there, {len(now)} here" if k is None else
               f"word {k} is {before[k]!r} there, {now[k]!r} here")
        raise CheckpointError(f"{path}: the checkpoint's vocabulary is not this run's ({how}): "
                              "resume on the data it was trained on")


def check_arrays(data: NpzArrays, prefix: str, params: Arrays, path: Path,
                 what: str) -> None:
    """`prefix/<name>` holds a finite float array of each parameter's shape,
    and nothing else has that prefix."""
    stored = {k[len(prefix) + 1:] for k in data if k.startswith(prefix + "/")}
    if extra := sorted(stored - params.keys()):
        raise CheckpointError(f"{path}: {what} '{extra[0]}' is not a parameter of this "
                              f"model (another model's checkpoint?)")
    for name, value in params.items():
        key = f"{prefix}/{name}"
        if key not in data:
            raise CheckpointError(f"{path}: no {what} '{name}' (another model's "
                                  f"checkpoint?)")
        shape, dtype = data.header(key)  # (checked before the data is inflated)
        if shape != value.shape:
            raise CheckpointError(f"{path}: {what} '{name}' has shape {shape}, "
                                  f"this model's is {value.shape} (other sizes or "
                                  f"vocabulary?)")
        if not np.issubdtype(dtype, np.floating) or not np.isfinite(data[key]).all():
            raise CheckpointError(f"{path}: {what} '{name}' holds NaN, infinite or "
                                  f"non-numeric values")
        with np.errstate(over="ignore"):  # (float64 beyond float32: inf once read)
            if not np.isfinite(data[key].astype(np.float32, copy=False)).all():
                raise CheckpointError(f"{path}: {what} '{name}' holds values beyond "
                                      f"float32's range")


def check_optimizer(data: NpzArrays, optimizer: Optimizer, path: Path) -> None:
    name = type(optimizer).__name__.lower()
    if "optimizer" in data and str(scalar(data, "optimizer", path)) != name:
        raise CheckpointError(f"{path}: saved with {scalar(data, 'optimizer', path)}, "
                              f"this run uses {name}")
    if count(data, "opt/steps", path, "optimizer step count") == 0:
        return
    trained = {k: v for k, v in optimizer.params.items() if k not in optimizer.frozen}
    if optimizer.SLOTS:  # a parameter trained when saved, frozen now
        prefix = f"opt/{optimizer.SLOTS[0]}/"
        if thawed := sorted({k[len(prefix):] for k in data if k.startswith(prefix)}
                            & optimizer.frozen):
            raise CheckpointError(f"{path}: '{thawed[0]}' was trained when it was saved and "
                                  f"is frozen now: resume with the same parameters frozen "
                                  f"(--freeze-embeddings)")
    for slot in optimizer.SLOTS:
        check_arrays(data, f"opt/{slot}", trained, path, f"optimizer state {slot} of")
    for slot in optimizer.SQUARES:  # (a negative one would step by a NaN square root)
        for name in trained:
            if (data[f"opt/{slot}/{name}"] < 0).any():
                raise CheckpointError(f"{path}: optimizer state {slot} of '{name}' holds "
                                      f"negative values (it sums squares)")


def load_checkpoint(path: Path, params: Arrays, optimizer: Optimizer,
                    best: Best | None = None, model: dict[str, Any] | None = None
                    ) -> tuple[int, np.random.Generator]:
    """Restores params (in place), optimizer state, the shuffling rng and, into
    `best` when given, the best-dev parameters; returns (epoch, rng). Nothing
    is restored until everything in the file fits this model (`model`, its
    description, where both give one: its kind and vocabulary), its
    parameters and this optimizer."""
    with read_npz(path) as data:
        return restore(data, path, params, optimizer, best, model)


def restore(data: NpzArrays, path: Path, params: Arrays, optimizer: Optimizer,
            best: Best | None, model: dict[str, Any] | None) -> tuple[int, np.random.Generator]:
    check_same_model(model_info(data, path), model or {}, path)
    check_arrays(data, "param", params, path, "parameter")
    check_optimizer(data, optimizer, path)
    epoch = count(data, "epoch", path, "epoch")
    best_epoch = count(data, "best_epoch", path, "best epoch") if "best_epoch" in data else 0
    if not 0 <= best_epoch <= epoch:
        raise CheckpointError(f"{path}: best epoch {best_epoch} is outside 0..{epoch}")
    if best_epoch:
        check_arrays(data, "best", params, path, "best parameter")
    best_score = real(data, "best_score", path) if "best_score" in data else -1.0
    rng, state = np.random.default_rng(), str(scalar(data, "rng", path))
    try:
        rng.bit_generator.state = json.loads(state)
    except (json.JSONDecodeError, TypeError, ValueError, KeyError, OverflowError,
            RecursionError) as e:
        raise CheckpointError(f"{path}: the shuffling rng state is unreadable: "
                              f"{str(e) or type(e).__name__}") from None
    for name, value in params.items():
        value[...] = data[f"param/{name}"]
    optimizer.load_state_dict({k[4:]: data[k] for k in data if k.startswith("opt/")})
    if best is not None:
        best.epoch = best_epoch
        best.score = best_score
        best.params = ({k: np.array(data[f"best/{k}"], np.float32) for k in params}
                       if best.epoch else None)
    return epoch, rng
