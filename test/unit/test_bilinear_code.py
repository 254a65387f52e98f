"""A bilinear form's code with RNTN's rows (d=25: 50 wide). Recursive: V's
rows dotted with a vector as one matrix, so that once LLVM has unrolled
the short dots it does not vectorize across V's rows with gathers (5x
slower at d=25). Over a frontier's rows: one product of every row's y with
all of V's rows (`row_products.bilinear_rows`). Values against NumPy."""

from __future__ import annotations

import llvmlite.binding as llvm_binding
import numpy as np
import pytest
from xdsl.dialects import func

import recir
import recir.frontier_compile as frontier_compile
from recir.backend import engine, policy
from recir.backend.engine import OPT_LEVEL, optimize, target_machine
from recir.backend.frontier_summary import row_work
from recir.context import make_context
from recir.backend import llvm_workers
from recir.frontier_compile import compile_rows
from recir.parsing import parse_module

WIDTH = 50


def compiled_ir(monkeypatch, owner) -> list[str]:
    """The LLVM IR of each module `owner.compile_object` compiles from now on
    (every one in this process: no child compiles a part, `llvm_workers`)."""
    texts: list[str] = []
    made = owner.compile_object

    def no_child(*args, **kwargs):
        raise OSError("compiled here")

    monkeypatch.setattr(llvm_workers, "Child", no_child)

    def kept(text, *args, **kwargs):
        texts.append(text)
        return made(text, *args, **kwargs)

    monkeypatch.setattr(owner, "compile_object", kept)
    return texts


def native_rows(text: str, name: str, cache_dir, threads: int):
    """`@name` of `text`, a function over rows, compiled natively."""
    function = next(op for op in parse_module(make_context(), text).ops
                    if isinstance(op, func.FuncOp))
    return compile_rows([([function], None)], cache_dir, threads=threads).functions[name]
DEPTHS = {"bilinear": 25, "bilinear_lhs": 25}


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
    texts = compiled_ir(monkeypatch, engine)  # (`pipeline` imports it at each compile)
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


def all_three(depth: int, rows: int, cols: int):
    """The form and both its gradients on one depth x rows x cols tensor."""
    t, x, y, d = (f"tensor<{depth}x{rows}x{cols}xf32>", f"tensor<{rows}xf32>",
                  f"tensor<{cols}xf32>", f"tensor<{depth}xf32>")
    text = (f"func.func @f(%v: {t}, %x: {x}, %y: {y}, %d: {d}) -> ({d}, {x}, {y}) {{\n"
            f"%r = tmath.bilinear %v, %x, %y : {t}, {x}, {y} -> {d}\n"
            f"%l = adjoint.bilinear_lhs %v, %d, %y : {t}, {d}, {y} -> {x}\n"
            f"%h = adjoint.bilinear_rhs %v, %d, %x : {t}, {d}, {x} -> {y}\n"
            f"func.return %r, %l, %h : {d}, {x}, {y}\n}}")
    return parse_module(make_context(), text, "bilinear.mlir")


# depth x rows not a multiple of ROW_BLOCK (remainders 1, 2, 3; no block at
# all), depth, rows or cols 1; 40 x 500 sums (80 KB) put the scratch
# buffer on the heap (`frame_buffers`)
ODD_SHAPES = [(1, 1, 1), (1, 2, 2), (2, 3, 1), (5, 1, 9), (1, 5, 3), (7, 13, 9),
              (40, 500, 3)]


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes_match_einsum(shape, tmp_path, monkeypatch):
    texts = compiled_ir(monkeypatch, engine)
    depth, rows, cols = shape
    rng = np.random.default_rng(list(shape))
    v = rng.standard_normal(shape).astype(np.float32)
    x, y, d = (rng.standard_normal(n).astype(np.float32) for n in (rows, cols, depth))
    got = recir.compile(all_three(*shape), "f", cache_dir=tmp_path, threads=1)(v, x, y, d)
    v64 = v.astype(np.float64)
    wants = (np.einsum("kij,i,j->k", v64, x, y), np.einsum("kij,k,j->i", v64, d, y),
             np.einsum("kij,k,i->j", v64, d, x))
    for name, value, want in zip(("bilinear", "lhs", "rhs"), got, wants, strict=True):
        np.testing.assert_allclose(np.asarray(value), want, rtol=1e-5,
                                   atol=1e-5 * np.abs(want).max(), err_msg=name)
    heap = "aligned_alloc" in "".join(texts)
    assert heap == (depth * rows * 4 > 65536)


