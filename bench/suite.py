"""`run.py all`: the seed paper's evaluation in one run, with tables and plots.

Sections (each can fail or be skipped alone; the reason is recorded):

- `throughput`: TreeRNN, RNTN, TreeLSTM inference and training at batch 1,
  10 and 25, one thread: recir recursive (native), recir batched (frontier
  batching, `batching="frontier"`), iterative (a topologically sorted loop, PyTorch
  eager, `bench/iterative_models.py`), static unrolling (PyTorch eager, one
  graph per tree, `bench/torch_models.py`) and PyTorch level-batched
  (`bench/torch_level_batched.py`). The paper's Tables 2-3 / Figures 7-8.
- `shapes`: balanced, moderate and linear trees on 1 and 2 threads with the
  work/span prediction for 2 and 36 cores (`bench/parallel.py`, called as
  is); TreeRNN training by shape is the paper's Table 1.
- `length`: time per tree against sentence length, SST dev trees bucketed by
  leaves (the paper's Figure 11), TreeLSTM inference and training.
- `td_tree_lstm`: the top-down TreeLSTM, recursive (recir) against an
  iterative work queue, b = 1 and 64.
- `thesis`: the static-recursion thesis programs: recir's native invoke
  path at the thesis's sizes, and `bench/static.py`'s static Call/Return
  against dynamic call expansion on one token engine (smaller sizes).

Every figure is the median of repeated runs; a contestant whose repeats
spread more than 3x (max/min) is timed again (`common.contest_times`), and
the redo is recorded. Writes `suite.json`, `suite.md` and PNG plots into
`--out` (default `bench/results/`); `bench/suite_report.py` renders them.
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import common, native, parallel, suite_programs, train
from bench.common import Skipped, attempt, contest_times, machine_info, median

BENCH_DIR = Path(__file__).resolve().parent
MODELS = ("tree_rnn", "rntn", "tree_lstm")
BATCHES = (1, 10, 25)
SECTIONS = ("throughput", "shapes", "length", "td_tree_lstm", "thesis")
LR = train.LR

# How big each section is: (quick, full).
SIZES = {
    "throughput_trees": (25, 100), "repeats": (2, 5), "warmup_s": (0.2, 1.0),
    "shape_trees": (25, 50), "shape_repeats": (3, 7),
    "length_width": (10, 5), "length_trees": (4, 12), "length_max": (50, 50),
    "td_inputs": (64, 64),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="short run (a few minutes): fewer trees and repeats")
    parser.add_argument("--out", default=str(BENCH_DIR / "results"), metavar="DIR",
                        help="where suite.json, suite.md and the PNGs go")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS,
                        default=list(SECTIONS))
    parser.add_argument("--repeats", type=int,
                        help="timed repeats (default 5, quick 2)")


def size(args: argparse.Namespace, key: str) -> Any:
    return SIZES[key][0 if args.quick else 1]


# --- contestants -------------------------------------------------------------

# An inference contestant is built by a thunk (which may raise to skip) into
# `f(trees) -> [(root h, loss) per tree]`; a training one into an object with
# `step(trees, lr)` and `gradients(tree) -> (loss, {name: grad})`.

def per_tree(fn: Callable[[Any], Any]) -> Callable[[list[Any]], list[Any]]:
    return lambda trees: [fn(t) for t in trees]


def recir_infer(name: str, params: dict[str, np.ndarray]) -> Any:
    import recir

    fn = recir.compile(importlib.import_module(f"recir.models.{name}")
                       .trace_model(params), threads=1)
    return per_tree(lambda t: fn(t.left, t.right, t.word, t.label, t.root))


def torch_infer(module: str) -> Callable[[str, dict[str, np.ndarray]], Any]:
    def build(name: str, params: dict[str, np.ndarray]) -> Any:
        import torch

        torch.set_num_threads(1)
        model = importlib.import_module(f"bench.{module}").MODELS[name](params)
        return per_tree(lambda t: model(t, t.root))

    return build


def level_batched_infer(name: str, params: dict[str, np.ndarray]) -> Any:
    import torch

    torch.set_num_threads(1)
    return level_batched_module().MODELS[name](params).infer


def level_batched_module() -> Any:
    """The batching helper's `bench/torch_batched.py` if present, else ours."""
    for module in ("bench.torch_batched", "bench.torch_level_batched"):
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        if hasattr(found, "MODELS"):
            return found
    raise Skipped("no PyTorch level-batched models (bench/torch_level_batched.py)")


