"""recir/backend/perf_map.py: the JIT's functions named for `perf`, where asked."""

from pathlib import Path

import numpy as np

import recir
from recir.backend import engine, perf_map
from recir.models import tree_rnn
from recir.context import make_context
from recir.parsing import parse_module

FIB = Path(__file__).resolve().parents[2] / "examples/ir/fib.mlir"


def map_lines(path: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for line in path.read_text().splitlines():
        start, size, name = line.split(" ", 2)
        found[name] = (int(start, 16), int(size, 16))
    return found


def test_an_engine_appends_its_functions_where_asked(tmp_path, monkeypatch):
    """With $RECIR_PERF_MAP set, compiled code's functions are in the map,
    exported ones at the address the engine gives them, internal ones too
    (a frontier function's row kernels), each with its size."""
    monkeypatch.setenv("RECIR_PERF_MAP", "1")
    monkeypatch.setattr(perf_map, "map_path", lambda: str(tmp_path / "perf.map"))
    monkeypatch.setattr(engine, "_engines", {})  # fib's engine made here, not found made before
    fib = recir.compile(parse_module(make_context(), FIB.read_text(), str(FIB)), entry="fib",
                        cache_dir=tmp_path)
    assert fib(10) == (89,)  # fib(0) = fib(1) = 1
    found = map_lines(tmp_path / "perf.map")
    resolved = {name: start for name, (start, _) in found.items() if fib.engine.lookup(name)}
    assert {"fib", "fib__team", "fib_rec"} <= set(resolved)  # the entry, its team, its callee
    assert resolved == {name: fib.engine.lookup(name) for name in resolved}
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=9, vocab=20)
    rows = recir.compile(tree_rnn.trace_model(params), batching="frontier", cache_dir=tmp_path)
    rows.batch([(np.array([-1], np.int32), np.array([-1], np.int32),
                 np.array([3], np.int32), np.array([1], np.int32), 0)])
    after = map_lines(tmp_path / "perf.map")
    assert len(after) > len(found)  # appended, not replaced
    assert {"node__expand", "node__post__heights"} <= set(after)  # its height loop
    assert any(name.endswith(".rows") for name in after)  # and its internal row functions
    assert all(size > 0 for _, size in after.values())


def test_nothing_is_written_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("RECIR_PERF_MAP", raising=False)
    monkeypatch.setattr(perf_map, "map_path", lambda: str(tmp_path / "perf.map"))
    monkeypatch.setattr(engine, "_engines", {})
    fib = recir.compile(parse_module(make_context(), FIB.read_text(), str(FIB)), entry="fib",
                        cache_dir=tmp_path)
    assert fib(10) == (89,)  # fib(0) = fib(1) = 1
    assert not (tmp_path / "perf.map").exists()


def test_bytes_that_are_no_elf64_object_have_no_functions():
    assert perf_map.functions(b"") == []
    assert perf_map.functions(b"\x7fELF\x01\x01" + bytes(64)) == []  # ELF32
