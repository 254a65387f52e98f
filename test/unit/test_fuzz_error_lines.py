"""Property: recir-opt on a mutated IR file (bytes overwritten, deleted or
inserted, tokens spliced in) exits 0, or 1 with exactly one `error:` line
first and no traceback; the SST loader on a mutated tree file loads or
raises one `file:line: error:` naming a line of the file, and a bad UTF-8
byte names its own line; a mutated `.npy` argument loads as a numeric array
or is one error line. `make fuzz` runs more examples."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from recir.data import sst
from recir.diagnostics import RecirError
from recir.tools import recir_opt, recir_run

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p.read_bytes() for p in sorted((ROOT / "examples/ir").glob("*.mlir"))]
TOKENS = [b"%", b"{", b"}", b"(", b")", b":", b"->", b"tensor<", b">", b"?x", b"i1",
          b"scf.yield", b"invoke.invoke @", b"dense<", b"\xff", b"\n", b"loc(", b"^bb0",
          b"// -----", b"99999999999999999999", b"-1", b"@", b"\"", b"#"]

edit = st.tuples(st.sampled_from(["write", "delete", "insert"]), st.integers(0, 1 << 16),
                 st.binary(min_size=1, max_size=3) | st.sampled_from(TOKENS))


def mutate(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, at, chunk in edits:
        at %= len(out) + 1
        if kind == "write":
            out[at:at + len(chunk)] = chunk
        elif kind == "delete":
            del out[at:at + len(chunk) * 8]
        else:
            out[at:at] = chunk
    return bytes(out)


@given(source=st.sampled_from(range(len(SOURCES))), edits=st.lists(edit, min_size=1,
                                                                  max_size=4))
def test_recir_opt_on_mutated_ir_prints_one_error_or_succeeds(tmp_path_factory, capsys,
                                                             source, edits):
    path = tmp_path_factory.mktemp("ir") / "fuzz.mlir"
    path.write_bytes(mutate(SOURCES[source], edits))
    code = recir_opt.main([str(path), "-p", "capture-outer-refs"])
    out = capsys.readouterr()
    assert code in (0, 1)
    assert "Traceback" not in out.err
    if code == 1:
        lines = out.err.splitlines()
        assert [line for line in lines if "error:" in line] == lines[:1], out.err
        assert lines[0].startswith((str(path), "error:")), lines[0]


TREES = [f"({k % 5} ({(k + 1) % 5} w{k}) ({(k + 2) % 5} (3 x{k}) (1 y)))".encode()
         for k in range(40)]


@given(edits=st.lists(edit, min_size=1, max_size=4))
def test_sst_loader_on_mutated_trees_loads_or_names_a_line(tmp_path_factory, edits):
    data = mutate(b"\n".join(TREES) + b"\n", edits)
    path = tmp_path_factory.mktemp("sst") / "trees.txt"
    path.write_bytes(data)
    try:
        trees, _ = sst.load_sst(path)
    except sst.TreeParseError as e:
        match = re.match(re.escape(str(path)) + r":(\d+)(:\d+)?: error: ", str(e))
        assert match, str(e)
        line = int(match.group(1))
        assert 1 <= line <= data.count(b"\n") + 1
        raw = data.split(b"\n")[line - 1]
        bad_bytes = "not valid UTF-8" in str(e)
        assert bad_bytes == (not is_utf8(raw)), (str(e), raw)
        assert all(is_utf8(earlier) for earlier in data.split(b"\n")[: line - 1])
    else:
        assert len(trees) == sum(1 for t in data.split(b"\n") if t.strip())


def is_utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


NPY = b"".join([b"\x93NUMPY\x01\x00v\x00",
                b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".ljust(117),
                b"\n", np.arange(6, dtype=np.float32).tobytes()])


@given(edits=st.lists(edit, min_size=1, max_size=3))
def test_npy_arguments_load_or_give_one_error(tmp_path_factory, edits):
    """A mutated .npy header or body: a numeric array, or one error line
    (never another exception, never an allocation the file cannot back)."""
    path = tmp_path_factory.mktemp("npy") / "x.npy"
    path.write_bytes(mutate(NPY, edits))
    try:
        value = recir_run.load_npy(0, str(path))
    except RecirError as e:
        assert str(e).startswith(f"error: --arg 1: '{path}'") and "\n" not in str(e)
    else:
        assert value.dtype.kind in "biuf" and value.nbytes <= path.stat().st_size
