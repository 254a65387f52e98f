"""`run.py fusion`: fused against unfused elementwise code, TreeLSTM inference and training.

h = 64, 150 and 256; batches of 1 and 25 SST dev trees (synthetic SST-like
trees without SST); one thread. Both variants are the same traced model
compiled with `fuse=True` and `fuse=False`; training is forward + backward
with gradients accumulated over the batch (`into=`), without the optimizer
step, which fusion does not touch.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import contest_times, fmt, machine_info, median, print_table, write_json

SIZES = (64, 150, 256)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--quick", action="store_true", help="fewer trees and repeats")


def load_trees(n: int) -> tuple[list[Any], int, str]:
    from recir.data import load_sst, make_treebank, sst_path

    path = sst_path("dev")
    if path is not None:
        trees, vocab = load_sst(path)
        return trees[:n], len(vocab), f"SST dev ({path})"
    return make_treebank(n, vocab_size=5000, seed=0), 5000, "synthetic SST-like trees"


def contestants(hidden: int, vocab: int) -> dict[str, dict[str, Any]]:
    import recir
    from recir.models import tree_lstm

    rng = np.random.default_rng(0)
    params = tree_lstm.init_params(rng, hidden=hidden, embed=hidden, vocab=vocab)
    params = {k: (rng.standard_normal(v.shape) / np.sqrt(v.shape[-1])).astype(np.float32)
              for k, v in params.items()}
    model = tree_lstm.trace_model(params)
    return {name: {"infer": recir.compile(model, fuse=fuse, threads=1),
                   "train": recir.value_and_grad(model, fuse=fuse, threads=1)}
            for name, fuse in (("fused", True), ("unfused", False))}


def run(args: argparse.Namespace) -> int:
    import bench.common as common

    if args.quick:
        common.WARMUP_S = 0.2
    trees, vocab, source = load_trees(50 if args.quick else 200)
    repeats = 3 if args.quick else 7
    print(f"{len(trees)} trees from {source}, {repeats} repeats", flush=True)
    report: dict[str, Any] = {"machine": machine_info(), "trees": source, "rows": []}
    for hidden in SIZES:
        print(f"  h={hidden}", flush=True)
        fns = contestants(hidden, vocab)
        grads = {k: np.zeros_like(v) for k, v in fns["fused"]["train"].params.items()}
        for task in ("infer", "train"):
            for batch in (1, 25):
                batches = [trees[i:i + batch] for i in range(0, len(trees), batch)]

                def work(fn: Any, task: str = task, batches: list = batches) -> None:
                    extra = {"into": grads} if task == "train" else {}
                    for b in batches:
                        for t in b:
                            fn(t.left, t.right, t.word, t.label, t.root, **extra)

                times = contest_times({k: lambda f=f[task]: work(f) for k, f in fns.items()},
                                      repeats)
                row = {"hidden": hidden, "task": task, "batch": batch,
                       **{k: len(trees) / median(ts) for k, ts in times.items()}}
                row["speedup"] = row["fused"] / row["unfused"]
                report["rows"].append(row)
    print_table("TreeLSTM trees/s, fused against unfused elementwise loops, 1 thread",
                ["case", "fused", "unfused", "fused/unfused"],
                [[f"{r['task']} h={r['hidden']} b={r['batch']}", fmt(r["fused"]),
                  fmt(r["unfused"]), fmt(r["speedup"], 3)] for r in report["rows"]])
    if args.json:
        write_json(args.json, report)
        print(f"\nwrote {args.json}")
    return 0
