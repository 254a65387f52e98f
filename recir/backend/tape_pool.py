"""Memory kept from one gradient call to the next: tape chunks and logs.

The native arena (`passes/tape_arena.py`) mallocs a chunk whenever the
current one is full, and the deferred outer products (`passes/outer_log.py`)
grow their logs with realloc. Freed after each call, those megabytes would
go back to the kernel (an mmap, or a worker thread's arena trimmed), and the
next call would fault every page in again. Here a context starts with a
chunk from `TAPES` (the arena's first chunk: its link word is null) and
each log with a buffer from `LOGS`; after the call they go back, a tape
chunk grown to what the call used if the call outgrew it, so the next call
of that size allocates nothing.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
from operator import itemgetter
from typing import Any

from recir.passes.tape_arena import CHUNK_BYTES, HEADER_BYTES

LIBC = ctypes.CDLL(None)
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = [ctypes.c_size_t]
LIBC.free.argtypes = [ctypes.c_void_p]

KEEP_CHUNKS = 64  # at most this many chunks wait in a pool (the smallest go)
KEEP_BYTES = 256 << 20  # and at most this many bytes (the largest go)


class ChunkPool:
    """malloc'd chunks (address, size) waiting for a call; thread-safe."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []  # by size, the largest last
        self.bytes = 0  # their sizes added up
        self.lock = threading.Lock()

    def take(self) -> tuple[int, int] | None:
        """The largest waiting chunk, if any."""
        with self.lock:
            if not self.free:
                return None
            chunk = self.free.pop()
            self.bytes -= chunk[1]
            return chunk

    def keep(self, address: int, size: int) -> None:
        with self.lock:
            bisect.insort(self.free, (address, size), key=itemgetter(1))
            self.bytes += size
            while len(self.free) > KEEP_CHUNKS:
                self.drop(0)
            while self.bytes > KEEP_BYTES:
                self.drop(-1)

    def drop(self, at: int) -> None:
        address, size = self.free.pop(at)
        self.bytes -= size
        LIBC.free(address)


class TapePool(ChunkPool):
    """Arena chunks: a context's first chunk comes from here and returns."""

    def __init__(self) -> None:
        super().__init__()
        self.owned: dict[int, int] = {}  # address -> size, chunks out on loan

    def seed(self, ctx: Any) -> None:
        """Starts `ctx`'s arena in the largest waiting chunk, if any."""
        chunk = self.take()
        if chunk is None:
            return
        address, size = chunk
        self.owned[address] = size  # one dict operation: atomic under the GIL
        ctypes.c_void_p.from_address(address).value = None  # no previous chunk
        ctx.tape_chunks = address
        ctx.tape_next = address + HEADER_BYTES
        ctx.tape_end = address + size

    def rearm(self, ctx: Any) -> None:
        """Readies a kept context's arena for its next call: it starts again
        in its first chunk where the call stayed in it, else in a chunk from
        the pool grown to the call's whole tape (`release`, `seed`)."""
        chunk = ctx.tape_chunks
        if chunk and ctypes.c_void_p.from_address(chunk).value is None:
            ctx.tape_next, ctx.tape_bytes = chunk + HEADER_BYTES, 0
            return
        self.release(ctx)
        ctx.tape_bytes = 0
        self.seed(ctx)

    def release(self, ctx: Any) -> None:
        """Frees the chunks the call malloc'd and keeps the pool's (grown to the
        call's whole tape if the call needed more)."""
        chunk, pooled = ctx.tape_chunks, None
        if not chunk:  # no tape (inference): nothing to free or keep
            return
        with self.lock:
            while chunk:
                previous = ctypes.c_void_p.from_address(chunk).value
                size = self.owned.pop(chunk, None)
                if size is None:
                    LIBC.free(chunk)
                else:
                    pooled = (chunk, size)
                chunk = previous
        ctx.tape_chunks = ctx.tape_next = ctx.tape_end = None
        need = ctx.tape_bytes + HEADER_BYTES
        if pooled is not None and pooled[1] >= need:
            self.keep(*pooled)
            return
        if pooled is not None:
            LIBC.free(pooled[0])
        size = max(CHUNK_BYTES, need + need // 4)  # a little room for a larger call
        address = LIBC.malloc(size)
        if address:
            self.keep(address, size)


TAPES = TapePool()
LOGS = ChunkPool()  # outer-product logs: realloc'd by the call as they grow
