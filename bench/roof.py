"""SGEMM roof: NumPy's BLAS, PyTorch and recir's own kernels, at the TreeLSTM's shapes.

The frontier scheduler's work is a few products a frontier: the forward
`x @ W.T` of the leaves (rows x e against the 3h x e leaf weight) and of the
internal nodes (rows x 2h against the 5h x 2h weight), and, in training, the
backward `dY @ W` and the weight gradient `dY^T X`. This section times each
at the row counts a batch of 25 complete 128-leaf trees gives (3,200 leaves;
1,600 down to 25 internal nodes a height), plus a 2048^3 product (the
libraries' best case), by NumPy (its BLAS, `numpy.show_config()`), PyTorch
(MKL in its wheels) and recir's own kernels (`recir.backend.kernels.gemm.gemm`,
forward and backward; on more than one thread their team forms,
`gemm.team_kernel`, each thread a block of C). The roof of a thread count is the best rate of
any library at any shape: what a core (or N) gives to SGEMM here. Each rate
is the best of `--repeats` timings of a loop at least `MIN_S` long; on
several threads each library is timed once the last one's workers have
stopped spinning (`common.wait_quiet`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.common import fmt, machine_info, print_table, wait_quiet, write_json

MIN_S = 0.02  # one timing: enough calls of the product to last this long
BIG = 2048  # the libraries' best case: big square operands


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--hidden", type=int, nargs="+", default=[150, 256])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rows", type=int, nargs="+", default=[25, 100, 400, 1600])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="h=256, rows 25 and 400, 3 repeats")


def shapes(hidden: int, rows: list[int]) -> list[tuple[str, str, int, int, int]]:
    """(product, layout, m, n, k) of a TreeLSTM frontier: `nt` is x @ W.T
    (x m x k, W n x k), `nn` dY @ W (m x k times k x n), `tn` dY^T X (the
    weight gradient: dY m rows of n... read as its transpose, k = rows)."""
    h = hidden
    out = [("leaf x W^T", "nt", 2 * max(rows), 3 * h, h)]  # embed = h; twice the top height
    for m in rows:
        out += [("node x U^T", "nt", m, 5 * h, 2 * h), ("node dY U", "nn", m, 2 * h, 5 * h),
                ("node dY^T X", "tn", 5 * h, 2 * h, m)]
    return out


def rate(fn: Callable[[], Any], flops: float, repeats: int) -> float:
    """GFLOP/s: the best of `repeats` timings of enough calls to last MIN_S."""
    fn()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < MIN_S:
        fn()
        calls += 1
    calls = max(1, calls)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return flops / best / 1e9


def operands(layout: str, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The two operands as the frontier holds them (row-major f32)."""
    rng = np.random.default_rng(0)
    if layout == "nt":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    elif layout == "nn":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    else:  # tn: dY is k x m (rows x gates), read transposed; X is k x n
        a, b = rng.standard_normal((k, m)), rng.standard_normal((k, n))
    return a.astype(np.float32), b.astype(np.float32)


def numpy_product(layout: str, a: np.ndarray, b: np.ndarray) -> Callable[[], Any]:
    if layout == "nt":
        return lambda: a @ b.T
    if layout == "nn":
        return lambda: a @ b
    return lambda: a.T @ b


def torch_product(layout: str, a: np.ndarray, b: np.ndarray) -> Callable[[], Any]:
    import torch

    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    if layout == "nt":
        return lambda: ta @ tb.T
    if layout == "nn":
        return lambda: ta @ tb
    return lambda: ta.T @ tb


def recir_product(layout: str, a: np.ndarray, b: np.ndarray, threads: int) -> Callable[[], Any]:
    """recir's kernel for the layout, on more than one thread its team form
    (on every product that has two tiles to share: the roof is the team's
    rate, not the policy's choice); the function returns the product (`tn`:
    the sum of its calls' products)."""
    from recir.backend.kernels import gemm

    if layout == "nt":
        if threads > 1:
            return lambda: gemm.gemm(a, b.T, threads=threads, min_work=0)
        return lambda: gemm.gemm(a, b.T)
    if layout == "nn":  # a new array, as NumPy's
        return lambda: gemm.gemm(a, b, threads=threads, min_work=0)
    rows, m = a.shape
    n = b.shape[1]
    acc = np.zeros((m, n), np.float32)  # accumulates: the values grow, the work does not

    def add() -> np.ndarray:
        gemm.add_outer_at(acc.ctypes.data, m, n, a.ctypes.data, m, b.ctypes.data, n, rows,
                          threads, min_work=0)
        return acc

    return add


