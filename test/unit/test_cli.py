"""recir-opt and recir-run as a user runs them: outputs, and bad input as one error line."""

from __future__ import annotations

import contextlib
import importlib
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

FIB = """\
func.func @fib(%n: i32) -> i32 {
  invoke.subgraph @rec(%k: i32) -> i32 {
    %one = arith.constant 1 : i32
    %two = arith.constant 2 : i32
    %c = arith.cmpi sle, %k, %one : i32
    %r = scf.if %c -> (i32) {
      scf.yield %one : i32
    } else {
      %k1 = arith.subi %k, %one : i32
      %k2 = arith.subi %k, %two : i32
      %a = invoke.invoke @rec(%k1) : (i32) -> i32
      %b = invoke.invoke @rec(%k2) : (i32) -> i32
      %s = arith.addi %a, %b : i32
      scf.yield %s : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @rec(%n) : (i32) -> i32
  func.return %r : i32
}
"""

AFFINE = """\
func.func @affine(%w: tensor<2x3xf32>, %x: tensor<3xf32>, %s: f32) -> (tensor<2xf32>, f32) {
  %y = tmath.matvec %w, %x : tensor<2x3xf32>, tensor<3xf32> -> tensor<2xf32>
  func.return %y, %s : tensor<2xf32>, f32
}
"""


def process_tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The tool as its own process: exit status and streams as a user sees them."""
    code = f"import sys; from recir.tools.{name} import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The tool's `main` in this process (no interpreter start-up per case);
    an uncaught exception fails the test as a traceback would."""
    main = importlib.import_module(f"recir.tools.{name}").main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 1
    return subprocess.CompletedProcess([name, *args], code, out.getvalue(),
                                       err.getvalue())


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def assert_one_error_line(result: subprocess.CompletedProcess[str], pattern: str):
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    assert "error:" in first
    assert pattern in first, first


def test_recir_run_fib(tmp_path: Path):
    path = write(tmp_path, "fib.mlir", FIB)
    result = process_tool("recir_run", path, "--entry", "fib",
                  "--arg", "15", "--interpret")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "987\n"


def test_recir_run_tensors_and_out_dir(tmp_path: Path):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = np.array([1, 0, -1], dtype=np.float32)
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "x.npy", x)
    path = write(tmp_path, "affine.mlir", AFFINE)
    args = ["--entry", "affine", "--arg", str(tmp_path / "w.npy"),
            "--arg", str(tmp_path / "x.npy"), "--arg", "0.25"]
    result = tool("recir_run", path, *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["tensor 2 [-2. -2.]", "0.25"]
    result = tool("recir_run", path, *args, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "result0.npy"), w @ x)


def test_recir_opt_round_trips(tmp_path: Path):
    first = tool("recir_opt", write(tmp_path, "fib.mlir", FIB))
    assert first.returncode == 0, first.stderr
    second = tool("recir_opt", write(tmp_path, "again.mlir", first.stdout))
    assert second.stdout == first.stdout


BAD_IR = {
    "malformed": ("func.func @f( {\n", "bad.mlir:1:"),
    "unknown op": ("func.func @f() {\n  tmath.bogus\n  func.return\n}\n", "bad.mlir:"),
    "missing callee": (
        "func.func @f() {\n  invoke.invoke @nope() : () -> ()\n  func.return\n}\n",
        "bad.mlir:2:3: error: 'invoke.invoke' op callee @nope does not exist",
    ),
    "wrong arity": (
        FIB.replace("invoke.invoke @rec(%n)", "invoke.invoke @rec(%n, %n)")
        .replace("(%n, %n) : (i32)", "(%n, %n) : (i32, i32)"),
        "'invoke.invoke' op @rec expects 1 arguments, got 2",
    ),
    "shape mismatch": (
        AFFINE.replace("tensor<3xf32>, tensor<2xf32>", "tensor<2xf32>, tensor<2xf32>")
        .replace("%x: tensor<3xf32>", "%x: tensor<2xf32>")
        .replace("tensor<2x3xf32>, tensor<3xf32>", "tensor<2x3xf32>, tensor<2xf32>"),
        "bad.mlir:2:3: error: 'tmath.matvec' op matrix 2x3 cannot multiply vector 2",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_IR))