def test_frontier_rows_of_an_odd_rntn_match_recursive_code():
    """The frontier's bilinear form (one product over rows) and its
    per-row gradient kernels (`row_kernels.PER_ROW`: the same
    `bilinear_lhs` on each row): RNTN at d=3 has 3 x 6 sums (a remainder
    of 2 past ROW_BLOCK) of 6-wide rows; values against NumPy, gradients
    against the recursive code's (itself against the interpreter in
    test_gradients.py)."""
    from recir.data import make_treebank
    from recir.models import rntn

    params = rntn.init_params(np.random.default_rng(5), hidden=3, vocab=100)
    traced = rntn.trace_model(params)
    trees = make_treebank(6, seed=3)
    args = [(t.left, t.right, t.word, t.label, t.root) for t in trees]
    for tree, (h, loss) in zip(trees, recir.compile(traced, batching="frontier").batch(args),
                               strict=True):
        h_ref, loss_ref = rntn.reference(tree, tree.root, params)
        np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(loss_ref, rel=1e-5)
    expected = {k: np.zeros_like(v) for k, v in params.items()}
    recursive = recir.value_and_grad(traced)
    for a in args:
        recursive(*a, into=expected)
    _, grads = recir.value_and_grad(traced, batching="frontier").batch(args)
    for name, want in expected.items():
        np.testing.assert_allclose(grads[name], want, rtol=1e-4,
                                   atol=1e-5 * np.abs(want).max(), err_msg=name)


@pytest.mark.parametrize(("depth", "width", "count", "threads"),
                         [(3, 6, 5, 1), (7, 13, 9, 2), (25, 50, 300, 1), (25, 50, 300, 2)])
def test_bilinear_over_rows_is_one_product(depth, width, count, threads, tmp_path,
                                           monkeypatch):
    """`tmath.bilinear` over rows calls the module's GEMM (its team form on
    2 threads), no row-by-row kernel, and gives every row's form."""
    texts = compiled_ir(monkeypatch, frontier_compile)
    native = rows_function(depth, width, threads, tmp_path)
    assert any("recir_gemm_nt" in ir for ir in texts)
    # V, a parameter the function never writes: a height loop's packed copy serves it
    assert any("recir_gemm_nt.cached" in ir for ir in texts)
    rng = np.random.default_rng(depth)
    v = rng.standard_normal((depth, width, width)).astype(np.float32)
    x, y = (rng.standard_normal((count, width)).astype(np.float32) for _ in range(2))
    want = np.einsum("kij,ri,rj->rk", v.astype(np.float64), x, y)
    np.testing.assert_allclose(native(v, x, y), want, rtol=1e-4,
                               atol=1e-5 * np.abs(want).max())


def rows_function(depth: int, width: int, threads: int, tmp_path, uniform_x: bool = False):
    """`@b(v, x, y)`: the bilinear form over rows of y, x rows too or uniform."""
    tensor, rows = f"tensor<{depth}x{width}x{width}xf32>", f"tensor<?x{width}xf32>"
    x = f"tensor<{width}xf32>" if uniform_x else rows
    text = (f"func.func @b(%v: {tensor}, %x: {x}, %y: {rows}) -> tensor<?x{depth}xf32> {{\n"
            f"%r = tmath.bilinear %v, %x, %y : {tensor}, {x}, {rows} "
            f"-> tensor<?x{depth}xf32>\nfunc.return %r : tensor<?x{depth}xf32>\n}}")
    native = native_rows(text, "b", tmp_path, threads)

    def run(*args):
        got = native(list(args))
        return got[0] if isinstance(got, list | tuple) else got
    return run


