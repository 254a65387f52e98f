"""The matrix kernels (`recir/passes/gemm_kernels.py`, called through
`recir/backend/kernels/gemm.py`) against NumPy."""

import re

import numpy as np
import pytest

import recir
from recir import frontend as rf
from recir.backend.kernels import compiled_gemm, gemm
from recir.passes.gemm_target import Target, host_target

SHAPES = [(1, 1, 1), (3, 17, 9), (4, 96, 128), (5, 97, 129), (7, 300, 750), (33, 256, 1280)]


def padded(rng, rows, cols, pad=5):
    """A (rows, cols) view inside a NaN-filled buffer: reading or writing
    next to it would show as NaN in the result or in the padding."""
    buffer = np.full((rows + 2, cols + pad), np.nan, np.float32)
    view = buffer[1:rows + 1, :cols]
    view[...] = rng.standard_normal((rows, cols))
    return buffer, view


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_nn_matches_numpy_and_stays_inside_its_arrays(m, n, k, accumulate):
    rng = np.random.default_rng(m * n + k)
    _, a = padded(rng, m, k)
    _, b = padded(rng, k, n)
    c_buffer, c = padded(rng, m, n)
    want = a.astype(np.float64) @ b + (c if accumulate else 0)
    got = gemm.gemm(a, b, c) if accumulate else gemm.gemm(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    outside = c_buffer.copy()
    outside[1:m + 1, :n] = 0
    assert np.isnan(outside[0]).all()
    assert np.isnan(outside[:, n:]).all()


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_tn_reads_a_transposed_view(m, n, k):
    rng = np.random.default_rng(k)
    dy = rng.standard_normal((k, m)).astype(np.float32)
    _, x = padded(rng, k, n)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    want = acc + dy.T.astype(np.float64) @ x
    np.testing.assert_allclose(gemm.gemm(dy.T, x, acc), want, rtol=1e-4,
                               atol=1e-4 * np.sqrt(k))


def test_a_classifier_gradient_goes_through_the_tn_kernel():
    rng = np.random.default_rng(1)
    dy = rng.standard_normal((994, 5)).astype(np.float32)
    x = rng.standard_normal((994, 256)).astype(np.float32)
    acc = rng.standard_normal((5, 256)).astype(np.float32)
    want = acc + dy.T.astype(np.float64) @ x
    gemm.gemm(dy.T, x, acc, threads=2)
    np.testing.assert_allclose(acc, want, rtol=1e-4, atol=1e-3)


# --- every layout at the edges of the host's tiles and blocks ------------------------

TARGET = host_target()
ROWS, VECTORS = TARGET.tile
NT_ROWS, NT_COLS = TARGET.nt_tile
LANES = TARGET.lanes


def edge_shapes():
    """(m, n, k): one below, at and one past each tile, panel, vector and
    depth boundary, k = 1, m = 1, n = 1 and an empty k."""
    width, depth = TARGET.width, TARGET.depth
    return [(1, 1, 1), (1, width + 1, 3), (ROWS - 1, LANES - 1, 1), (ROWS + 1, width, LANES + 1),
            (2 * ROWS + 3, 2 * width - 1, depth + 1), (NT_ROWS + 1, NT_COLS * 2 + 1, 2 * LANES),
            (NT_ROWS - 1 or 1, NT_COLS - 1 or 1, LANES - 1), (3, 5, 0), (7, 1, depth - 1),
            *nt_packed_shapes()]


def nt_packed_shapes():
    """Shapes with more rows of A than about a tenth of k: nt packs B
    transposed (squares cut by k's end and by n's) instead of taking dot
    products (`gemm_kernels.nt_driver`)."""
    return [(10 * ROWS + 1, 2 * TARGET.width - 3, 2 * TARGET.depth + LANES + 3),
            (ROWS - 1, LANES + 1, LANES + 3)]


def operands(rng, layout, m, n, k, pad):
    """A, B and the float64 product, each inside a NaN-padded buffer."""
    if layout == "nn":
        (_, a), (_, b) = padded(rng, m, k, pad), padded(rng, k, n, pad)
        return a, b, a.astype(np.float64) @ b
    if layout == "tn":
        (_, a), (_, b) = padded(rng, k, m, pad), padded(rng, k, n, pad)
        return a, b, a.T.astype(np.float64) @ b
    (_, a), (_, b) = padded(rng, m, k, pad), padded(rng, n, k, pad)
    return a, b, a.astype(np.float64) @ b.T


def check_inside(layout, accumulate, shapes, seed):
    """Each shape's product (+ C) against NumPy, C's padding untouched."""
    rng = np.random.default_rng(seed)
    for i, (m, n, k) in enumerate(shapes):
        a, b, want = operands(rng, layout, m, n, k, pad=3 + i)
        c_buffer, c = padded(rng, m, n, pad=7)
        want = want + (c if accumulate else 0)
        gemm.kernel(layout)(m, n, k, a.ctypes.data, a.strides[0] // 4, b.ctypes.data,
                            b.strides[0] // 4, c.ctypes.data, c.strides[0] // 4, accumulate)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k + 1),
                                   err_msg=f"{layout} {m}x{n}x{k}")
        outside = c_buffer.copy()
        outside[1:m + 1, :n] = 0
        assert np.isnan(outside[0]).all()
        assert np.isnan(outside[:, n:]).all()


needs_openmp = pytest.mark.skipif(gemm.team_kernel("nn") is None, reason="no OpenMP runtime")


@needs_openmp
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_team_forms_at_tile_edges_match_numpy_on_one_to_six_threads(layout):
    """`recir_gemm_<layout>.team` with a team start that always pays
    (min_work 0): each thread's block of C (a grid of C's rows by its
    columns from 4 threads on, where both are wide), cut at the tile edges,
    adds up to the whole product, and nothing outside C is written."""
    rng = np.random.default_rng(len(layout))
    shapes = [*edge_shapes(), (4 * ROWS + 3, 8 * LANES + 5, 9), (9 * ROWS, 3 * LANES + 1, 40)]
    for i, (m, n, k) in enumerate(shapes):
        a, b, want = operands(rng, layout, m, n, k, pad=2 + i)
        for threads in (1, 2, 3, 4, 6):
            for accumulate in (0, 1):
                c_buffer, c = padded(rng, m, n, pad=4)
                expected = want + (c if accumulate else 0)
                gemm.team_kernel(layout)(m, n, k, a.ctypes.data, a.strides[0] // 4,
                                         b.ctypes.data, b.strides[0] // 4, c.ctypes.data,
                                         c.strides[0] // 4, accumulate, threads, 0)
                np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k + 1),
                                           err_msg=f"{layout} {m}x{n}x{k} on {threads}")
                outside = c_buffer.copy()
                outside[1:m + 1, :n] = 0
                assert np.isnan(outside[0]).all() and np.isnan(outside[-1]).all()
                assert np.isnan(outside[:, n:]).all()


