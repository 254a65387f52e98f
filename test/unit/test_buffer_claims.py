"""Calls on several threads that share one `into=` dict of gradient
buffers: native code adds into them in place without atomics, so two calls
at once lost each other's updates (no error). `backend/claims.py` has a
call given a buffer another thread's call holds wait for it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import recir
from recir.backend.claims import claimed
from recir.data import make_treebank
from recir.models import tree_lstm


def test_a_claim_waits_for_another_threads_claim_of_the_same_buffers():
    memory = np.zeros(8, np.float32)
    into = {"a": memory[:4], "b": np.zeros(3, np.float32)}
    events: list[str] = []
    held, release = threading.Event(), threading.Event()

    def first():
        with claimed(into):
            events.append("first in")
            held.set()
            release.wait(5)
            events.append("first out")

    def second(buffers, name):
        held.wait(5)
        with claimed(buffers):
            events.append(name)

    threads = [threading.Thread(target=first),
               threading.Thread(target=second, args=({"a": memory[4:]}, "a view's")),
               threading.Thread(target=second, args=({"c": np.zeros(2, np.float32)}, "other"))]
    for t in threads:
        t.start()
    held.wait(5)
    deadline = time.monotonic() + 5  # (the other's claim is in and out; the view's waits)
    while "other" not in events and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert events == ["first in", "other"]
    with claimed(into), claimed(into):  # (held by this thread: no wait)
        pass
    release.set()
    for t in threads:
        t.join(5)
    assert events == ["first in", "other", "first out", "a view's"]


@pytest.mark.parametrize("batching", ["recursive", "frontier"])
def test_threads_sharing_one_into_add_every_calls_gradient(batching):
    """Six threads, four calls each, into one shared dict: the sum of every
    call's gradients, as calls one after another give it."""
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=16, vocab=100)
    model = tree_lstm.trace_model({k: (0.3 * v).astype(np.float32) for k, v in params.items()})
    trees = make_treebank(72, vocab_size=100, seed=11)
    batches = [[(t.left, t.right, t.word, t.label, t.root) for t in trees[3 * k:3 * k + 3]]
               for k in range(24)]
    vg = recir.value_and_grad(model, batching=batching, threads=1)
    want = {k: np.zeros_like(v, np.float64) for k, v in params.items()}
    for batch in batches:
        for k, g in vg.batch(batch)[1].items():
            want[k] += g
    shared = {k: np.zeros_like(v) for k, v in params.items()}
    start = threading.Barrier(6)

    def work(w):
        start.wait()
        for batch in batches[4 * w:4 * w + 4]:
            vg.batch(batch, into=shared)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    scale = max(float(np.abs(v).max()) for v in want.values())
    for k in want:  # (float32 sums in another order: about 2e-6 of the scale)
        np.testing.assert_allclose(shared[k], want[k], atol=5e-6 * scale, err_msg=k)