@pytest.mark.parametrize("threads", [1, 2])
def test_bilinear_of_a_uniform_vector_and_rows_keeps_the_per_row_kernel(threads, tmp_path):
    """x a parameter vector, y rows: no product over rows (`row_kernels.bilinear`
    falls back to the per-row kernel); every row's form, and again with fewer rows."""
    depth, width, count = 7, 13, 301
    run = rows_function(depth, width, threads, tmp_path, uniform_x=True)
    rng = np.random.default_rng(1)
    v = rng.standard_normal((depth, width, width)).astype(np.float32)
    x = rng.standard_normal(width).astype(np.float32)
    y = rng.standard_normal((count, width)).astype(np.float32)
    want = np.einsum("kij,i,rj->rk", v.astype(np.float64), x, y)
    for n in (count, 5, 0):
        np.testing.assert_allclose(run(v, x, y[:n]), want[:n], rtol=1e-4,
                                   atol=1e-5 * np.abs(want).max())


def test_bilinear_over_many_wide_rows_fits_its_scratch(tmp_path):
    """Each row's depth x rows sums (here 5,000 floats, 20 kB) are scratch rows the
    function's per-row scratch counts: 2,000 rows on 2 threads, then 3 rows."""
    depth, width, count = 50, 100, 2000
    run = rows_function(depth, width, 2, tmp_path)
    rng = np.random.default_rng(2)
    v = (rng.standard_normal((depth, width, width)) / width).astype(np.float32)
    x, y = (rng.standard_normal((count, width)).astype(np.float32) for _ in range(2))
    want = np.einsum("kij,ri,rj->rk", v.astype(np.float64), x, y)
    for n in (count, 3):
        np.testing.assert_allclose(run(v, x[:n], y[:n]), want[:n], rtol=1e-4,
                                   atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 2])
def test_frontier_rntn_gradients_at_d25_match_recursive_code(threads):
    """RNTN d=25's tensor gradients over rows (the left and right gradients
    and V's, each a product over the rows) against the recursive code's;
    parameters scaled so that float32 sums stay well conditioned."""
    from recir.data import make_treebank
    from recir.models import rntn

    params = rntn.init_params(np.random.default_rng(0), hidden=25, vocab=200)
    params = {k: (v * 0.2 / 25 if v.ndim == 3 else v * 2 / np.sqrt(v.shape[-1])
                  if v.ndim == 2 and k != "emb" else v).astype(np.float32)
              for k, v in params.items()}
    traced = rntn.trace_model(params)
    args = [(t.left, t.right, t.word, t.label, t.root)
            for t in make_treebank(12, seed=7, vocab_size=200)]
    want = {k: np.zeros_like(v) for k, v in params.items()}
    recursive = recir.value_and_grad(traced, threads=threads)
    for a in args:
        recursive(*a, into=want)
    _, got = recir.value_and_grad(traced, batching="frontier", threads=threads).batch(args)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4,
                                   atol=1e-5 * np.abs(value).max(), err_msg=name)


@pytest.mark.parametrize(("depth", "rows", "cols", "count", "threads"),
                         [(7, 13, 9, 301, 1), (5, 3, 11, 200, 2), (25, 50, 50, 300, 2),
                          (2, 3, 1, 0, 2)])