def set_threads(threads: int) -> None:
    from recir.backend.kernels import blas

    blas.set_threads(threads)
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass


LIBRARIES = ("numpy", "torch", "recir")


def product(library: str, layout: str, a: np.ndarray, b: np.ndarray,
            threads: int) -> Callable[[], Any]:
    if library == "numpy":
        return numpy_product(layout, a, b)
    if library == "torch":
        return torch_product(layout, a, b)
    return recir_product(layout, a, b, threads)


def measure(hiddens: list[int], threads: int, rows: list[int], repeats: int,
            big: bool = True) -> list[dict[str, Any]]:
    """One row per shape: GFLOP/s of each library (None where it cannot run)."""
    set_threads(threads)
    cases = [("square", "nn", BIG, BIG, BIG, 0)] if big else []
    cases += [(*s, h) for h in hiddens for s in shapes(h, rows)]
    out = []
    for name, layout, m, n, k, h in cases:
        a, b = operands(layout, m, n, k)
        row: dict[str, Any] = {"product": name, "layout": layout, "m": m, "n": n, "k": k,
                               "hidden": h, "threads": threads, "gflops": {}, "skipped": {}}
        for library in LIBRARIES:
            try:
                fn = product(library, layout, a, b, threads)
                if threads > 1:  # the last library's workers asleep
                    wait_quiet()
                row["gflops"][library] = rate(fn, 2.0 * m * n * k, repeats)
            except (ImportError, AttributeError, TypeError, OSError) as e:
                row["skipped"][library] = f"{type(e).__name__}: {e}"
        out.append(row)
    set_threads(1)
    return out


def roof_of(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per library, its best rate over the shapes; `roof`: the best of all."""
    best: dict[str, float] = {}
    for row in rows:
        for library, value in row["gflops"].items():
            best[library] = max(best.get(library, 0.0), value)
    best["roof"] = max(best.values(), default=0.0)
    return best


def quick_roof(threads: int, hidden: int, repeats: int = 3) -> dict[str, float]:
    """The roof at the shapes that set it in practice: the big square and the
    widest frontier rows (`batching` measures it before and after its rows)."""
    return roof_of(measure([hidden], threads, [1600], repeats))


def print_rows(rows: list[dict[str, Any]]) -> None:
    print_table("SGEMM GFLOP/s (best of the repeats); recir: gemm (nt, nn, tn)",
                ["product", "h", "m x n x k", "thr", *LIBRARIES, "recir / best peer"],
                [[r["product"], str(r["hidden"] or "-"), f"{r['m']}x{r['n']}x{r['k']}",
                  str(r["threads"]), *[fmt(r["gflops"].get(lib)) for lib in LIBRARIES],
                  fmt(ratio_to_peer(r), 2)] for r in rows])


def ratio_to_peer(row: dict[str, Any]) -> float | None:
    peers = [row["gflops"][k] for k in ("numpy", "torch") if k in row["gflops"]]
    mine = row["gflops"].get("recir")
    return mine / max(peers) if mine and peers else None


def run(args: argparse.Namespace) -> int:
    from bench.peers import blas_report, summary

    if args.quick:
        args.hidden, args.rows, args.repeats = [256], [25, 400], 3
    report: dict[str, Any] = {"machine": machine_info(), "blas": blas_report(), "rows": [],
                              "roof": {}}
    print(f"CPU: {report['machine']['cpu']} ({report['machine']['nproc']} cores)")
    print(summary(report["blas"]), flush=True)
    for threads in args.threads:
        rows = measure(args.hidden, threads, args.rows, args.repeats)
        report["rows"] += rows
        report["roof"][threads] = roof_of(rows)
    print_rows(report["rows"])
    for threads, roof in report["roof"].items():
        print(f"SGEMM roof, {threads} thread(s): {roof['roof']:.0f} GFLOP/s (" + ", ".join(
            f"{k} {v:.0f}" for k, v in roof.items() if k != "roof") + ")")
    if args.json:
        write_json(args.json, report)
    return 0