@needs_openmp
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_a_team_gives_the_same_bits_call_after_call(layout):
    """The grid depends on (m, n, k, threads) alone: a team of 4 or 6 gives
    one product's bits on every call (each element summed by one thread)."""
    rng = np.random.default_rng(7)
    m, n, k = 9 * ROWS + 1, 6 * LANES + 3, 3 * LANES + 5
    a, b, _ = operands(rng, layout, m, n, k, pad=3)
    for threads in (4, 6):
        found = []
        for _ in range(3):
            _, c = padded(rng, m, n, pad=4)
            c[...] = 0
            gemm.team_kernel(layout)(m, n, k, a.ctypes.data, a.strides[0] // 4,
                                     b.ctypes.data, b.strides[0] // 4, c.ctypes.data,
                                     c.strides[0] // 4, 0, threads, 0)
            found.append(c.copy())
        for other in found[1:]:
            np.testing.assert_array_equal(other, found[0])


@needs_openmp
@pytest.mark.parametrize(("m", "n", "k"), [(300, 64, 45), (2 * ROWS + 1, 3 * LANES + 1, 7),
                                           (5, 256, 994)])
def test_add_outer_at_on_a_team_equals_one_thread(m, n, k):
    """A weight gradient's G += DY^T X on a team (forced: min_work 0, and
    as the machine's policy decides) gives the one-thread kernel's bits:
    each element is summed over k in the same order by one thread."""
    rng = np.random.default_rng(m + n + k)
    dy = rng.standard_normal((k, m)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    start = rng.standard_normal((m, n)).astype(np.float32)
    results = []
    for threads, min_work in ((1, None), (2, 0), (2, None), (4, 0), (6, 0)):
        g = start.copy()
        gemm.add_outer_at(g.ctypes.data, m, n, dy.ctypes.data, m, x.ctypes.data, n, k,
                          threads, min_work)
        results.append(g)
    np.testing.assert_allclose(results[0], start + dy.T.astype(np.float64) @ x, rtol=1e-4,
                               atol=1e-4 * np.sqrt(k))
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


@needs_openmp
@pytest.mark.parametrize(("m", "n", "counts"), [(40, 19, (7, 12)), (750, 300, (3, 0, 9, 1)),
                                                (5, 256, (20,))])
def test_logs_on_a_team_equal_their_products_one_after_another(m, n, counts):
    """A gradient's logs added by one team (`recir_gemm_tn.logs`: each
    thread its block of G through every log) give the bits of the one-thread
    kernel adding each log in turn, at every team size."""
    rng = np.random.default_rng(m + n)
    logs = [rng.standard_normal((k, m + n)).astype(np.float32) for k in counts]
    segments = np.array([(log.ctypes.data, m + n, log.ctypes.data + 4 * m, m + n, len(log))
                         for log in logs], np.int64)
    start = rng.standard_normal((m, n)).astype(np.float32)
    alone = start.copy()
    for log in logs:
        gemm.add_outer_at(alone.ctypes.data, m, n, log.ctypes.data, m + n,
                          log.ctypes.data + 4 * m, m + n, len(log))
    want = start + sum(log[:, :m].T.astype(np.float64) @ log[:, m:] for log in logs)
    np.testing.assert_allclose(alone, want, rtol=1e-4, atol=1e-4 * np.sqrt(sum(counts)))
    for threads in (2, 4, 6):
        g = start.copy()
        gemm.add_outer_logs(g.ctypes.data, m, n, segments, threads, 0)
        np.testing.assert_array_equal(g, alone)


@needs_openmp
def test_gemm_reads_a_transposed_b_as_nt_on_a_team():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((37, 40)).astype(np.float32)
    w = rng.standard_normal((70, 40)).astype(np.float32)
    want = x.astype(np.float64) @ w.T
    for threads in (1, 2):
        np.testing.assert_allclose(gemm.gemm(x, w.T, threads=threads, min_work=0), want,
                                   rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="both be transposed"):
        gemm.gemm(x.T, w[:, :37].T)


@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
@pytest.mark.parametrize("accumulate", [0, 1])
def test_every_layout_at_tile_edges_stays_inside_its_arrays(layout, accumulate):
    check_inside(layout, accumulate, edge_shapes(), len(layout) + accumulate)


def test_nt_with_few_rows_of_b_takes_dot_products_over_many_rows_of_a():
    """A classifier's 5 rows of B against many rows of A: dot products (a
    packed panel would compute `width` columns for 5), every row of A's
    tiles and the last partial ones."""
    m = 300 * NT_ROWS + NT_ROWS - 1
    check_inside("nt", 1, [(m, 5, 16 * LANES + 3), (m, NT_COLS + 1, LANES - 1)], 9)


@pytest.mark.parametrize(("m", "n", "k"), [
    (1, 1, 1), (ROWS + 1, 5, 2 * LANES + 3), (300 * NT_ROWS + 1, 5, 16 * LANES + 3),
    (2 * ROWS - 1, TARGET.width + 3, TARGET.depth + LANES + 1), (0, 7, 3), (4, 9, 0),
    (10 * ROWS + 1, 2 * TARGET.width, 2 * TARGET.depth + LANES + 3)])
def test_nt_bias_starts_every_row_from_the_bias(m, n, k):
    """recir_gemm_nt_bias: C = A B^T + bias in each row, by dot products
    (few rows of B or of A) or by the packed path (k past a block), C's
    padding and the bias's neighbours untouched."""
    rng = np.random.default_rng(m + n + k)
    _, a = padded(rng, m, k, 3)
    _, b = padded(rng, n, k, 4)
    bias_buffer, bias = padded(rng, 1, n, 2)
    c_buffer, c = padded(rng, m, n, pad=7)
    want = a.astype(np.float64) @ b.T + bias
    gemm.kernel("nt_bias")(m, n, k, a.ctypes.data, a.strides[0] // 4, b.ctypes.data,
                           b.strides[0] // 4, c.ctypes.data, c.strides[0] // 4,
                           bias.ctypes.data)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k + 1))
    outside = c_buffer.copy()
    outside[1:m + 1, :n] = 0
    assert np.isnan(outside[0]).all() and np.isnan(outside[:, n:]).all()
    assert np.isnan(bias_buffer[0]).all() and np.isnan(bias_buffer[1, n:]).all()


