"""Fused IR as docs/ir.md writes it runs natively (recir-run --jit) with the
interpreter's and NumPy's results; an scf.if missing its yield is a verifier
error naming the op, not an LLVM failure."""

from __future__ import annotations

import numpy as np
import pytest

from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.parsing import parse_module
from recir.pipeline import compile_module
from recir.tools import recir_run

CELL = """func.func @cell(%pi: tensor<4xf32>, %pf: tensor<4xf32>, %po: tensor<4xf32>,
                %pu: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c2, %h = tmath.fused(%pi, %pf, %po, %pu, %c)
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
      -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>, %o_in: tensor<4xf32>, %u_in: tensor<4xf32>,
       %c_in: tensor<4xf32>):
    %i = tmath.sigmoid %a : tensor<4xf32>
    %f = tmath.sigmoid %b : tensor<4xf32>
    %o = tmath.sigmoid %o_in : tensor<4xf32>
    %u = tmath.tanh %u_in : tensor<4xf32>
    %iu = tmath.mul %i, %u : tensor<4xf32>
    %fc = tmath.mul %f, %c_in : tensor<4xf32>
    %cn = tmath.add %iu, %fc : tensor<4xf32>
    %t = tmath.tanh %cn : tensor<4xf32>
    %hn = tmath.mul %o, %t : tensor<4xf32>
    tmath.yield %cn, %hn : tensor<4xf32>, tensor<4xf32>
  }
  func.return %h, %c2 : tensor<4xf32>, tensor<4xf32>
}
"""


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def cell_reference(pi, pf, po, pu, c):
    c2 = sigmoid(pi) * np.tanh(pu) + sigmoid(pf) * c
    return sigmoid(po) * np.tanh(c2), c2


def inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(4).astype(np.float32) for _ in range(5)]


@pytest.mark.parametrize("fuse", [True, False])
def test_fused_ir_runs_natively(fuse):
    module = parse_module(make_context(), CELL, "cell.mlir")
    args = inputs()
    native = compile_module(module, "cell", fuse=fuse)(*args)
    interpreted = run_function(module, "cell", args)
    for got, by_interpreter, expected in zip(native, interpreted, cell_reference(*args),
                                             strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, by_interpreter, rtol=1e-5, atol=1e-6)


def test_recir_run_jit_runs_fused_ir(tmp_path, capsys):
    (tmp_path / "cell.mlir").write_text(CELL)
    args = inputs()
    command = [str(tmp_path / "cell.mlir"), "--entry", "cell", "--jit",
               "--out", str(tmp_path / "out")]
    for k, value in enumerate(args):
        np.save(tmp_path / f"a{k}.npy", value)
        command += ["--arg", str(tmp_path / f"a{k}.npy")]
    assert recir_run.main(command) == 0, capsys.readouterr().err
    for k, expected in enumerate(cell_reference(*args)):
        got = np.load(tmp_path / "out" / f"result{k}.npy")
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


NO_YIELD = """func.func @f(%n: i32) -> i32 {
  %one = arith.constant 1 : i32
  %c = arith.cmpi sle, %n, %one : i32
  %r = scf.if %c -> (i32) {
    %a = arith.addi %n, %one : i32
  } else {
    scf.yield %one : i32
  }
  func.return %r : i32
}
"""


def test_missing_yield_is_a_verifier_error_not_an_llvm_failure(tmp_path, capsys):
    with pytest.raises(RecirError, match=r"f.mlir:4:3: error: 'scf.if' op then region "
                                         r"yields \(\) but the op has results \(i32\)"):
        parse_module(make_context(), NO_YIELD, "f.mlir")
    (tmp_path / "f.mlir").write_text(NO_YIELD)
    assert recir_run.main([str(tmp_path / "f.mlir"), "--entry", "f", "--jit",
                           "--arg", "3"]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "'scf.if' op then region yields ()" in err
