"""`run.py parallel`: speedup of 2 threads over 1 (OpenMP tasks for independent invokes).

TreeRNN and TreeLSTM inference (h=150) on balanced, moderate and linear trees
of 64 leaves and on trees of SST's sentence lengths (moderate shape, 2-52
leaves, mean 19: many below the work cutoff that runs a call on one
thread), one tree per call (the children of its nodes spawned as tasks) and
25 trees per call (`NativeFunction.batch`: each tree a task of one team, its
subtrees tasks too); fib(35), on the default OpenMP runtime (LLVM's libomp
where installed, else libgomp) and on the other one (`$RECIR_OPENMP`, in a
second process; libomp's taskwait runs any queued task, libgomp's only the
waiting task's children); beside it, the host's own ceiling for two threads (two
independent calls side by side, no tasks). For each tree shape, the
work/span ratio read off the call tree (work = nodes, span = nodes on the
longest root-to-leaf path) and the speedup it predicts on 2 and on 36 cores
(the paper's machine) by Brent's bound W / (W/P + S). Training (forward +
backward, gradients summed over the batch): at batch 1 within the tree (the
children's forward and backward calls as tasks, dense gradients in
per-thread copies), at batch 10 and 25 across the trees of the batch too
(`GradFunction.batch`: each tree a task). One thread and two are timed in
alternating rounds (`rounds_times`), so a slow spell of this shared host
weighs on both sides of a ratio.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import fmt, machine_info, median, print_table, rounds_times, write_json

SHAPES = ("balanced", "moderate", "linear", "sst-like")
# warm-up calls: caches and a team's contexts warm
TUNER_CALLS = 32
MODELS = ("tree_rnn", "tree_lstm", "fib")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--quick", action="store_true", help="fewer trees and repeats")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS),
                        help="which rows to run (default: all)")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES),
                        help="the tree shapes of the TreeRNN and TreeLSTM rows (default: all)")


def work_span(tree: Any) -> tuple[int, int]:
    depth = np.zeros(tree.num_nodes, np.int64)
    for i in range(tree.num_nodes):  # children come before parents
        if tree.left[i] >= 0:
            depth[i] = 1 + max(depth[tree.left[i]], depth[tree.right[i]])
        else:
            depth[i] = 1
    return tree.num_nodes, int(depth[tree.root])


def predicted(work: float, span: float, cores: int) -> float:
    return work / (work / cores + span)


def chosen_budget(function: Any, items: list, batch: int) -> int:
    """The spawn budget `backend/policy.py` gives the 2-thread function's
    first call or batch of a row (0: one thread, or a batch's calls spawning
    nothing)."""
    from recir.backend import policy

    if function.fixed_budget is not None:
        return function.fixed_budget
    sizes = function.sizes(items[:batch])
    works = None if sizes is None else [n * function.call_work for n in sizes]
    if batch > 1:
        return policy.batch_budget(works, len(sizes or items[:batch]),
                                   function.threads_for(sizes), function.costs)
    work = None if works is None else works[0]
    return policy.call_budget(work, function.threads, function.costs) if policy.team_pays(
        work, function.threads, function.costs) else 0


def tree_rows(trees_per_shape: int, repeats: int, models: Any = MODELS,
              shapes: Any = SHAPES) -> list[dict[str, Any]]:
    import recir
    from recir.data import make_tree, make_treebank
    from recir.models import tree_lstm, tree_rnn

    rows = []
    for name, module in (("tree_rnn", tree_rnn), ("tree_lstm", tree_lstm)):
        if name not in models:
            continue
        rng = np.random.default_rng(0)
        params = module.init_params(rng, hidden=150, vocab=1000)
        params = {k: (rng.standard_normal(v.shape) / np.sqrt(v.shape[-1])).astype(np.float32)
                  for k, v in params.items()}
        model = module.trace_model(params)
        fns = {t: recir.compile(model, threads=t) for t in (1, 2)}
        for shape in shapes:
            trees = make_treebank(trees_per_shape, seed=0, vocab_size=1000) \
                if shape == "sst-like" else [make_tree(shape, 64, np.random.default_rng(s), 1000)
                                            for s in range(trees_per_shape)]
            work, span = (float(np.mean(v)) for v in zip(*map(work_span, trees)))
            for batch in (1, 25):
                print(f"  {name} {shape} b={batch}", flush=True)

                items = [(t.left, t.right, t.word, t.label, t.root) for t in trees]

                def run(f: Any, items: list = items, batch: int = batch) -> None:
                    for start in range(0, len(items), batch):
                        if batch == 1:
                            f(*items[start])
                        else:  # the trees of a batch as tasks of one team
                            f.batch(items[start:start + batch])

                times = rounds_times({f"{t}": lambda f=f: run(f) for t, f in fns.items()},
                                      repeats)
                rows.append({"model": name, "task": "infer", "shape": shape, "batch": batch,
                             "work": work, "span": span,
                             "ms_1": 1e3 * median(times["1"]), "ms_2": 1e3 * median(times["2"]),
                             "speedup": median(times["1"]) / median(times["2"]),
                             "budget": chosen_budget(fns[2], items, batch),
                             "predicted_2": predicted(work, span, 2),
                             "predicted_36": predicted(work, span, 36)})
            rows += train_rows(name, model, shape, trees, work, span, repeats)
    return rows


def train_rows(name: str, model: Any, shape: str, trees: list[Any], work: float,
               span: float, repeats: int) -> list[dict[str, Any]]:
    import recir

    vgs = {t: recir.value_and_grad(model, threads=t) for t in (1, 2)}
    grads = {k: np.zeros_like(v) for k, v in model.params.items()}
    rows = []
    for batch in (1, 10, 25):
        print(f"  {name} {shape} train b={batch}", flush=True)
        batches = [[(t.left, t.right, t.word, t.label, t.root) for t in trees[i:i + batch]]
                   for i in range(0, len(trees), batch)]

        def run(threads: int, batches: list = batches) -> None:
            for b in batches:  # batch 1: one tree on `threads` threads
                vgs[threads].batch(b, grads, threads)

        times = rounds_times({f"{t}": lambda t=t: run(t) for t in (1, 2)}, repeats)
        rows.append({"model": name, "task": "train", "shape": shape, "batch": batch,
                     "work": work, "span": span,
                     "ms_1": 1e3 * median(times["1"]), "ms_2": 1e3 * median(times["2"]),
                     "speedup": median(times["1"]) / median(times["2"]),
                     "budget": chosen_budget(vgs[2].native, batches[0], len(batches[0])),
                     "predicted_2": predicted(work, span, 2) if batch == 1 else 2.0,
                     "predicted_36": predicted(work, span, 36) if batch == 1 else
                     min(36.0, float(batch))})
    return rows


def fib_row(repeats: int) -> dict[str, Any]:
    """fib(35) on 1 and 2 threads; and, in the same rounds, two independent
    fib(34) calls on two Python threads against one after the other: what
    this host gives two threads with nothing to share (`ceiling`)."""
    import threading
    from pathlib import Path

    import recir
    from recir.context import make_context
    from recir.parsing import parse_module

    path = Path(__file__).resolve().parent.parent / "examples/ir/fib.mlir"
    module = parse_module(make_context(), path.read_text(), str(path))
    fns = {t: recir.compile(module, entry="fib", threads=t) for t in (1, 2)}
    serial = fns[1]

    def side_by_side() -> None:  # no tasks, no sharing: the machine's own ceiling
        other = threading.Thread(target=serial, args=(34,))
        other.start()
        serial(34)
        other.join()

    times = rounds_times({"1": lambda: fns[1](35), "2": lambda: fns[2](35),
                          "pair 1": lambda: (serial(34), serial(34)),
                          "pair 2": side_by_side}, repeats, warmup_calls=TUNER_CALLS)
    return {"ms_1": 1e3 * median(times["1"]), "ms_2": 1e3 * median(times["2"]),
            "speedup": median(times["1"]) / median(times["2"]),
            "ceiling": median(times["pair 1"]) / median(times["pair 2"])}


def runtimes() -> tuple[str, str]:
    """The OpenMP runtime recir loaded by default, and the other one (LLVM's
    libomp.so.5, Debian's libomp5 package, or libgomp.so.1)."""
    from recir.backend.engine import openmp

    library = openmp()
    default = getattr(library, "_name", "none")
    return default, "libgomp.so.1" if "libgomp" not in default else "libomp.so.5"


def fib_row_with(runtime: str, repeats: int) -> dict[str, Any] | None:
    """fib_row in a fresh process whose tasks run on another OpenMP runtime
    (`$RECIR_OPENMP`; one per process); None where it is not installed."""
    import ctypes
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    try:
        ctypes.CDLL(runtime)
    except OSError:
        return None
    root = Path(__file__).resolve().parent.parent
    code = (f"import json, sys; sys.path.insert(0, {str(root)!r}); "
            f"from bench.parallel import fib_row; print(json.dumps(fib_row({repeats})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "RECIR_OPENMP": runtime}, timeout=600)
    if done.returncode != 0:
        print(f"  fib(35) on {runtime} failed: {done.stderr.strip()[-300:]}", flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> int:
    import bench.common as common

    if args.quick:
        common.WARMUP_S = 0.2
    # rounds of a row are short (5-150 ms): 21 spread a row over ~0.2-6 s, so
    # that a slow spell of the shared host falls on a minority of them
    repeats = 3 if args.quick else 21
    trees = 25 if args.quick else 50
    print(f"{trees} trees of 64 leaves per shape, {repeats} repeats", flush=True)
    default, other = runtimes()
    report: dict[str, Any] = {"machine": machine_info(), "runtime": default,
                              "trees": tree_rows(trees, repeats, args.models, args.shapes)}
    if "fib" in args.models:
        report["fib35"] = fib_row(repeats)
        report["fib35_other_runtime"] = {"runtime": other,
                                         **(fib_row_with(other, repeats) or {})}
    print_table("2 threads over 1 (budget: the policy's for the row's first call; "
                "work/span from the call tree; training at batch "
                "b > 1 runs b trees side by side)",
                ["case", "1 thread ms", "2 threads ms", "speedup", "budget", "work/span",
                 "Brent 2", "Brent 36"],
                [[f"{r['task']} {r['model']} {r['shape']} b={r['batch']}", fmt(r["ms_1"]),
                  fmt(r["ms_2"]), fmt(r["speedup"], 2), str(r["budget"]),
                  fmt(r["work"] / r["span"], 1),
                  fmt(r["predicted_2"], 2), fmt(r["predicted_36"], 1)]
                 for r in report["trees"]])
    fibs = [(f"{default} (default)", report["fib35"])] if "fib35" in report else []
    if "speedup" in report.get("fib35_other_runtime", {}):
        fibs.append((f"{other} ($RECIR_OPENMP)", report["fib35_other_runtime"]))
    if fibs:
        print_table("fib(35); ceiling: two independent fib(34) on two threads over one "
                    "after the other, in the same rounds",
                    ["runtime", "1 thread ms", "2 threads ms", "speedup", "ceiling"],
                    [[name, fmt(fib["ms_1"]), fmt(fib["ms_2"]), fmt(fib["speedup"], 2),
                      fmt(fib["ceiling"], 2)] for name, fib in fibs])
    if args.json:
        write_json(args.json, report)
        print(f"\nwrote {args.json}")
    return 0