def test_nt_bias_over_several_blocks_of_rows():
    """Many rows (B packed once) and k past two blocks: only the first
    block of k starts from the bias, the later ones add to C."""
    n, k = 4 * TARGET.width - 3, 2 * TARGET.depth + LANES + 3
    m = 2 * block_rows(n, k) + ROWS + 1
    rng = np.random.default_rng(12)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    gemm.kernel("nt_bias")(m, n, k, a.ctypes.data, k, b.ctypes.data, k, c.ctypes.data, n,
                           bias.ctypes.data)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.T + bias, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_rows_of_a_a_way_apart_are_packed_tile_by_tile(layout):
    """A's leading dimension a multiple of an L1 way (its tile's rows in the
    same sets): A's blocks are packed tile by tile, partial tiles too,
    over several blocks of k and of rows."""
    lda = TARGET.l1_bytes // TARGET.l1_ways // 4
    k, n = min(lda, TARGET.depth + LANES + 3), 2 * TARGET.width  # nt: packed, not dots
    rng = np.random.default_rng(13)
    for m in (2 * ROWS + 1, 2 * block_rows(n, k) + ROWS - 1):
        buffer = np.full((m + 1, lda), np.nan, np.float32)
        a = buffer[:m, :k]
        a[...] = rng.standard_normal((m, k))
        b = rng.standard_normal((k, n) if layout == "nn" else (n, k)).astype(np.float32)
        c = np.full((m, n), np.nan, np.float32)
        gemm.kernel(layout)(m, n, k, a.ctypes.data, lda, b.ctypes.data, b.shape[1],
                            c.ctypes.data, n, 0)
        want = a.astype(np.float64) @ (b if layout == "nn" else b.T)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3, err_msg=f"{m} rows")


