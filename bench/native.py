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
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.native_kernels import bench_fib, bench_matvec, first
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
