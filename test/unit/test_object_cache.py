"""The object cache: a corrupted entry (truncated, random or flipped object
bytes, garbled metadata) is detected, recompiled and rewritten, never handed
to LLVM; programs with the same ops at different source lines keep their own
error locations."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from recir.backend.cache import ObjectCache
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.parsing import parse_module
from recir.pipeline import compile_module

DIV = """func.func @div(%a: i32, %b: i32) -> i32 {
  %q = arith.divsi %a, %b : i32
  func.return %q : i32
}
"""
FIELDS = {"sites": list[str], "copied": list[int], "logged": list[int]}


def compile_div(directory: Path, text: str = DIV, name: str = "div.mlir"):
    return compile_module(parse_module(make_context(), text, name), "div",
                          cache_dir=directory).wait()  # (stored)


def check_div(native, where: str = "div.mlir:2:3") -> None:
    """Results against Python's floor-free integer division, and the located check."""
    for a, b in [(-7, 2), (7, 2), (100, -3), (0, 5)]:
        assert native(a, b) == (int(a / b),)
    with pytest.raises(RecirError, match=f"{where}: error: 'arith.divsi' op division"):
        native(1, 0)


def entry_files(directory: Path) -> tuple[Path, Path]:
    (obj,) = directory.glob("*.o")
    return obj, obj.with_suffix(".json")


def verifies(directory: Path) -> bool:
    obj, _ = entry_files(directory)
    return ObjectCache(directory).load(obj.stem, FIELDS) is not None


def truncate(data: bytes, rng) -> bytes:
    return data[: len(data) // 3]


def randomize(data: bytes, rng) -> bytes:
    return rng.integers(0, 256, len(data), dtype=np.uint8).tobytes()


def flip64(data: bytes, rng) -> bytes:
    out = bytearray(data)
    for i in rng.choice(len(out), 64, replace=False):
        out[i] ^= 0xFF
    return bytes(out)


@pytest.mark.parametrize("corrupt", [truncate, randomize, flip64])
def test_a_corrupted_object_is_rebuilt(tmp_path, corrupt):
    check_div(compile_div(tmp_path))
    obj, _ = entry_files(tmp_path)
    good = obj.read_bytes()
    obj.write_bytes(corrupt(good, np.random.default_rng(0)))
    assert not verifies(tmp_path)  # so it is never given to LLVM
    check_div(compile_div(tmp_path))
    assert verifies(tmp_path)
    assert entry_files(tmp_path)[0].read_bytes() != corrupt(good, np.random.default_rng(0))


GARBLED = [
    b"{not json",
    b"\xff\xfe",
    b"[1, 2, 3]",
    b'{"sha256": 5}',
    b'{"meta": [], "sha256": ""}',
]


@pytest.mark.parametrize("garbled", GARBLED)
def test_garbled_metadata_is_rebuilt(tmp_path, garbled):
    compile_div(tmp_path)
    _, meta = entry_files(tmp_path)
    meta.write_bytes(garbled)
    assert not verifies(tmp_path)
    check_div(compile_div(tmp_path))
    assert verifies(tmp_path)


@pytest.mark.parametrize("edit", [
    lambda m: m.update(sites=[]),  # an error would index past the list
    lambda m: m.update(sites=[7]),
    lambda m: m.pop("copied"),
    lambda m: m.update(logged="x"),
])
def test_edited_metadata_fails_its_digest(tmp_path, edit):
    compile_div(tmp_path)
    _, meta_path = entry_files(tmp_path)
    record = json.loads(meta_path.read_text())
    edit(record["meta"])
    meta_path.write_text(json.dumps(record))
    assert not verifies(tmp_path)
    check_div(compile_div(tmp_path))
    assert verifies(tmp_path)


def test_a_consistent_entry_missing_a_field_is_rebuilt(tmp_path):
    """An entry that verifies but lacks what the loader needs (written by an
    older recir, say) is compiled again too."""
    compile_div(tmp_path)
    obj, _ = entry_files(tmp_path)
    cache = ObjectCache(tmp_path)
    _, meta = cache.load(obj.stem, FIELDS)
    del meta["logged"]
    cache.store(obj.stem, obj.read_bytes(), meta)
    assert cache.load(obj.stem) is not None and not verifies(tmp_path)
    check_div(compile_div(tmp_path))
    assert verifies(tmp_path)


def test_same_ops_at_other_lines_report_their_own_location(tmp_path):
    first = compile_div(tmp_path, DIV, "first.mlir")
    second = compile_div(tmp_path, "// another program\n\n" + DIV, "second.mlir")
    third = compile_div(tmp_path, DIV, "first.mlir")  # the first's entry again
    check_div(first, "first.mlir:2:3")
    check_div(second, "second.mlir:4:3")
    check_div(third, "first.mlir:2:3")
    assert len(list(tmp_path.glob("*.o"))) == 2


def test_the_compiler_digest_reads_all_the_code_that_makes_objects(monkeypatch):
    """Every module under the folders that lower IR or build kernels, and
    every other module that compiles one (`train/fused_step.py`'s optimizer
    step): an edit to any of them must not load an object the older code
    made."""
    import re

    from recir.backend import cache

    root = Path(cache.__file__).resolve().parents[1]
    compiling = [p for p in root.rglob("*.py")
                 if re.search(r"\b(cached_engine|compile_object)\(", p.read_text())]
    assert root / "train" / "fused_step.py" in compiling
    read: set[Path] = set()
    plain = Path.read_bytes

    def recorded(path: Path) -> bytes:
        read.add(path.resolve())
        return plain(path)

    monkeypatch.setattr(Path, "read_bytes", recorded)
    cache.compiler_digest.__wrapped__()  # (the cached one may have run already)
    lowering = [p for folder in ("passes", "backend", "dialects", "autodiff", "interpreter")
                for p in (root / folder).rglob("*.py")]
    assert root / "backend" / "kernels" / "compiled_gemm.py" in lowering
    assert [p for p in [*lowering, *compiling] if p not in read] == []


MUL = DIV.replace("arith.divsi", "arith.muli")  # (its entry under another key)


def test_another_entry_copied_under_this_key_is_rebuilt(tmp_path):
    """The digest covered the object and metadata but not the key: another
    model's two files copied under this key verified, and ran (a product
    for a quotient here; another TreeLSTM's wrong outputs, a corrupted heap
    or a segfault elsewhere)."""
    compile_div(tmp_path / "div")
    compile_module(parse_module(make_context(), MUL, "div.mlir"), "div",
                   cache_dir=tmp_path / "mul").wait()
    (div_obj, div_meta), (mul_obj, mul_meta) = (entry_files(tmp_path / k) for k in ("div", "mul"))
    div_obj.write_bytes(mul_obj.read_bytes())
    div_meta.write_bytes(mul_meta.read_bytes())
    assert not verifies(tmp_path / "div")
    check_div(compile_div(tmp_path / "div"))  # (7 / 2 is 3, not 14)


def test_metadata_nested_past_the_parser_is_rebuilt(tmp_path):
    """json's RecursionError was not caught: the compile raised it."""
    compile_div(tmp_path)
    _, meta = entry_files(tmp_path)
    meta.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    assert not verifies(tmp_path)
    check_div(compile_div(tmp_path))


def test_a_fifo_in_an_entrys_place_is_rebuilt_not_waited_on(tmp_path):
    """Reading a FIFO blocked for ever (no writer)."""
    compile_div(tmp_path)
    obj, _ = entry_files(tmp_path)
    obj.unlink()
    os.mkfifo(obj)
    assert not verifies(tmp_path)
