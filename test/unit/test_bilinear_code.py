"""A bilinear form's recursive code with RNTN's rows (d=25: 50 wide): V's
rows dotted with a vector as one matrix, so that once LLVM has unrolled
the short dots it does not vectorize across V's rows with gathers (5x
slower at d=25); values against NumPy. (The forward's last step, a dot of
each slab's row sums with x, is short too: with few slabs, as here, it
stays gather-free; at d=25 its gathers read a 25 x 50 matrix, not V.)"""

from __future__ import annotations

import llvmlite.binding as llvm_binding
import numpy as np
import pytest

import recir
from recir.backend import engine
from recir.backend.engine import OPT_LEVEL, optimize, target_machine
from recir.context import make_context
from recir.parsing import parse_module

WIDTH = 50
DEPTHS = {"bilinear": 3, "bilinear_lhs": 25}


def module(name: str, depth: int):
    tensor, vector, scale = (f"tensor<{depth}x{WIDTH}x{WIDTH}xf32>", f"tensor<{WIDTH}xf32>",
                             f"tensor<{depth}xf32>")
    body, result = {
        "bilinear": (f"%r = tmath.bilinear %v, %x, %y : {tensor}, {vector}, {vector} "
                     f"-> {scale}", scale),
        "bilinear_lhs": (f"%r = adjoint.bilinear_lhs %v, %d, %y : {tensor}, {scale}, "
                         f"{vector} -> {vector}", vector)}[name]
    text = (f"func.func @f(%v: {tensor}, %x: {vector}, %y: {vector}, %d: {scale}) "
            f"-> {result} {{\n{body}\nfunc.return %r : {result}\n}}")
    return parse_module(make_context(), text, "bilinear.mlir")


@pytest.mark.parametrize("name", sorted(DEPTHS))
def test_bilinear_rows_load_whole_and_match_numpy(name, tmp_path, monkeypatch):
    texts: list[str] = []  # the modules compiled (`pipeline` imports it at each compile)
    made = engine.compile_object

    def kept(text, *args, **kwargs):
        texts.append(text)
        return made(text, *args, **kwargs)

    monkeypatch.setattr(engine, "compile_object", kept)
    depth, rng = DEPTHS[name], np.random.default_rng(3)
    v = rng.standard_normal((depth, WIDTH, WIDTH)).astype(np.float32)
    x, y = (rng.standard_normal(WIDTH).astype(np.float32) for _ in range(2))
    d = rng.standard_normal(depth).astype(np.float32)
    fn = recir.compile(module(name, depth), "f", cache_dir=tmp_path, threads=1)
    got = np.asarray(fn(v, x, y, d)[0])
    want = np.einsum("kij,i,j->k", v, x, y) if name == "bilinear" else np.einsum(
        "kij,k,j->i", v, d, y)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert texts
    machine = target_machine()
    for text in texts:
        compiled = llvm_binding.parse_assembly(text)
        optimize(compiled, machine, OPT_LEVEL)
        assert "masked.gather" not in str(compiled)
