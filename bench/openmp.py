"""`run.py openmp`: recir's task parallelism on each OpenMP runtime that loads.

Generated code calls the GOMP ABI (`recir/backend/engine.py`), which three
runtimes speak: GCC's libgomp, LLVM's libomp (Debian `libomp5-14`) and
Intel's libiomp5 (the `intel-openmp` wheel puts it in `<prefix>/lib`). A
process holds one, chosen by `$RECIR_OPENMP`, so each runtime runs in its
own child process: fib(35) (`examples/ir/fib.mlir`, every call a task) and
TreeLSTM inference within one tree (complete binary trees, one tree a call:
the children of each node spawned as tasks) and a recursive batch (SST
trees, batch 25, h=150, inference and training: each tree a task of one
team, `NativeFunction.batch`), on each thread count, timed in rounds
(`rounds_times`) so a slow spell of a shared host weighs on every thread
count alike. Figures: median ms and the speedup over one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import fmt, machine_info, median, print_table, rounds_times, write_json

ROOT = Path(__file__).resolve().parent.parent
# warm-up calls: caches and a team's contexts warm (`bench/parallel.py`)
TUNER_CALLS = 32


def default_runtimes() -> list[str]:
    """libgomp, libomp and, where the intel-openmp wheel is installed, its libiomp5."""
    names = ["libgomp.so.1", "libomp.so.5"]
    wheel = Path(sys.prefix) / "lib" / "libiomp5.so"
    return names + [str(wheel) if wheel.exists() else "libiomp5.so"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--threads", type=int, nargs="+",
                        default=sorted({1, 2, os.cpu_count() or 1}))
    parser.add_argument("--runtimes", nargs="+", default=default_runtimes(),
                        help="names or paths of OpenMP runtimes with the GOMP ABI")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--leaves", type=int, default=128)
    parser.add_argument("--trees", type=int, default=4, help="trees a round (one a call)")
    parser.add_argument("--fib", type=int, default=35)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-tree", action="store_true", help="no one-tree case")
    parser.add_argument("--skip-batch", action="store_true", help="no recursive batch case")
    parser.add_argument("--batches", type=int, default=8,
                        help="SST batches of 25 a round, the recursive batch case")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds a runtime's child process may take")


def fib_times(threads: list[int], n: int, repeats: int, copies: int = 0
              ) -> dict[str, list[float]]:
    """fib(n) on each thread count, in rounds; with `copies`, in the same
    rounds `copies` one-thread fib(n - 1) calls one after another ("alone")
    and at once on as many Python threads ("together"): alone / together is
    what this host gives that many threads with nothing to share."""
    import threading

    import recir
    from recir.context import make_context
    from recir.parsing import parse_module

    path = ROOT / "examples/ir/fib.mlir"
    module = parse_module(make_context(), path.read_text(), str(path))
    fns = {t: recir.compile(module, entry="fib", threads=t) for t in {*threads, 1}}
    contestants = {str(t): lambda f=fns[t]: f(n) for t in threads}
    serial = fns[1]

    def together() -> None:
        others = [threading.Thread(target=serial, args=(n - 1,)) for _ in range(copies - 1)]
        for other in others:
            other.start()
        serial(n - 1)
        for other in others:
            other.join()

    if copies > 1:
        contestants["alone"] = lambda: [serial(n - 1) for _ in range(copies)]
        contestants["together"] = together
    return rounds_times(contestants, repeats, warmup_calls=TUNER_CALLS)


def tree_times(threads: list[int], hidden: int, leaves: int, count: int,
               repeats: int) -> dict[str, list[float]]:
    import recir
    from recir.data import make_treebank
    from recir.models import tree_lstm

    from bench.native import make_params

    params = make_params(hidden, 1000)
    trees = make_treebank(count, "balanced", num_leaves=leaves, vocab_size=1000, seed=1)
    items = [(t.left, t.right, t.word, t.label, t.root) for t in trees]
    model = tree_lstm.trace_model(params)
    fns = {t: recir.compile(model, threads=t) for t in threads}
    expected = [np.asarray(fns[threads[0]](*x)[1]) for x in items]
    for t, f in fns.items():  # every thread count computes the same
        for x, want in zip(items, expected, strict=True):
            np.testing.assert_allclose(np.asarray(f(*x)[1]), want, rtol=1e-4, atol=1e-6)

    def run(f: Any) -> None:
        for x in items:
            f(*x)

    return rounds_times({str(t): lambda f=f: run(f) for t, f in fns.items()}, repeats,
                        warmup_calls=TUNER_CALLS // max(1, count))


def batch_times(threads: list[int], mode: str, batches: int, repeats: int
                ) -> dict[str, list[float]]:
    """A pass over `batches` SST batches of 25 (TreeLSTM h=150, the recursive
    code, `mode`) on each thread count, in rounds, each turn after one
    untimed batch (`target_scaling.settled_rounds`)."""
    from bench import batching
    from bench.target_scaling import settled_rounds

    trees, vocab, _ = batching.workload("sst", 25 * batches)
    params = batching.make_params(150, vocab)
    runs = {str(t): batching.recir_recursive(params, mode, t) for t in threads}
    return settled_rounds(runs, trees[:25 * batches], 25, repeats)


def measure(args: dict[str, Any]) -> dict[str, Any]:
    """In the child: which runtime loaded, and the times on it."""
    from recir.backend.engine import openmp

    library = openmp()
    if library is None:
        raise SystemExit(f"error: OpenMP runtime {os.environ.get('RECIR_OPENMP')} did not load")
    out: dict[str, Any] = {"loaded": library._name}
    fib = fib_times(args["threads"], args["fib"], args["repeats"])
    out["fib_ms"] = {t: 1e3 * median(v) for t, v in fib.items()}
    if not args["skip_tree"]:
        tree = tree_times(args["threads"], args["hidden"], args["leaves"], args["trees"],
                          args["repeats"])
        out["tree_ms"] = {t: 1e3 * median(v) / args["trees"] for t, v in tree.items()}
    if not args["skip_batch"]:
        for mode in ("infer", "train"):
            times = batch_times(args["threads"], mode, args["batches"], args["repeats"])
            out[f"batch_{mode}_ms"] = {t: 1e3 * median(v) / args["batches"]
                                       for t, v in times.items()}
    return out


def in_child(runtime: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); "
            f"from bench.openmp import measure; print(json.dumps(measure({args!r})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "RECIR_OPENMP": runtime}, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"over {timeout:.0f} s"}
    if done.returncode != 0:
        return {"skipped": done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def speedups(ms: dict[str, float]) -> dict[str, float]:
    return {t: ms["1"] / v for t, v in ms.items()} if "1" in ms else {}


def run(args: argparse.Namespace) -> int:
    settings = {k: getattr(args, k) for k in ("threads", "fib", "hidden", "leaves", "trees",
                                              "repeats", "skip_tree", "skip_batch", "batches")}
    report: dict[str, Any] = {"machine": machine_info(), "config": settings, "runtimes": {}}
    print(f"CPU: {report['machine']['cpu']} ({report['machine']['nproc']} cores); "
          f"threads {args.threads}", flush=True)
    for runtime in args.runtimes:
        print(f"  {runtime} ...", flush=True)
        report["runtimes"][runtime] = result = in_child(runtime, settings, args.timeout)
        if "skipped" in result:
            print(f"  {runtime}: skipped ({result['skipped']})", flush=True)
        if args.json:
            write_json(args.json, report)
    rows = []
    for runtime, result in report["runtimes"].items():
        for what, key in ((f"fib({args.fib})", "fib_ms"),
                          (f"TreeLSTM h={args.hidden} {args.leaves}-leaf, one tree", "tree_ms"),
                          ("TreeLSTM h=150 SST, a batch of 25, inference", "batch_infer_ms"),
                          ("same, training", "batch_train_ms")):
            if key not in result:
                continue
            ms, up = result[key], speedups(result[key])
            rows.append([Path(runtime).name, what,
                         *[f"{fmt(ms.get(str(t)))} ({fmt(up.get(str(t)), 2)}x)"
                           for t in args.threads]])
    print_table(f"ms per call (speedup over 1 thread) on {report['machine']['cpu']}",
                ["runtime", "case", *[f"{t} thr" for t in args.threads]], rows)
    if args.json:
        write_json(args.json, report)
    return 0