def tree_inputs(t: Any) -> tuple[Any, ...]:
    return (t.left, t.right, t.word, t.label, t.root)


def recir_batched_infer(name: str, params: dict[str, np.ndarray]) -> Any:
    """recir's frontier-batched mode (`batching="frontier"`): one call per
    batch, the frontiers spanning all its trees."""
    import recir

    fn = recir.compile(importlib.import_module(f"recir.models.{name}").trace_model(params),
                       batching="frontier", threads=1)
    return lambda trees: fn.batch([tree_inputs(t) for t in trees])


class RecirBatchedTrainer:
    """The frontier's gradient function over a whole batch (one forward and
    one backward over its frontiers), then `train.sgd` as for the recursive path."""

    def __init__(self, name: str, params: dict[str, np.ndarray]):
        import recir

        module = importlib.import_module(f"recir.models.{name}")
        self.params: dict[str, np.ndarray] = {k: v.copy() for k, v in params.items()}
        self.fn = recir.value_and_grad(module.trace_model(self.params), batching="frontier",
                                       threads=1)
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}

    def step(self, batch: list[Any], lr: float) -> float:
        outputs, _ = self.fn.batch([tree_inputs(t) for t in batch], into=self.grads)
        words = np.unique(np.concatenate([t.word for t in batch]))
        train.sgd(self.params, self.grads, lr / len(batch), words[words >= 0])
        return sum(float(o[-1]) for o in outputs)

    def gradients(self, tree: Any) -> tuple[float, dict[str, np.ndarray]]:
        outputs, grads = self.fn(*tree_inputs(tree))
        return float(outputs[-1]), grads


def recir_batched_train(name: str, params: dict[str, np.ndarray]) -> Any:
    return RecirBatchedTrainer(name, params)


class TorchTrainer(train.TorchTrainer):
    """`train.TorchTrainer` over any model class with the TreeModel interface."""

    def __init__(self, model_cls: Any, params: dict[str, np.ndarray]):
        import torch

        torch.set_num_threads(1)
        self.model = model_cls(params, train=True)


def torch_train(module: str) -> Callable[[str, dict[str, np.ndarray]], Any]:
    def build(name: str, params: dict[str, np.ndarray]) -> Any:
        return TorchTrainer(importlib.import_module(f"bench.{module}").MODELS[name],
                            params)

    return build


def level_batched_train(name: str, params: dict[str, np.ndarray]) -> Any:
    return TorchTrainer(level_batched_module().MODELS[name], params)


INFER = {
    "recir recursive": recir_infer,
    "recir batched": recir_batched_infer,
    "iterative (torch)": torch_infer("iterative_models"),
    "static unrolling (torch)": torch_infer("torch_models"),
    "torch level-batched": level_batched_infer,
}
TRAIN = {
    "recir recursive": lambda name, params: train.RecirTrainer(name, params),
    "recir batched": recir_batched_train,
    "iterative (torch)": torch_train("iterative_models"),
    "static unrolling (torch)": torch_train("torch_models"),
    "torch level-batched": level_batched_train,
}
GRADIENT_ORACLE = "static unrolling (torch)"


def build_infer(name: str, params: dict[str, np.ndarray], trees: list[Any],
                which: tuple[str, ...] | None = None
                ) -> tuple[dict[str, Any], dict[str, str | None]]:
    """Contestants that build and match the float64 reference on `trees`."""
    module = importlib.import_module(f"recir.models.{name}")
    expected = [module.reference(t, t.root, params) for t in trees]
    fns, status = {}, {}
    for who, build in INFER.items():
        if which is not None and who not in which:
            continue
        fn, why = attempt(f"{name} infer {who}", lambda b=build: b(name, params))
        if fn is not None:
            _, why = attempt(f"{name} infer {who} check",
                             lambda fn=fn: native.check_trees(
                                 lambda t: fn([t])[0], trees, expected))
        status[who] = why
        if why is None:
            fns[who] = fn
    return fns, status


