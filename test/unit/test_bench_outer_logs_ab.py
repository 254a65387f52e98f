"""bench/outer_logs_ab.py: each way set before its own round, every chunk
run in it; one product a log adds what the logs' team form adds."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import outer_logs_ab  # noqa: E402


def test_each_round_sets_its_way_then_runs_every_chunk():
    seen, way = [], []
    setters = {"a": lambda: way.append("a"), "b": lambda: way.append("b")}
    found = outer_logs_ab.rounds(lambda chunk: seen.append((way[-1], chunk)), [["x"], ["y"]],
                                 setters, 2)
    assert list(found) == ["a", "b"] and all(len(v) == 2 for v in found.values())
    assert seen == [(w, c) for _ in range(2) for w in "ab" for c in (["x"], ["x"], ["y"])]


def test_one_product_a_log_adds_every_log():
    rng = np.random.default_rng(3)
    m, n = 6, 5
    logs = [rng.standard_normal((k, m + n)).astype(np.float32) for k in (3, 4)]
    segments = np.array([(log.ctypes.data, m + n, log.ctypes.data + 4 * m, m + n, len(log))
                         for log in logs], np.int64)
    g = np.zeros((m, n), np.float32)
    outer_logs_ab.one_a_log(g.ctypes.data, m, n, segments)
    want = sum(log[:, :m].T.astype(np.float64) @ log[:, m:] for log in logs)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
