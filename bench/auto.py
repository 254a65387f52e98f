"""The frontier scheduler against the recursive native code, by model, cell, batch and threads.

What checks `batching="auto"`'s cost model (`recir/auto.py`): 100 SST dev
trees (synthetic SST-like trees without the data) in batches of 1, 5 and
25, inference (`recir.compile`) and training (`recir.value_and_grad`,
gradients summed into buffers), both codes in the same rounds (median of
`--repeats`), with the model's predicted ratio (recursive over frontier
seconds), the mode `auto` picks most often and its rate over the faster
mode's (`auto/best`).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import machine_info, majority, median, print_table, rounds_times, \
    write_json

CELLS = ["tree_lstm:100", "tree_lstm:150", "tree_lstm:256", "tree_rnn:150", "tree_rnn:300",
         "rntn:25"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--cells", nargs="+", default=CELLS, help="model:hidden")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 5, 25])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--modes", nargs="+", default=["infer", "train"])
    parser.add_argument("--repeats", type=int, default=5)


def model_of(cell: str, vocab: int) -> Any:
    from bench.batching import make_params
    from recir.models import rntn, tree_lstm, tree_rnn

    name, hidden = cell.split(":")
    module = {"tree_lstm": tree_lstm, "tree_rnn": tree_rnn, "rntn": rntn}[name]
    params = make_params(int(hidden), vocab) if module is tree_lstm else module.init_params(
        np.random.default_rng(0), hidden=int(hidden), vocab=vocab)
    return module.trace_model(params)


def run(args: argparse.Namespace) -> int:
    from bench.batching import args_of, keep_freed_memory, workload

    keep_freed_memory()
    trees, vocab, described = workload("sst", 25)
    items = [args_of(t) for t in trees]
    rows, table = [], []
    for cell in args.cells:
        model = model_of(cell, vocab)
        for mode in args.modes:
            for threads in args.threads:
                for batch in args.batches:
                    row = compare(model, mode, threads, batch, items, args.repeats)
                    rows.append({"cell": cell, **row})
                    rate = row["trees_per_s"]
                    table.append([cell, mode, str(threads), str(batch),
                                  f"{rate['frontier']:.0f}", f"{rate['recursive']:.0f}",
                                  f"{rate['frontier'] / rate['recursive']:.2f}",
                                  f"{row['predicted']:.2f}", row["auto"],
                                  f"{row['auto_over_best']:.2f}",
                                  "" if row["auto_over_best"] >= 0.9 else "<- over 10% off"])
                    print(" ".join(table[-1]), flush=True)
    print_table(f"frontier against recursive, {described} trees, trees/s (median)",
                ["cell", "mode", "thr", "batch", "frontier", "recursive", "ratio",
                 "predicted", "auto", "auto/best", ""],
                table)
    if args.json:
        write_json(args.json, {"machine": machine_info(), "rows": rows})
    return 0


def compare(model: Any, mode: str, threads: int, batch: int, items: list[Any], repeats: int
            ) -> dict[str, Any]:
    """Both codes on the items in batches, in the same rounds."""
    import recir

    chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
    if mode == "infer":
        auto = recir.compile(model, batching="auto", threads=threads)
        codes = {"frontier": recir.compile(model, batching="frontier", threads=threads),
                 "recursive": recir.compile(model, threads=threads)}
        picks = majority([auto.choose(c) for c in chunks])
        threads_of = (threads if auto.recursive.team else 1, threads)
        fns = {name: (lambda f=f: [f.batch(c) for c in chunks]) for name, f in codes.items()}
    else:
        auto = recir.value_and_grad(model, batching="auto", threads=threads)
        codes = {"frontier": recir.value_and_grad(model, batching="frontier", threads=threads),
                 "recursive": recir.value_and_grad(model, threads=threads)}
        picks = majority([auto.choose(c, threads) for c in chunks])
        threads_of = (threads, threads)
        into = {k: np.zeros_like(v) for k, v in model.params.items()}
        fns = {name: (lambda f=f: [f.batch(c, into) for c in chunks])
               for name, f in codes.items()}
    times = rounds_times(fns, repeats)
    rate = {name: len(items) / median(t) for name, t in times.items()}
    seconds = [auto.auto.seconds(c, *threads_of) for c in chunks]
    predicted = sum(s["recursive"] for s in seconds) / sum(s["frontier"] for s in seconds)
    best = max(rate, key=rate.__getitem__)
    return {"mode": mode, "threads": threads, "batch": batch, "trees_per_s": rate,
            "predicted": predicted, "auto": picks, "best": best,
            "auto_over_best": rate[picks.rstrip("*")] / rate[best]}
