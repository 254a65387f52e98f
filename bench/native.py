"""`run.py native`: recir's native code against NumPy, PyTorch eager and C.

Everything runs in one process, on one thread, with identical weights, so the
ratios compare code generation and dispatch rather than machines or BLAS
threading. Sections: TreeLSTM inference (h=150/256, batch 1 and 25), fib(30)
against C, one matvec kernel against numpy.dot, compile times (cold/warm
object cache) and RSS flatness over many calls. A contestant that cannot run
(recir.compile missing, torch absent, wrong results) is skipped with a reason.
"""

from __future__ import annotations

import argparse
import ctypes
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.common import (
    Skipped,
    attempt,
    contest_times,
    fmt,
    machine_info,
    median,
    print_table,
    ratio,
    repeat_times,
    rss_kb,
    write_json,
)

BENCH_DIR = Path(__file__).resolve().parent
FIB_MLIR = BENCH_DIR.parent / "examples/ir/fib.mlir"
BATCHES = (1, 25)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: fewer trees, repeats and calls")
    parser.add_argument("--trees", type=int,
                        help="TreeLSTM trees (default 200, quick 50)")
    parser.add_argument("--repeats", type=int,
                        help="timed repeats (default 7, quick 3)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[150, 256],
                        help="TreeLSTM hidden sizes (embed = hidden)")


def first(out: Any) -> Any:
    """The first result of a call that may return a tuple or a bare value."""
    return out[0] if isinstance(out, (tuple, list)) else out


# --- TreeLSTM inference ---------------------------------------------------

def load_trees(n: int) -> tuple[list[Any], int, str]:
    """The first `n` SST dev trees, else synthetic SST-like ones; + vocab size."""
    from recir.data import make_treebank
    from recir.data.sst import load_sst, sst_path

    path = sst_path("dev")
    if path is not None:
        trees, vocab = load_sst(path)
        return trees[:n], len(vocab), f"SST dev ({path})"
    return make_treebank(n, seed=0, vocab_size=5000), 5000, "synthetic (moderate)"


def make_params(hidden: int, vocab: int) -> dict[str, np.ndarray]:
    """`init_params` with weight matrices rescaled to std 1/sqrt(fan_in) (Xavier).

    At init_params' std 0.5 a wide TreeLSTM is chaotic: float32 roundoff grows
    to ~5e-4 at h=256 and no float32 engine can match the float64 reference at
    rtol 1e-4. Trained weights look like these; the values do not change the work.
    """
    from recir.models import tree_lstm

    params = tree_lstm.init_params(np.random.default_rng(0), hidden=hidden,
                                   embed=hidden, vocab=vocab)
    return {k: (v / (0.5 * np.sqrt(v.shape[1])) if v.ndim == 2 and k != "emb" else v)
            .astype(np.float32) for k, v in params.items()}


def check_trees(fn: Any, trees: list[Any],
                expected: list[tuple[np.ndarray, float]]) -> float:
    """Max abs error of `fn(tree) -> (h, loss)` against the reference; raise if off."""
    worst = 0.0
    for k, (tree, (h_ref, loss_ref)) in enumerate(zip(trees, expected, strict=True)):
        out = fn(tree)
        h = np.asarray(first(out), dtype=np.float64)
        if h.shape != h_ref.shape:
            raise Skipped(f"wrong result shape {h.shape} on tree {k}, "
                          f"expected {h_ref.shape}")
        ok = np.allclose(h, h_ref, rtol=1e-4, atol=1e-6)
        if isinstance(out, (tuple, list)) and len(out) > 1:
            ok = ok and bool(np.isclose(float(out[-1]), loss_ref, rtol=1e-4))
        err = float(np.abs(h - h_ref).max())
        if not ok:
            raise Skipped(f"wrong result on tree {k}: max |dh| {err:.2e}")
        worst = max(worst, err)
    return worst


def tree_lstm_contestants(params: dict[str, np.ndarray]) -> dict[str, Any]:
    """name -> thunk building `f(tree) -> (h, loss)`; a thunk may raise to skip."""
    from recir.models import tree_lstm

    def recir_native() -> Any:
        import recir

        fn = recir.compile(tree_lstm.trace_model(params), threads=1)
        return lambda t: fn(t.left, t.right, t.word, t.label, t.root)

    def torch_eager() -> Any:
        import torch

        from bench.torch_models import TreeLSTM

        torch.set_num_threads(1)
        model = TreeLSTM(params)
        return lambda t: model(t, t.root)

    return {
        "recir": recir_native,
        "numpy": lambda: (lambda t: tree_lstm.reference(t, t.root, params)),
        "torch": torch_eager,
    }


