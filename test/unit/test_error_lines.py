"""Bad input to recir-opt, recir-run, the SST loader and the thread setting
gives exactly one `error:` line, located where a location exists, and exit
status 1: never a traceback. The tools' main() runs in-process."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest

from recir import pipeline
from recir.data import sst
from recir.diagnostics import RecirError
from recir.tools import recir_opt, recir_run


def one_error(capsys, code: int, pattern: str) -> str:
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert [line for line in lines if "error:" in line] == lines[:1], err
    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


def nested_ifs(depth: int) -> str:
    lines = ["func.func @f(%c: i1, %x: i32) -> i32 {"]
    lines += [f"%r{k} = scf.if %c -> (i32) {{" for k in range(depth)]
    lines.append("scf.yield %x : i32")
    for k in reversed(range(depth)):
        lines += ["} else {", "scf.yield %x : i32", "}"]
        if k > 0:
            lines.append(f"scf.yield %r{k} : i32")
    lines += ["func.return %r0 : i32", "}"]
    return "\n".join(lines)


SPLAT = """func.func @f() -> tensor<{n}xf32> {{
  %c = arith.constant dense<1.0> : tensor<{n}xf32>
  func.return %c : tensor<{n}xf32>
}}
"""
BAD_IR: dict[str, tuple[bytes, str]] = {
    "non-utf-8": (b"func.func @f(%n: i32) -> i32 {\n  // caf\xe9\n  func.return %n : i32\n}\n",
                  r"^bad.mlir:2:9: error: byte 0xe9 is not valid UTF-8"),
    "nested": (nested_ifs(400).encode(), r"^bad.mlir: error: the IR nests too deeply"),
    "splat": (SPLAT.format(n=10**11).encode(),
              r"^bad.mlir:2:36: error: a dense literal of 100000000000 elements is too "
              r"large"),
    "splat overflowing": (SPLAT.format(n=10**30).encode(), r"^bad.mlir:2:36: error: a dense"),
    "unclosed string": (b'func.func @f() {\n  %x = "' + b"x y " * 40 + b"\n}\n",
                        r"^bad.mlir:2:8: error: End of file reached before closing string"),
    "duplicate symbol": (b"func.func @f() {\n  func.return\n}\n"
                         b"func.func @f() {\n  func.return\n}\n",
                         r"^bad.mlir:4:1: error: 'func.func' op redefines symbol @f \(first "
                         r"defined at bad.mlir:1:1\)"),
    "undefined value": (b"func.func @f(%n: i32) -> i32 {\n  %r = arith.addi %n, %zz : i32\n"
                        b"  func.return %r : i32\n}\n\n\n// the end\n",
                        r"^bad.mlir:2:23: error: use of undefined value %zz$"),
}


@pytest.mark.parametrize("case", sorted(BAD_IR))
def test_bad_ir_gives_one_error_line(tmp_path: Path, capsys, case: str):
    data, pattern = BAD_IR[case]
    path = tmp_path / "bad.mlir"
    path.write_bytes(data)
    pattern = pattern.replace("bad.mlir", re.escape(str(path)))
    one_error(capsys, recir_opt.main([str(path)]), pattern)
    one_error(capsys, recir_run.main([str(path), "--entry", "f", "--interpret"]), pattern)


CEILDIVUI = """func.func @f(%a: i32, %b: i32) -> i32 {
  %r = arith.ceildivui %a, %b : i32
  func.return %r : i32
}
"""


def test_an_op_the_backend_cannot_lower_is_a_located_error(tmp_path: Path, capsys):
    path = tmp_path / "ceildivui.mlir"
    path.write_text(CEILDIVUI)
    code = recir_run.main([str(path), "--entry", "f", "--jit", "--arg", "7", "--arg", "2"])
    one_error(capsys, code, r"ceildivui.mlir:2:3: error: 'arith.ceildivui' op is not "
                            r"supported by the native backend")


VEC = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tmath.add %x, %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""


def npy_with_header(header: str, version: int = 1, data: bytes = b"\0" * 16) -> bytes:
    body = header + " " * (63 - len(header) % 64) + "\n"
    size = struct.pack("<H" if version == 1 else "<I", len(body))
    return b"\x93NUMPY" + bytes([version, 0]) + size + body.encode() + data


NPY_HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"
BAD_NPY = {
    "huge header": (npy_with_header(NPY_HEADER % "(4,)" + " " * 200_000, version=2),
                    r"is not a \.npy file \(Header info length \(\d+\) is large"),
    "header cut short": (b"\x93NUMPY\x01\x00\x1e\x00{'descr': ", r"is not a \.npy file"),
    "bad descr": (npy_with_header("{'descr': 'zz', 'fortran_order': False, 'shape': (4,), }"),
                  r"is not a \.npy file \(descr is not a valid dtype"),
    "not a dict": (npy_with_header("[1, 2]"), r"is not a \.npy file \(Header is not a dict"),
    "syntax": (npy_with_header("{'descr': '<f4', 'shape': (4,"), r"is not a \.npy file"),
    "negative shape": (npy_with_header(NPY_HEADER % "(-4,)"),
                       r"is not a \.npy file \(shape \(-4,\)\)"),
    "data cut short": (npy_with_header(NPY_HEADER % "(1000000000,)"),
                       r"is truncated: shape \(1000000000,\) needs 4000000000 bytes, the file "
                       r"has 16"),
    "not numpy": (b"hello", r"is not a \.npy file"),
}


@pytest.mark.parametrize("case", sorted(BAD_NPY))
def test_a_bad_npy_file_gives_one_error_line(tmp_path: Path, capsys, case: str):
    data, pattern = BAD_NPY[case]
    (tmp_path / "vec.mlir").write_text(VEC)
    (tmp_path / "x.npy").write_bytes(data)
    code = recir_run.main([str(tmp_path / "vec.mlir"), "--entry", "f", "--interpret",
                           "--arg", str(tmp_path / "x.npy")])
    one_error(capsys, code, r"^error: --arg 1: '.*x\.npy' " + pattern)


def test_out_at_an_existing_file_is_an_error_before_running(tmp_path: Path, capsys):
    (tmp_path / "vec.mlir").write_text(VEC)
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    (tmp_path / "taken").write_text("keep me")
    code = recir_run.main([str(tmp_path / "vec.mlir"), "--entry", "f", "--interpret",
                           "--arg", str(tmp_path / "x.npy"), "--out", str(tmp_path / "taken")])
    one_error(capsys, code, r"^error: --out '.*taken' is a file, not a directory$")
    assert (tmp_path / "taken").read_text() == "keep me"
    code = recir_run.main([str(tmp_path / "vec.mlir"), "--entry", "f", "--interpret",
                           "--arg", str(tmp_path / "x.npy"), "--out",
                           str(tmp_path / "taken" / "results")])  # (was an error after the run)
    one_error(capsys, code, r"^error: --out '.*results': cannot write in '.*taken'$")


TREE_CELL = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  invoke.subgraph @g(%y: tensor<4xf32>) -> tensor<4xf32> {
    %z = tmath.tanh %y : tensor<4xf32>
    invoke.return %z : tensor<4xf32>
  }
  %r = invoke.invoke @g(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}
"""
FIB = (Path(__file__).parents[2] / "examples" / "ir" / "fib.mlir").read_text()
OUT_OF_ORDER = [
    ("convert-recir-to-llvm", VEC, r"^x.mlir:2:3: error: 'tmath.add' op is not handled by "
     r"convert-recir-to-llvm: run convert-tmath-to-loops before convert-recir-to-llvm$"),
    ("convert-recir-to-llvm", TREE_CELL, r"^x.mlir:2:3: error: 'invoke.subgraph' op is not "
     r"handled by convert-recir-to-llvm: run capture-outer-refs before"),
    ("convert-scf-to-cf", TREE_CELL, r"^x.mlir:2:3: error: 'invoke.subgraph' op is not "
     r"handled by convert-scf-to-cf: run capture-outer-refs before convert-scf-to-cf$"),
    ("capture-outer-refs,convert-scf-to-cf,convert-tmath-to-loops",
     CEILDIVUI.replace("arith.ceildivui", "arith.divsi").replace(
         "%r = arith", "%c = arith.cmpi slt, %a, %b : i32\n  %r = scf.if %c -> (i32) {\n"
                       "    scf.yield %a : i32\n  } else {\n    scf.yield %b : i32\n  }\n"
                       "  %q = arith"),
     r"^x.mlir:1:1: error: 'func.func' op holds 'cf.cond_br', which is not handled by "
     r"convert-tmath-to-loops: run convert-tmath-to-loops before convert-scf-to-cf"),
    ("invoke-to-frontier", TREE_CELL, r"^x.mlir:2:3: error: 'invoke.subgraph' op is not "
     r"handled by invoke-to-frontier: run capture-outer-refs before invoke-to-frontier$"),
    *[(f"capture-outer-refs,convert-scf-to-cf,{p}", FIB, r"^x.mlir:4:3: error: 'func.func' op "
       rf"holds 'cf.cond_br', which is not handled by {p}: run {p} before convert-scf-to-cf")
      for p in ("invoke-to-frontier", "lower-invoke-to-call-return")],
    # (the schedule named a function the second pass had rewritten away)
    ("capture-outer-refs,invoke-to-frontier,lower-invoke-to-call-return", FIB,
     r"^x.mlir:20:3: error: 'frontier.schedule' op is not handled by lower-invoke-to-call-"
     r"return: run lower-invoke-to-call-return or invoke-to-frontier, not both"),
]


