"""LLVM's optimisation and code generation of one module on two cores.

llvmlite runs every LLVM call behind one process-wide lock, so threads
cannot share the work; a forked child can. `split` cuts the module's text in
two: a set of internal functions closed under what they reference (a
recursion's serial clones, say) and the rest, about half the lines each.
The closed part is compiled by a child, the rest by the parent meanwhile,
where a core is idle (on a busy machine the two would take turns).
MCJIT mislinks the GOT-relative constant loads of a second object in one
engine, so each part gets its own engine: the closed part's functions and
globals are renamed apart (the module's hash in their names), made external
and bound by address (`llvm.add_symbol`) before the rest is loaded, which
only declares them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import signal
import struct
import time
from collections.abc import Callable
from typing import Any

from llvmlite.binding import ffi

# Splitting pays where the closed part costs LLVM more than forking and
# piping (a few ms for a large Python process): at about 0.1-0.2 ms of LLVM
# time per line of IR (`bench/run.py compile`), parts of this many lines.
MIN_PART_LINES = 1500
PACKED = b"recir-parts\0"
CHILD_PATIENCE, CHILD_GRACE_S = 10, 10.0  # a child later than this many times the
# parent's part, plus the grace, counts as stuck: killed, its part compiled here

DEFINE = re.compile(r'^define (internal )?(.*?@"([^"]+)"[^\n]*)\n\{\n.*?^\}\n', re.S | re.M)
GLOBAL = re.compile(r'^@"([^"]+)" = internal global (.*) zeroinitializer(, align \d+)?$', re.M)
SYMBOL = re.compile(r'@"([^"]+)"')


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def idle_cores() -> float:
    """Cores that no runnable process wants (this one counts among the
    load): a second part only pays where one is free, and on a busy
    machine it takes turns with the first."""
    try:
        return available_cores() - os.getloadavg()[0]
    except OSError:
        return 0.0


def split(text: str) -> tuple[list[str], list[str]]:
    """([closed part, rest], the closed part's exported names), or
    ([text], []) where no closed set of about half the lines exists or the
    module has globals other than zeroed internal ones."""
    functions = {m.group(3): m for m in DEFINE.finditer(text)}
    globals_ = {m.group(1) for m in GLOBAL.finditer(text)}
    if idle_cores() < 1 or len(globals_) != sum(
            1 for line in text.splitlines() if line.startswith("@")):
        return [text], []
    lines = {name: m.group(0).count("\n") for name, m in functions.items()}
    refs = {name: {s for s in SYMBOL.findall(m.group(0)) if s != name and s in functions}
            for name, m in functions.items()}
    total = sum(lines.values())
    if total < 2 * MIN_PART_LINES:
        return [text], []
    closed: set[str] = set()
    for name in sorted(functions, key=lambda n: -lines[n]):
        reach, todo = {name}, [name]
        while todo:
            for callee in refs[todo.pop()] - reach:
                reach.add(callee)
                todo.append(callee)
        if all(functions[n].group(1) for n in reach) and \
                sum(lines[n] for n in closed | reach) <= 0.6 * total:
            closed |= reach
    if sum(lines[n] for n in closed) < MIN_PART_LINES:
        return [text], []
    tag = hashlib.sha256(text.encode()).hexdigest()[:12]
    exported = sorted(closed) + sorted(globals_)
    renamed = {name: f"{name}.part{tag}" for name in exported}
    text = SYMBOL.sub(lambda m: f'@"{renamed.get(m.group(1), m.group(1))}"', text)
    functions = {m.group(3): m for m in DEFINE.finditer(text)}
    inverse = {new: old for old, new in renamed.items()}
    parts = []
    for own in (True, False):
        pieces, at = [], 0
        for name, m in functions.items():
            pieces.append(text[at:m.start()])
            mine = inverse.get(name) in closed
            if mine == own:
                pieces.append(f"define {m.group(2)}\n" + m.group(0).split("\n", 1)[1])
            elif not own:
                pieces.append(f"declare {m.group(2)}\n")
            at = m.end()
        pieces.append(text[at:])
        body = "".join(pieces)
        parts.append(GLOBAL.sub(r'@"\1" = global \2 zeroinitializer\3' if own
                                else r'@"\1" = external global \2\3', body))
    return parts, [renamed[n] for n in exported]


def compile_parts(texts: list[str], compile_one: Callable[[str], bytes]) -> list[bytes]:
    """`compile_one(text) -> bytes` of each text, the first in a forked
    child (in the parent too where the child fails)."""
    if len(texts) == 1:
        return [compile_one(texts[0])]
    read, write = os.pipe()
    with _llvm_lock():  # no other thread is inside LLVM while we fork
        pid = os.fork()
    if pid == 0:  # the child: compile, send, leave without any cleanup
        os.close(read)
        status = 1
        try:
            obj = compile_one(texts[0])
            with os.fdopen(write, "wb") as pipe:
                pipe.write(obj)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    start = time.perf_counter()
    rest = [compile_one(text) for text in texts[1:]]
    # the child's part is about as large: one that takes far longer is stuck
    patience = CHILD_PATIENCE * (time.perf_counter() - start) + CHILD_GRACE_S
    first = b""
    with os.fdopen(read, "rb") as pipe:
        if select.select([pipe], [], [], patience)[0]:
            first = pipe.read()
        else:
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return [first if status == 0 and first else compile_one(texts[0]), *rest]


def _llvm_lock() -> Any:
    lock = getattr(getattr(ffi, "lib", None), "_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


def pack(objects: list[bytes], exported: list[str]) -> bytes:
    """One byte string for the object cache: the objects in loading order
    and the names the first one gives the others."""
    if len(objects) == 1:
        return objects[0]
    names = json.dumps(exported).encode()
    header = struct.pack(f"<{len(objects) + 2}Q", len(names), len(objects), *map(len, objects))
    return PACKED + header + names + b"".join(objects)


def unpack(data: bytes) -> tuple[list[bytes], list[str]]:
    if not data.startswith(PACKED):
        return [data], []
    at = len(PACKED)
    names_size, count = struct.unpack_from("<2Q", data, at)
    sizes = struct.unpack_from(f"<{count}Q", data, at + 16)
    at += 8 * (count + 2)
    exported = json.loads(data[at:at + names_size])
    at += names_size
    objects = []
    for size in sizes:
        objects.append(data[at:at + size])
        at += size
    return objects, exported
