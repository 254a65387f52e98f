"""Gradient buffers a running call adds into: a second call given any of them waits.

Native code adds a call's gradients into its `into` buffers in place, with
plain loads and stores (a team's threads into copies of their own, summed
at the end), so two calls adding into one buffer at once lose each other's
updates. Threads that share one `into` (a training loop's workers) are
served one call at a time; calls with buffers of their own run side by
side. A buffer is known by the array that owns its memory, so views of one
array wait for each other too. A thread may claim again what it holds (a
call that falls back to another function).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_changed = threading.Condition()
_held: dict[int, int] = {}  # the id of an array owning a claimed buffer's memory -> its thread


@contextmanager
def claimed(into: dict[str, Any] | None) -> Iterator[None]:
    """Holds `into`'s buffers (none where None: the call's own zeroed ones)
    while the block runs, after any other thread's call holding one ends."""
    if not into:
        yield
        return
    me = threading.get_ident()
    keys = {id(a if a.base is None else a.base) for a in into.values()}
    with _changed:
        _changed.wait_for(lambda: all(_held.get(k, me) == me for k in keys))
        mine = [k for k in keys if k not in _held]
        _held.update(dict.fromkeys(mine, me))
    try:
        yield
    finally:
        with _changed:
            for k in mine:
                del _held[k]
            _changed.notify_all()