@pytest.mark.parametrize(("passes", "text", "pattern"), OUT_OF_ORDER)
def test_passes_out_of_order_give_one_located_error(tmp_path: Path, capsys, passes, text,
                                                    pattern):
    (tmp_path / "x.mlir").write_text(text)
    code = recir_opt.main(["-p", passes, str(tmp_path / "x.mlir")])
    one_error(capsys, code, pattern.replace("x.mlir", re.escape(str(tmp_path / "x.mlir"))))


@pytest.mark.parametrize(("passes", "pattern"), [
    ("a{{{", r"^error: Error parsing pass pipeline specification: pass-pipeline:1:3 a\{\{\{ "
             r"\^ Expected argument name here$"),
    ("capture-outer-refs{", r"^error: Error parsing pass pipeline specification:")])
def test_a_malformed_pass_pipeline_gives_one_error_line(tmp_path: Path, capsys, passes,
                                                        pattern):
    """(xDSL's ArgSpecParseError is a BaseException: it was a traceback.)"""
    (tmp_path / "x.mlir").write_text(FIB)
    one_error(capsys, recir_opt.main(["-p", passes, str(tmp_path / "x.mlir")]), pattern)


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1.5", " "])
def test_recir_num_threads_must_be_a_positive_integer(monkeypatch, value):
    monkeypatch.setenv("RECIR_NUM_THREADS", value)
    if not value.strip():
        assert pipeline.resolve_threads(None) >= 1  # unset in effect: every core
        return
    with pytest.raises(RecirError, match=f"^error: RECIR_NUM_THREADS must be a positive "
                                         f"integer, got '{re.escape(value)}'$"):
        pipeline.resolve_threads(None)