def test_bilinear_gradients_over_rows_match_einsum(depth, rows, cols, count, threads,
                                                  tmp_path, monkeypatch):
    """The three gradient ops over rows (`adjoint_row_kernels`: products
    over the rows) on a tensor that is not square, x and y distinct slices
    of one row (stride past width) and dr a slice too: RNTN's x is its y and
    its V square, so there a left gradient taken for the right one, or V's
    gradient transposed, goes unseen. On 2 threads every product that splits
    does (a team start and barrier of 0 s)."""
    policy.save_tuned(policy.DEFAULT_TASK_S, 0.0, 1.0, tmp_path, warm_team_s=0.0)
    t = f"tensor<{depth}x{rows}x{cols}xf32>"
    x, y, d = (f"tensor<?x{n}xf32>" for n in (rows, cols, depth))
    c, dd = f"tensor<?x{rows + cols + 1}xf32>", f"tensor<?x{depth + 2}xf32>"
    text = (f"func.func @g(%v: {t}, %acc: {t}, %dd: {dd}, %c: {c}) -> ({x}, {y}) {{\n"
            f"%dr = tmath.slice %dd[1] : {dd} -> {d}\n"
            f"%x = tmath.slice %c[1] : {c} -> {x}\n"
            f"%y = tmath.slice %c[{rows + 1}] : {c} -> {y}\n"
            f"%l = adjoint.bilinear_lhs %v, %dr, %y : {t}, {d}, {y} -> {x}\n"
            f"%h = adjoint.bilinear_rhs %v, %dr, %x : {t}, {d}, {x} -> {y}\n"
            f"adjoint.accumulate_bilinear %acc, %dr, %x, %y : {t}, {d}, {x}, {y}\n"
            f"func.return %l, %h : {x}, {y}\n}}")
    texts = compiled_ir(monkeypatch, frontier_compile)
    native = native_rows(text, "g", tmp_path, threads)
    assert all(f"recir_gemm_{layout}" in "".join(texts) for layout in ("nt", "nn", "tn"))
    # V, never written: the left gradient's product reads a height loop's packed copy
    assert "recir_gemm_nt.cached" in "".join(texts)
    rng = np.random.default_rng(depth)
    v, acc = (rng.standard_normal((depth, rows, cols)).astype(np.float32) for _ in range(2))
    dd_rows = rng.standard_normal((count, depth + 2)).astype(np.float32)
    c_rows = rng.standard_normal((count, rows + cols + 1)).astype(np.float32)
    dr, xs, ys = dd_rows[:, 1:1 + depth], c_rows[:, 1:1 + rows], c_rows[:, 1 + rows:]
    start = acc.copy()
    lhs, rhs = native([v, acc, dd_rows, c_rows])
    v64 = v.astype(np.float64)
    for name, value, want in (("lhs", lhs, np.einsum("kij,rk,rj->ri", v64, dr, ys)),
                              ("rhs", rhs, np.einsum("kij,rk,ri->rj", v64, dr, xs)),
                              ("acc", acc, start + np.einsum("rk,ri,rj->kij", dr, xs, ys))):
        np.testing.assert_allclose(np.asarray(value), want, rtol=1e-4,
                                   atol=1e-5 * max(np.abs(want).max(initial=0), 1),
                                   err_msg=name)


def test_row_work_counts_a_bilinear_form_and_its_gradients():
    """`frontier_summary.row_work` (a row's multiply-adds, by which the
    policy splits a height's rows across a team) counts a bilinear form over
    rows as V's size, and its three gradients' products (left, right, V's)
    as V's size each."""
    depth, rows, cols = 3, 4, 5
    t, d = f"tensor<{depth}x{rows}x{cols}xf32>", f"tensor<?x{depth}xf32>"
    x, y = f"tensor<?x{rows}xf32>", f"tensor<?x{cols}xf32>"
    forward = (f"func.func @f(%v: {t}, %x: {x}, %y: {y}) -> {d} {{\n"
               f"%r = tmath.bilinear %v, %x, %y : {t}, {x}, {y} -> {d}\n"
               f"func.return %r : {d}\n}}")
    backward = (f"func.func @g(%v: {t}, %acc: {t}, %dr: {d}, %x: {x}, %y: {y})"
                f" -> ({x}, {y}) {{\n"
                f"%l = adjoint.bilinear_lhs %v, %dr, %y : {t}, {d}, {y} -> {x}\n"
                f"%h = adjoint.bilinear_rhs %v, %dr, %x : {t}, {d}, {x} -> {y}\n"
                f"adjoint.accumulate_bilinear %acc, %dr, %x, %y : {t}, {d}, {x}, {y}\n"
                f"func.return %l, %h : {x}, {y}\n}}")
    for text, products in ((forward, 1), (backward, 3)):
        function = next(iter(parse_module(make_context(), text).ops))
        assert row_work(function) == products * depth * rows * cols
