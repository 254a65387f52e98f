"""Property: an object-cache entry changed in any way (bytes overwritten,
cut short or appended, in the object or the metadata) does not load, unless
the change leaves the same JSON (white space); an unchanged one loads as
stored. `make fuzz` runs more examples."""

from __future__ import annotations

import json
import shutil

from hypothesis import given
from hypothesis import strategies as st

from recir.backend.cache import ObjectCache

KEY = "0" * 64
OBJECT = bytes(range(256)) * 8
META = {"sites": ["a.mlir:2:3: error: 'arith.divsi' op division by zero"],
        "copied": [1], "logged": [], "seconds": 0.5}
FIELDS = {"sites": list[str], "copied": list[int], "logged": list[int]}

edits = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=6)


def mutate(data: bytes, writes: list[tuple[int, int]], cut: int | None,
           tail: bytes) -> bytes:
    out = bytearray(data)
    for at, value in writes:
        out[at % len(out)] = value
    if cut is not None:
        out = out[: cut % (len(out) + 1)]
    return bytes(out) + tail


def same_json(a: bytes, b: bytes) -> bool:
    """Equal as JSON values (a change to white space between tokens)."""
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:
        return False


@given(suffix=st.sampled_from([".o", ".json"]), writes=edits,
       cut=st.none() | st.integers(0, 1 << 16), tail=st.binary(max_size=4))
def test_a_changed_entry_does_not_load(tmp_path_factory, suffix, writes, cut, tail):
    directory = tmp_path_factory.mktemp("entry")
    cache = ObjectCache(directory)
    cache.store(KEY, OBJECT, META)
    path = directory / f"{KEY}{suffix}"
    original = path.read_bytes()
    changed = mutate(original, writes, cut, tail)
    path.write_bytes(changed)
    loaded = cache.load(KEY, FIELDS)
    if changed == original or (suffix == ".json" and same_json(changed, original)):
        assert loaded == (OBJECT, META)
    else:
        assert loaded is None
        cache.store(KEY, OBJECT, META)  # what a rebuild does
        assert cache.load(KEY, FIELDS) == (OBJECT, META)
    shutil.rmtree(directory)