@pytest.mark.parametrize("threads", [0, -2])
def test_a_thread_count_below_one_is_refused(monkeypatch, threads):
    monkeypatch.setenv("RECIR_NUM_THREADS", "1")
    assert pipeline.resolve_threads(None) == 1 and pipeline.resolve_threads(1) == 1
    with pytest.raises(RecirError, match="threads must be a positive integer"):
        pipeline.resolve_threads(threads)


def test_sst_loader_names_the_line_of_a_bad_byte(tmp_path: Path, capsys):
    lines = [f"({k % 5} ({k % 5} w{k}) (2 x{k}))".encode() for k in range(200)]
    lines[149] = lines[149][:10] + b"\xff" + lines[149][10:]
    path = tmp_path / "trees.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(sst.TreeParseError, match=re.escape(f"{path}:150:11: error: byte "
                                                           "0xff is not valid UTF-8")):
        sst.load_sst(path)
    one_error(capsys, sst.main([str(path)]), r":150:11: error: byte 0xff")
    lines[149] = lines[148]
    path.write_bytes(b"\n".join(lines) + b"\n")
    trees, _ = sst.load_sst(path)
    assert len(trees) == 200 and trees[3].num_nodes == 3


def test_ir_beyond_a_quarter_of_memory_is_refused_unread(tmp_path: Path, capsys, monkeypatch):
    """A device such as /dev/zero was read until memory ran out."""
    from recir import parsing

    monkeypatch.setattr(parsing, "quarter_of_memory", lambda: 4 << 20)
    path = tmp_path / "big.mlir"
    path.write_bytes(b"// " + b"x" * (5 << 20) + b"\n" + VEC.encode())
    code = recir_run.main([str(path), "--entry", "f", "--interpret", "--arg", "1"])
    one_error(capsys, code, r"^.*big\.mlir: error: more than 4 MiB of IR, a quarter of this "
                            "machine's memory$")
    one_error(capsys, recir_opt.main([str(path)]), r"big\.mlir: error: more than 4 MiB of IR")


def test_a_gradients_stack_sites_name_the_users_function_at_its_line():
    """A backward pass too deep for the stack named the internal @node_bwd
    (or @node_fwd_serial) with no line: synthesize-gradients gives a `_bwd`
    no location."""
    import numpy as np
    from xdsl.dialects import func
    from xdsl.dialects.builtin import StringAttr

    import recir
    from recir.models import tree_rnn
    from recir.passes.prologue import prologue_sites
    from recir.pipeline import run_passes

    vg = recir.value_and_grad(tree_rnn.trace_model(
        tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=10)))
    module = vg.origin.clone()
    run_passes(module, vg.passes)
    functions = {op.sym_name.data: op for op in module.walk() if isinstance(op, func.FuncOp)}
    serial = functions["node_fwd"].clone()  # (as invoke-clone-serial names a threaded one's)
    serial.sym_name = StringAttr("node_fwd_serial")
    module.body.block.add_op(serial)
    functions["node_fwd_serial"] = serial
    for name in ("node_fwd", "node_bwd", "node_fwd_serial"):
        site, = prologue_sites(functions[name])
        assert re.fullmatch(r".*tree_common.py:\d+:1: error: recursion in @node is too deep "
                            r"for the native stack", site), (name, site)