def build_train(name: str, params: dict[str, np.ndarray], tree: Any,
                which: tuple[str, ...] | None = None
                ) -> tuple[dict[str, Any], dict[str, str | None]]:
    """Trainers whose loss and gradients on `tree` match the oracle's (torch
    static unrolling, itself checked against the float64 reference's loss)."""
    module = importlib.import_module(f"recir.models.{name}")
    ref_loss = module.reference(tree, int(tree.root), params)[1]
    trainers, status, grads = {}, {}, {}
    order = [GRADIENT_ORACLE, *(w for w in TRAIN if w != GRADIENT_ORACLE)]
    for who in order:
        if which is not None and who not in which:
            continue
        trainer, why = attempt(f"{name} train {who}",
                               lambda w=who: TRAIN[w](name, params))
        if trainer is not None:
            grads[who], why = attempt(f"{name} train {who} gradients",
                                      lambda t=trainer: t.gradients(tree))
        if why is None:
            want, other = ((ref_loss, {}), "the reference")
            if who != GRADIENT_ORACLE and GRADIENT_ORACLE in trainers:
                want, other = grads[GRADIENT_ORACLE], "torch"
            _, why = attempt(f"{name} train {who} check",
                             lambda w=who, want=want, other=other: train.compare(
                                 grads[w], want, other))
        status[who] = why
        if why is None:
            trainers[who] = trainer
    return trainers, status


# --- throughput ----------------------------------------------------------------