def block_rows(n, k):
    """Rows of A a block holds at this n and k (its rows of A and of C in L2,
    less B's packed panels where they fit in half of it, else less L1)."""
    packed = k * -(-n // TARGET.width) * TARGET.width * 4
    kept = packed if packed <= TARGET.l2_bytes // 2 else TARGET.l1_bytes
    block = (TARGET.l2_bytes - kept) // 4 // (n + TARGET.depth)
    return max(block // ROWS * ROWS, ROWS)


@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
@pytest.mark.parametrize("accumulate", [0, 1])
def test_b_packed_once_serves_every_block_of_rows(layout, accumulate):
    """More rows than two blocks hold, ending in a partial tile, k past two
    blocks of depth and n in a partial panel: B is packed once into the
    heap workspace and read by every block (tn's A packed tile by tile);
    one block of rows with a partial tile packs per panel on the stack."""
    n = 4 * TARGET.width - 3
    k = 2 * TARGET.depth + LANES + 3
    shapes = [(2 * block_rows(n, k) + ROWS + 1, n, k), (block_rows(n, k) - 1, n - 2, k - 5)]
    check_inside(layout, accumulate, shapes, 3 * len(layout) + accumulate)


def test_nt_cuts_a_operand_into_blocks_that_fit_l2():
    """More rows than one block of A holds at this k (a block is half of L2)."""
    k = 8
    m = TARGET.l2_bytes // 2 // 4 // k + NT_ROWS + 1
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((3, k)).astype(np.float32)
    np.testing.assert_allclose(gemm.gemm(a, b.T), a @ b.T, rtol=1e-4, atol=1e-4)


def test_nn_cuts_a_operand_into_blocks_that_fit_l2():
    """More rows than a block holds (its rows of A and of C in L2, less L1),
    with k past one block of depth: C is added to across blocks of k."""
    n, k = 300, TARGET.depth + 5
    block = block_rows(n, k)
    m = block + ROWS + 1
    rng = np.random.default_rng(6)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(gemm.gemm(a, b), a @ b, rtol=1e-4, atol=1e-3)


def test_tile_sizes_follow_the_register_count():
    """AVX-512 (32 registers of 16 lanes) and AVX2 (16 of 8): the tile's
    accumulators, held vectors and one more fit the registers."""
    for lanes, registers in ((16, 32), (8, 16)):
        target = Target(lanes, registers, 48 << 10, 2 << 20, 12)
        rows, vectors = target.tile
        assert rows * vectors + vectors + 1 <= registers
        assert vectors & (vectors - 1) == 0
        held, streamed = target.nt_tile
        assert held * streamed + held + 1 <= registers
        way = target.l1_bytes // target.l1_ways  # B's block and A's tile in all ways but one
        assert -(-target.depth * (target.width + rows) * 4 // way) <= target.l1_ways - 1
        assert target.depth % lanes == 0


def test_tmath_matmul_runs_the_kernel_natively():
    """tmath.matmul lowers to a call of `recir_gemm_nn`; its gradient's
    products (with transposed operands) too."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((5, 17)).astype(np.float32)
    x = rng.standard_normal((17, 19)).astype(np.float32)
    with recir.trace("products") as model:
        pw, px = model.param("w", w), model.param("x", x)
        model.output(rf.sum(rf.matmul(pw, px) * rf.matmul(pw, px)))
    value, grads = recir.value_and_grad(model.traced, threads=1)()
    y = w.astype(np.float64) @ x
    np.testing.assert_allclose(value, (y * y).sum(), rtol=1e-4)
    np.testing.assert_allclose(grads["w"], 2 * y @ x.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads["x"], 2 * w.T @ y, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("lanes", [8, 4])
def test_kernels_for_avx2_and_sse_match_numpy(lanes):
    """The module an AVX2 host (8 lanes, 16 registers) or an SSE one (4
    lanes: a panel narrower than a cache line) gets, run here: every layout
    at shapes off its tiles, nt by dot products and packed, and more rows
    than a block (B packed whole, its next block prefetched)."""
    from recir.backend.engine import cached_engine
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.passes.gemm_kernels import gemm_module

    target = Target(lanes, 16, 32 << 10, 1 << 20)
    engine = cached_engine(repr(target), "recir_gemm", lambda: to_llvm_ir(gemm_module(
        target=target)))
    rng = np.random.default_rng(lanes)
    for layout in ("nn", "tn", "nt"):
        function = compiled_gemm.PROTOTYPES[layout](engine.address(f"recir_gemm_{layout}"))
        for m, n, k in [(1, 3, 5), (target.tile[0] + 1, 2 * target.width + 1, lanes + 1),
                        (40, 9, 7), (2, 5, 8 * lanes + 3),
                        (1200, 2 * target.width + 1, 2 * lanes + 1)]:
            a, b, want = operands(rng, layout, m, n, k, pad=2)
            c = np.full((m, n), np.nan, np.float32)
            function(m, n, k, a.ctypes.data, a.strides[0] // 4, b.ctypes.data,
                     b.strides[0] // 4, c.ctypes.data, n, 0)
            np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k),
                                       err_msg=f"{lanes} lanes: {layout} {m}x{n}x{k}")


def test_packed_tiles_prefetch_the_next_block_of_b_into_l2():
    """A tile over a packed block of B reads a line of the block after it
    into L2 a step (B packed whole outgrows L2 at a frontier's shapes: one
    prefetch in each of the two steps of the loop's iteration, one in the
    odd step's); a tile reading B in place has nothing packed to prefetch."""
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.passes.gemm_kernels import gemm_module

    text = str(to_llvm_ir(gemm_module(["nt", "nn"], target=TARGET)))
    bodies = {m[1]: m[0] for m in re.finditer(r'define [^\n]*@"?([\w.]+)"?\(.*?\n}', text, re.S)}
    to_l2 = re.compile(r'@"?llvm\.prefetch\.p0"?\(ptr [^,]+, i32 0, i32 2, i32 1\)')
    for layout in ("nt", "nn"):
        for kind in ("tile", "packed_a"):
            assert len(to_l2.findall(bodies[f"recir_gemm_{layout}.{kind}{ROWS}"])) == 3
    assert not to_l2.search(bodies[f"recir_gemm_nn.direct{ROWS}"])


def test_a_panel_narrower_than_a_line_divides_by_no_zero():
    """SSE's panel (two vectors of 4 lanes) is under a cache line: the
    tiles' share of the next block is still one line a step, with no
    division by zero in the kernels (undefined behaviour for LLVM)."""
    from recir.backend.llvm_convert import to_llvm_ir
    from recir.passes.gemm_kernels import gemm_module

    text = str(to_llvm_ir(gemm_module(target=Target(4, 16, 32 << 10, 1 << 20))))
    assert not re.search(r"\b(?:srem|sdiv|urem|udiv) i64 [^,\n]+, 0\b", text)
