"""A `perf` symbol map of the JIT's code, written where $RECIR_PERF_MAP is set.

`perf report` names samples in code that no file on disk holds from the
map `perf-PID.map` in the temporary folder (its convention: a line per
function, `start size name` in hex). With $RECIR_PERF_MAP set, each
`Engine` appends its objects' functions there as it loads them, internal
ones too (read from each object's ELF symbol table: llvmlite lists only
the exported), so that a profile of a native call splits by kernel and
row function instead of one unnamed region. Off by default: a process's
map grows with every function it compiles.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
from collections.abc import Iterable
from typing import Any

SYMTAB, FUNC, GLOBAL = 2, 2, 1  # ELF's section type, symbol type and binding
Symbol = tuple[str, int, int, int, bool]  # name, section, value, size, global
_writing = threading.Lock()  # engines load on several threads: whole lines, one at a time


def enabled() -> bool:
    return bool(os.environ.get("RECIR_PERF_MAP"))


def map_path() -> str:
    return os.path.join(tempfile.gettempdir(), f"perf-{os.getpid()}.map")


def functions(obj: bytes) -> list[Symbol]:
    """The function symbols of a little-endian ELF64 object (none of
    anything else)."""
    if obj[:6] != b"\x7fELF\x02\x01":
        return []
    (offset,) = struct.unpack_from("<Q", obj, 0x28)
    size, count = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, offset + k * size) for k in range(count)]
    found = []
    for section in sections:
        if section[1] != SYMTAB:
            continue
        names, start, entry = sections[section[6]][4], section[4], section[9]
        for k in range(section[5] // entry):
            name, info, _, index, value, length = struct.unpack_from(
                "<IBBHQQ", obj, start + k * entry)
            if info & 0xF == FUNC:
                at = names + name
                found.append((obj[at:obj.index(b"\0", at)].decode(), index, value, length,
                              info >> 4 == GLOBAL))
    return found


def write(loaded: Iterable[tuple[Any, bytes]]) -> None:
    """Appends the functions of each (MCJIT engine, its object) to the map:
    each section placed where its exported functions' addresses say (an
    internal function's section without one is left out)."""
    lines = []
    for engine, obj in loaded:
        found = functions(obj)
        bases: dict[int, int] = {}
        for name, section, value, _, exported in found:
            address = engine.get_function_address(name) if exported else 0
            if address and section not in bases:
                bases[section] = address - value
        lines += [f"{bases[section] + value:x} {size:x} {name}\n"
                  for name, section, value, size, _ in found if section in bases]
    with _writing, open(map_path(), "a") as f:
        f.writelines(lines)