def test_bad_ir_is_one_located_error(tmp_path: Path, case: str):
    text, pattern = BAD_IR[case]
    path = write(tmp_path, "bad.mlir", text)
    assert_one_error_line(tool("recir_opt", path), pattern)
    assert_one_error_line(tool("recir_run", path, "--entry", "f"), pattern)


def test_bad_ir_as_a_process_is_one_error_line_and_status_1(tmp_path: Path):
    text, pattern = BAD_IR["missing callee"]
    path = write(tmp_path, "bad.mlir", text)
    assert_one_error_line(process_tool("recir_opt", path), pattern)


def test_bad_run_arguments(tmp_path: Path):
    fib = write(tmp_path, "fib.mlir", FIB)
    affine = write(tmp_path, "affine.mlir", AFFINE)
    (tmp_path / "junk.npy").write_text("not numpy")
    cases = [
        ((fib, "--entry", "main", "--arg", "3"), "no function @main"),
        ((fib, "--entry", "fib"), "@fib takes 1 arguments"),
        ((fib, "--entry", "fib", "--arg", "1", "--arg", "2"), "@fib takes 1 arguments"),
        ((fib, "--entry", "fib", "--arg", "x"), "must be an integer"),
        ((affine, "--entry", "affine", "--arg", str(tmp_path / "junk.npy"),
          "--arg", "a.npy", "--arg", "1"), "not a .npy file"),
        ((affine, "--entry", "affine", "--arg", str(tmp_path / "none.npy"),
          "--arg", "a.npy", "--arg", "1"), "cannot read"),
        ((str(tmp_path / "missing.mlir"), "--entry", "f"), "cannot read"),
    ]
    for args, pattern in cases:
        assert_one_error_line(tool("recir_run", *args), pattern)


def test_dump_ir_into_a_pipe_the_reader_closes_ends_quietly():
    """`python -m recir.models.tree_lstm --dump-ir | head -1`: no traceback."""
    process = subprocess.Popen([sys.executable, "-m", "recir.models.tree_lstm", "--dump-ir"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before it is written (the model is traced first)
    assert process.stderr.read() == b""
    assert process.wait(timeout=60) == 0


def test_run_argument_errors_name_the_arg_given(tmp_path: Path):
    """The interpreter counts arguments from 0: the second `--arg`'s wrong
    shape was reported as 'argument 1', the first's range as 'argument 0'."""
    np.save(tmp_path / "w.npy", np.zeros((2, 3), np.float32))
    np.save(tmp_path / "x4.npy", np.zeros(4, np.float32))
    w, x4 = str(tmp_path / "w.npy"), str(tmp_path / "x4.npy")
    affine = write(tmp_path, "affine.mlir", AFFINE)
    fib = write(tmp_path, "fib.mlir", FIB)
    for engine in ("--interpret", "--jit"):
        result = tool("recir_run", affine, "--entry", "affine", "--arg", w,
                      "--arg", x4, "--arg", "1", engine)
        assert_one_error_line(result, f"error: --arg 2 ('{x4}', tensor<3xf32>) got an "
                                      "array of shape (4,)")
        result = tool("recir_run", fib, "--entry", "fib", "--arg", str(2**31), engine)
        assert_one_error_line(result, f"error: --arg 1 ('{2**31}', i32) ")
        assert "argument 0" not in result.stderr


def test_run_takes_values_that_start_with_a_minus(tmp_path: Path):
    """`--arg -1e-3` was argparse's 'expected one argument' (only plain
    negative integers and decimals passed)."""
    np.save(tmp_path / "w.npy", np.ones((2, 3), np.float32))
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    affine = write(tmp_path, "affine.mlir", AFFINE)
    for value, shown in (("-1e-3", "-0.001"), ("-inf", "-inf"), ("-2.5", "-2.5")):
        result = tool("recir_run", affine, "--entry", "affine", "--arg",
                      str(tmp_path / "w.npy"), "--arg", str(tmp_path / "x.npy"),
                      "--arg", value, "--interpret")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["tensor 2 [3. 3.]", shown]
    result = tool("recir_run", write(tmp_path, "fib.mlir", FIB), "--entry", "fib",
                  "--arg", "-0x10", "--interpret")
    assert (result.returncode, result.stdout) == (0, "1\n")  # fib(n <= 1) is 1