def time_infer(fns: dict[str, Any], trees: list[Any], batch: int,
               repeats: int) -> dict[str, dict[str, Any]]:
    """One pass = every step of `batch` trees over the first multiple of it."""
    use = trees[: len(trees) // batch * batch]
    steps = [use[k:k + batch] for k in range(0, len(use), batch)]

    def one_pass(fn: Any) -> None:
        for step in steps:
            fn(step)

    times = contest_times({w: lambda f=f: one_pass(f) for w, f in fns.items()}, repeats)
    return {w: {"trees": len(use), "times_s": ts, "median_s": median(ts),
                "trees_per_s": len(use) / median(ts),
                "ms_per_batch": 1e3 * median(ts) / len(steps)}
            for w, ts in times.items()}


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    trees, vocab, source = train.load_trees(size(args, "throughput_trees"))
    repeats = args.repeats or size(args, "repeats")
    rows, status = [], {}
    for name in MODELS:
        params = train.make_params(name, vocab)
        print(f"throughput {name}: building and checking", flush=True)
        fns, status[f"{name} infer"] = build_infer(name, params, trees[:5])
        trainers, status[f"{name} train"] = build_train(name, params, trees[0])
        for batch in BATCHES:
            print(f"  {name} b={batch}", flush=True)
            for task, timed in (("infer", time_infer(fns, trees, batch, repeats)),
                                ("train", train.time_batches(trainers, trees, batch,
                                                             repeats))):
                for who, why in status[f"{name} {task}"].items():
                    rows.append({"model": name, "hidden": train.HIDDEN[name],
                                 "task": task, "batch": batch, "contestant": who,
                                 "skipped": why, **timed.get(who, {})})
    return {"config": {"trees": len(trees), "tree_source": source, "vocab": vocab,
                       "repeats": repeats, "batches": list(BATCHES), "threads": 1,
                       "hidden": train.HIDDEN, "lr": LR},
            "rows": rows}


# --- tree shapes and threads ---------------------------------------------------------

def shapes(args: argparse.Namespace) -> dict[str, Any]:
    n, repeats = size(args, "shape_trees"), size(args, "shape_repeats")
    rows = parallel.tree_rows(n, repeats)
    for r in rows:
        r["trees_per_s_1"] = n * 1e3 / r["ms_1"]
        r["trees_per_s_2"] = n * 1e3 / r["ms_2"]
    return {"config": {"trees_per_shape": n, "leaves": 64, "hidden": 150,
                       "repeats": repeats},
            "rows": rows, "fib35": parallel.fib_row(repeats)}


# --- time per tree against sentence length -------------------------------------------

def length_trees(width: int, per_bucket: int, longest: int
                 ) -> tuple[dict[int, list[Any]], int, str]:
    """SST dev trees (else synthetic) grouped by leaves into buckets of `width`."""
    from recir.data import load_sst, make_treebank, sst_path

    path = sst_path("dev")
    if path is not None:
        trees, vocab = load_sst(path)
        vocab_size, source = len(vocab), f"SST dev ({path})"
    else:
        trees, vocab_size = make_treebank(2000, vocab_size=5000, seed=1), 5000
        source = "synthetic SST-like trees (no SST found)"
    buckets: dict[int, list[Any]] = {}
    for t in trees:
        low = min((t.num_leaves - 1) // width * width + 1, longest)
        if len(buckets.setdefault(low, [])) < per_bucket:
            buckets[low].append(t)
    return dict(sorted(buckets.items())), vocab_size, source


def length(args: argparse.Namespace) -> dict[str, Any]:
    width, longest = size(args, "length_width"), size(args, "length_max")
    buckets, vocab, source = length_trees(width, size(args, "length_trees"), longest)
    repeats = args.repeats or size(args, "repeats")
    params = train.make_params("tree_lstm", vocab)
    first = next(iter(buckets.values()))
    infer_which = ("recir recursive", "recir batched", "iterative (torch)",
                   "static unrolling (torch)")
    fns, infer_status = build_infer("tree_lstm", params, first[:3], infer_which)
    trainers, train_status = build_train("tree_lstm", params, first[0], infer_which)
    rows = []
    for low, trees in buckets.items():
        print(f"  length {low}+: {len(trees)} trees", flush=True)
        leaves = float(np.mean([t.num_leaves for t in trees]))
        for task, timed in (("infer", time_infer(fns, trees, 1, repeats)),
                            ("train", train.time_batches(trainers, trees, 1, repeats))):
            for who, r in timed.items():
                rows.append({"task": task, "contestant": who, "bucket": low,
                             "mean_leaves": leaves, "trees": len(trees),
                             "ms_per_tree": 1e3 * r["median_s"] / r["trees"],
                             "times_s": r["times_s"]})
    return {"config": {"tree_source": source, "bucket_width": width,
                       "model": "tree_lstm", "hidden": train.HIDDEN["tree_lstm"],
                       "repeats": repeats, "batch": 1, "threads": 1},
            "contestants_skipped": {f"infer {w}": s
                                    for w, s in infer_status.items() if s}
            | {f"train {w}": s for w, s in train_status.items() if s},
            "rows": rows}


# --- driver ------------------------------------------------------------------------

SECTION_FNS = {
    "throughput": throughput, "shapes": shapes, "length": length,
    "td_tree_lstm": lambda args: suite_programs.td_tree_lstm(
        size(args, "td_inputs"), args.repeats or size(args, "repeats")),
    "thesis": lambda args: suite_programs.thesis(
        args.repeats or size(args, "repeats") + 1, args.quick)}


def run(args: argparse.Namespace) -> int:
    from bench import suite_report

    common.WARMUP_S = size(args, "warmup_s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"benchmark": "suite", "quick": args.quick,
                              "machine": machine_info(),
                              "command": "python bench/run.py all"
                                         + (" --quick" if args.quick else ""),
                              "sections": {}}
    started = time.perf_counter()
    for name in args.sections:
        print(f"== {name}", flush=True)
        start, log_start = time.perf_counter(), len(common.SPREAD_LOG)
        data, why = attempt(name, lambda f=SECTION_FNS[name]: f(args))
        report["sections"][name] = {"skipped": why,
                                    "seconds": time.perf_counter() - start,
                                    "spread_redos": common.SPREAD_LOG[log_start:],
                                    **(data or {})}
    report["seconds"] = time.perf_counter() - started
    common.write_json(str(out / "suite.json"), report)
    suite_report.write(report, out)
    print(f"\nwrote {out}/suite.json, suite.md and plots in {report['seconds']:.0f} s")
    return 0