def bench_tree_lstm(trees: list[Any], vocab: int, sizes: list[int],
                    repeats: int) -> list[dict[str, Any]]:
    """trees/s and nodes/s per (h, batch, contestant); a pass is all `trees`."""
    from recir.models import tree_lstm

    rows = []
    for h in sizes:
        params = make_params(h, vocab)
        expected = [tree_lstm.reference(t, t.root, params) for t in trees]
        fns, status = {}, {}
        for name, build in tree_lstm_contestants(params).items():
            print(f"  TreeLSTM h={h}: {name}", flush=True)
            fn, why = attempt(f"{name} h={h}", build)
            err = None
            if fn is not None:
                err, why = attempt(f"{name} h={h} check",
                                   lambda fn=fn: check_trees(fn, trees, expected))
            status[name] = (why, err)
            if why is None:
                fns[name] = fn
        for batch in BATCHES:
            timed = time_trees(fns, trees, batch, repeats)
            for name, (why, err) in status.items():
                rows.append({"h": h, "batch": batch, "contestant": name, "skipped": why,
                             "max_abs_err": err, **timed.get(name, {})})
    add_ratios(rows)
    return rows


def time_trees(fns: dict[str, Any], trees: list[Any], batch: int,
               repeats: int) -> dict[str, dict[str, Any]]:
    """Batch b = steps of b trees; every contestant loops over a step's trees."""
    use = trees[: max(batch, len(trees) // batch * batch)]
    steps = [use[k:k + batch] for k in range(0, len(use), batch)]

    def one_pass(fn: Any) -> None:
        for step in steps:
            for t in step:
                fn(t)

    times = contest_times({n: lambda fn=fn: one_pass(fn) for n, fn in fns.items()},
                              repeats)
    nodes = sum(tr.num_nodes for tr in use)
    out = {}
    for name, ts in times.items():
        t = median(ts)
        out[name] = {"trees": len(use), "nodes": nodes, "times_s": ts, "median_s": t,
                     "trees_per_s": len(use) / t, "nodes_per_s": nodes / t,
                     "ms_per_step": 1e3 * t / len(steps)}
    return out


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """this / numpy and this / torch throughput (recir's rows are the point)."""
    speed = {(r["h"], r["batch"], r["contestant"]): r.get("trees_per_s") for r in rows}
    for r in rows:
        for other in ("numpy", "torch"):
            r[f"vs_{other}"] = ratio(r.get("trees_per_s"),
                                     speed.get((r["h"], r["batch"], other)))


# --- fib(30) against C ------------------------------------------------------

def build_c_fib(tmp: str) -> Any:
    """Compile bench/fib.c with the system cc into `tmp`; the ctypes function."""
    fib = common.c_library(BENCH_DIR / "fib.c", tmp).fib
    fib.argtypes, fib.restype = [ctypes.c_int], ctypes.c_int
    return fib


def build_recir_fib() -> Any:
    import recir
    from recir.context import make_context
    from recir.parsing import parse_module

    module = parse_module(make_context(), FIB_MLIR.read_text(), str(FIB_MLIR))
    fn = recir.compile(module, entry="fib", threads=1)
    return lambda n: int(np.asarray(first(fn(n))))


def bench_fib(n: int, repeats: int) -> dict[str, Any]:
    """fib(n) in recir against the same recursion compiled by cc -O2."""
    result: dict[str, Any] = {"n": n}
    with tempfile.TemporaryDirectory(prefix="recir-bench-fib-") as tmp:
        fns: dict[str, Any] = {}
        builders = (("c", lambda: build_c_fib(tmp)), ("recir", build_recir_fib))
        for name, build in builders:
            print(f"  fib({n}): {name}", flush=True)
            fn, why = attempt(f"fib {name}", build)
            if fn is not None and "c" in fns and fn(n) != fns["c"](n):
                fn, why = None, f"wrong result {fn(n)}, C says {fns['c'](n)}"
                print(f"  [skip] fib {name}: {why}")
            result[name] = {"skipped": why}
            if fn is not None:
                fns[name] = fn
                result[name]["value"] = fn(n)
        times = contest_times({k: lambda f=f: f(n) for k, f in fns.items()},
                                  repeats)
    for name, ts in times.items():
        result[name].update(times_s=ts, median_ms=1e3 * median(ts))
    result["recir_over_c_time"] = ratio(result["recir"].get("median_ms"),
                                        result["c"].get("median_ms"))
    return result


# --- one matvec kernel ------------------------------------------------------

def build_recir_matvec_chain(w: np.ndarray, steps: int) -> Any:
    """`steps` (a power of two) dependent matvecs, x <- tanh(W x)[:cols], in
    one native call. step(k, x) = step(k-1, step(k-1, x)): the recursion is
    only log2(steps) deep, so the stack stays in cache as a loop's would."""
    import recir
    from recir import frontend as rf

    rows, cols = w.shape
    with recir.trace("matvec_chain") as m:
        x0 = m.input("x", recir.vector(cols))
        wp = m.param("w", w)
        with recir.SubGraph("step", [recir.i32, recir.vector(cols)],
                            [recir.vector(cols)]) as step:
            k, x = step.inputs
            step.output(recir.cond(
                k <= 0, lambda: rf.slice(rf.tanh(rf.matvec(wp, x)), 0, cols),
                lambda: step(k - 1, step(k - 1, x))))
        m.output(step(steps.bit_length() - 1, x0))
    return recir.compile(m.traced, threads=1)


def numpy_matvec_chain(w: np.ndarray, steps: int) -> Any:
    cols = w.shape[1]

    def chain(x: np.ndarray) -> np.ndarray:
        for _ in range(steps):
            x = np.tanh(np.dot(w, x))[:cols]
        return x

    return chain


def bench_matvec(sizes: list[int], calls: int, repeats: int) -> list[dict[str, Any]]:
    """GFLOP/s of the TreeLSTM node's (5h x 2h) @ 2h matvec: `calls` dependent
    products in one call for recir (the kernel, not the call overhead), a
    Python loop of `numpy.dot` for NumPy; both add a tanh of 5h elements."""
    rows = []
    for h in sizes:
        rng = np.random.default_rng(1)
        w = (rng.standard_normal((5 * h, 2 * h)) / np.sqrt(2 * h)).astype(np.float32)
        x = rng.standard_normal(2 * h).astype(np.float32)
        row: dict[str, Any] = {"h": h, "shape": [5 * h, 2 * h], "calls": calls}
        fns = {}
        for name, build in (("numpy", numpy_matvec_chain),
                            ("recir", build_recir_matvec_chain)):
            print(f"  matvec h={h}: {name}", flush=True)
            check, why = attempt(f"matvec {name} h={h}", lambda b=build: b(w, 4))
            if check is not None and not np.allclose(
                    np.asarray(first(check(x))), numpy_matvec_chain(w, 4)(x),
                    rtol=1e-4, atol=1e-5):
                check, why = None, "wrong result"
                print(f"  [skip] matvec {name} h={h}: {why}")
            row[name] = {"skipped": why}
            if check is not None:
                fns[name] = build(w, calls)

        times = contest_times({k: lambda f=f: f(x) for k, f in fns.items()}, repeats)
        for name, ts in times.items():
            row[name].update(times_s=ts, gflops=2.0 * w.size * calls / median(ts) / 1e9)
        row["recir_over_numpy"] = ratio(row["recir"].get("gflops"),
                                        row["numpy"].get("gflops"))
        rows.append(row)
    return rows


# --- compile time and memory ------------------------------------------------

def bench_compile(hidden: int, vocab: int, warm_repeats: int) -> dict[str, Any]:
    """Cold compile into a fresh cache dir, then warm (object-cache hit) runs."""
    import recir
    from recir.models import tree_lstm

    model = tree_lstm.trace_model(make_params(hidden, vocab))
    with tempfile.TemporaryDirectory(prefix="recir-bench-cache-") as cache:
        start = time.perf_counter()
        recir.compile(model, cache_dir=cache, threads=1).wait()  # until its code is loaded
        cold = time.perf_counter() - start
        warm = repeat_times(lambda: recir.compile(model, cache_dir=cache, threads=1).wait(),
                            warm_repeats, warmup=0)
    return {"h": hidden, "cold_ms": 1e3 * cold, "warm_ms": [1e3 * t for t in warm],
            "warm_median_ms": 1e3 * median(warm)}


def bench_rss(tree: Any, vocab: int, hidden: int, calls: int) -> dict[str, Any]:
    """VmRSS before/after `calls` calls on one tree: leaks show as growth."""
    import recir
    from recir.models import tree_lstm

    fn = recir.compile(tree_lstm.trace_model(make_params(hidden, vocab)), threads=1)
    args = (tree.left, tree.right, tree.word, tree.label, tree.root)
    for _ in range(100):  # let allocators and caches settle first
        fn(*args)
    before = rss_kb()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    seconds = time.perf_counter() - start
    after = rss_kb()
    return {"h": hidden, "calls": calls, "tree_nodes": tree.num_nodes,
            "rss_before_kb": before, "rss_after_kb": after, "growth_kb": after - before,
            "seconds": seconds}


# --- driver -------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    quick = args.quick
    if quick:
        common.WARMUP_S = 0.3
    repeats = args.repeats or (3 if quick else 7)
    trees, vocab, source = load_trees(args.trees or (50 if quick else 200))
    report: dict[str, Any] = {
        "benchmark": "native", "quick": quick, "machine": machine_info(),
        "config": {"trees": len(trees), "tree_source": source, "vocab": vocab,
                   "repeats": repeats, "sizes": args.sizes, "threads": 1,
                   "weights": "init_params(seed 0), matrices at std 1/sqrt(fan_in)"},
    }
    print(f"{len(trees)} trees from {source}, {repeats} repeats, "
          f"cpu {report['machine']['cpu']}", flush=True)
    # Compile times first, so that "cold" is this process's first compile.
    print("compile times", flush=True)
    report["compile"], report["compile_skipped"] = attempt(
        "compile", lambda: bench_compile(150, vocab, 3))
    print("TreeLSTM inference", flush=True)
    report["tree_lstm"] = bench_tree_lstm(trees, vocab, args.sizes, repeats)
    print("fib", flush=True)
    report["fib"] = bench_fib(30, repeats)
    print("matvec", flush=True)
    report["matvec"] = bench_matvec(args.sizes, 256 if quick else 1024, repeats)
    print("RSS", flush=True)
    mid = sorted(trees, key=lambda t: t.num_nodes)[len(trees) // 2]
    report["rss"], report["rss_skipped"] = attempt(
        "rss", lambda: bench_rss(mid, vocab, 150, 1000 if quick else 10_000))
    print_report(report)
    if args.json:
        write_json(args.json, report)
        print(f"\nwrote {args.json}")
    return 0


def print_report(r: dict[str, Any]) -> None:
    rows = [[f"h={x['h']} b={x['batch']} {x['contestant']}",
             *([fmt(x["trees_per_s"]), fmt(x["nodes_per_s"]), fmt(x["ms_per_step"], 2),
                fmt(x["vs_numpy"], 2), fmt(x["vs_torch"], 2)]
               if x["skipped"] is None else ["skipped", "", "", "", ""])]
            for x in r["tree_lstm"]]
    print_table("TreeLSTM inference, 1 thread (vs X = this throughput / X's)",
                ["contestant", "trees/s", "nodes/s", "ms/step", "vs numpy", "vs torch"],
                rows)
    fib = r["fib"]
    fib_rows = [[k, fmt(fib[k].get("median_ms"), 2),
                 str(fib[k].get("value", "skipped"))] for k in ("c", "recir")]
    fib_rows.append(["recir/C", fmt(fib["recir_over_c_time"], 2), ""])
    print_table(f"fib({fib['n']}), median ms (recir/C is a time ratio)",
                ["", "ms", "value"], fib_rows)
    print_table("matvec GFLOP/s (a chain of dependent matvecs; recir: one call)",
                ["shape", "numpy", "recir", "recir/numpy"],
                [[f"{m['shape'][0]}x{m['shape'][1]}", fmt(m["numpy"].get("gflops"), 2),
                  fmt(m["recir"].get("gflops"), 2), fmt(m["recir_over_numpy"], 2)]
                 for m in r["matvec"]])
    c, s = r["compile"], r["rss"]
    print_table("compile (TreeLSTM h=150) and memory", ["what", "value"], [
        ["cold compile ms", fmt(c["cold_ms"]) if c else "skipped"],
        ["warm compile ms (median of 3)",
         fmt(c["warm_median_ms"], 2) if c else "skipped"],
        [f"VmRSS KiB over {s['calls'] if s else '-'} calls",
         f"{s['rss_before_kb']} -> {s['rss_after_kb']} ({s['growth_kb']:+d})" if s
         else "skipped"],
    ])
    skips = [(f"TreeLSTM h={x['h']} {x['contestant']}", x["skipped"])
             for x in r["tree_lstm"] if x["skipped"] and x["batch"] == 1]
    skips += [(f"fib {k}", r["fib"][k]["skipped"]) for k in ("c", "recir")]
    skips += [(f"matvec h={m['h']} {k}", m[k]["skipped"]) for m in r["matvec"]
              for k in ("numpy", "recir")]
    skips += [("compile", r["compile_skipped"]), ("rss", r["rss_skipped"])]
    for what, why in skips:
        if why:
            print(f"skipped {what}: {why}")
