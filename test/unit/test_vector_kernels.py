"""The recursive code's matrix-vector products (`vector_kernels`): a
product's rows are whole vectors and a masked last one, so no scalar tail
(LLVM's own vectorization of the scalar loop left cols % lanes scalar
multiply-adds a row) and no gathers (for short rows it vectorized across
rows). Values against NumPy, with their gradients' (vecmat, outer
product), at row and column counts around the host's lanes and the 4-row
blocks, and at 8 and 4 lanes (AVX2's, SSE's vectors) on this host."""

from __future__ import annotations

import dataclasses
import re

import llvmlite.binding as llvm_binding
import numpy as np
import pytest
from test_bilinear_code import compiled_ir

import recir
from recir.backend import engine
from recir.backend.engine import OPT_LEVEL, optimize, target_machine
from recir.context import make_context
from recir.parsing import parse_module
from recir.passes import vector_kernels
from recir.passes.gemm_target import host_target

# a scalar multiply or multiply-add of floats (not of vectors)
SCALAR_PRODUCT = re.compile(r"fmul (\w+ )*float |@llvm\.fmuladd\.f32|@llvm\.fma\.f32")
SHAPES = [(1, 1), (3, 17), (4, 16), (5, 33), (7, 150), (25, 50), (9, 300)]


def module(rows: int, cols: int, gradients: bool = True):
    """W x (`matvec`); with `gradients`, dy W (`vecmat`: an axpy a row) and
    dW += dy x^T (an axpy a row into an argument) too."""
    w, x, y = f"tensor<{rows}x{cols}xf32>", f"tensor<{cols}xf32>", f"tensor<{rows}xf32>"
    body = (f"%dx = adjoint.vecmat %dy, %w : {y}, {w} -> {x}\n"
            f"adjoint.accumulate_outer %dw, %dy, %x : {w}, {y}, {x}\n") if gradients else ""
    out, types = ("%r, %dx", f"{y}, {x}") if gradients else ("%r", y)
    text = (f"func.func @f(%w: {w}, %x: {x}, %dy: {y}, %dw: {w}) -> ({types}) {{\n"
            f"%r = tmath.matvec %w, %x : {w}, {x} -> {y}\n{body}"
            f"func.return {out} : {types}\n}}")
    return parse_module(make_context(), text, "products.mlir")


@pytest.mark.parametrize("lanes", [None, 8, 4], ids=["host", "8-lanes", "4-lanes"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_products_and_their_gradients_match_numpy(shape, lanes, tmp_path, monkeypatch):
    if lanes is not None:
        narrower = dataclasses.replace(host_target(), lanes=lanes)
        monkeypatch.setattr(vector_kernels, "host_target", lambda: narrower)
    rng = np.random.default_rng(5)
    w, dw = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    x, dy = (rng.standard_normal(n).astype(np.float32) for n in (shape[1], shape[0]))
    want = [w.astype(np.float64) @ x, dy.astype(np.float64) @ w,
            dw + np.outer(dy.astype(np.float64), x)]
    r, dx = recir.compile(module(*shape), "f", cache_dir=tmp_path, threads=1)(w, x, dy, dw)
    for got, expected in zip((r, dx, dw), want, strict=True):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5,
                                   atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a_product_has_no_scalar_tail_or_gather(shape, tmp_path, monkeypatch):
    texts = compiled_ir(monkeypatch, engine)
    rng = np.random.default_rng(6)
    w = rng.standard_normal(shape).astype(np.float32)
    x, dy = (rng.standard_normal(n).astype(np.float32) for n in (shape[1], shape[0]))
    fn = recir.compile(module(*shape, gradients=False), "f", cache_dir=tmp_path, threads=1)
    np.testing.assert_allclose(np.asarray(fn(w, x, dy, w.copy())[0]),
                               w.astype(np.float64) @ x, rtol=1e-5, atol=1e-4)
    assert texts
    for text in texts:
        compiled = llvm_binding.parse_assembly(text)
        optimize(compiled, target_machine(), OPT_LEVEL)
        optimized = str(compiled)
        assert "masked.gather" not in optimized
        assert not SCALAR_PRODUCT.search(optimized), SCALAR_PRODUCT.search(optimized)
