"""The frontier scheduler against the recursive native code, by model, cell, batch and threads.

What `batching="auto"` is set from (`recir/batching/api.py`: AUTO_WORK,
AUTO_TEAM_WORK, AUTO_MIN_BATCH): 100 SST dev trees (synthetic SST-like
trees without the data) in batches of 5, 10 and 25, inference, both codes
in the same rounds (median of `--repeats`), with the cell's work (its
largest product's multiply-adds per invocation, bilinear weighted) and
the mode `auto` picks beside the faster one.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import machine_info, median, print_table, rounds_times, write_json

CELLS = ["tree_lstm:100", "tree_lstm:150", "tree_lstm:256", "tree_rnn:150", "tree_rnn:300",
         "rntn:25"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--cells", nargs="+", default=CELLS, help="model:hidden")
    parser.add_argument("--batches", type=int, nargs="+", default=[5, 10, 25])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
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
    import recir
    from bench.batching import args_of, keep_freed_memory, workload

    keep_freed_memory()
    trees, vocab, described = workload("sst", 25)
    items = [args_of(t) for t in trees]
    rows, table = [], []
    for cell in args.cells:
        model = model_of(cell, vocab)
        for threads in args.threads:
            auto = recir.compile(model, batching="auto", threads=threads)
            codes = {"frontier": recir.compile(model, batching="frontier", threads=threads),
                     "recursive": recir.compile(model, threads=threads)}
            for batch in args.batches:
                chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
                times = rounds_times({name: (lambda f=f: [f.batch(c) for c in chunks])
                                      for name, f in codes.items()}, args.repeats)
                rate = {name: len(items) / median(t) for name, t in times.items()}
                best = max(rate, key=rate.__getitem__)
                picks = auto.choose(batch)
                rows.append({"cell": cell, "threads": threads, "batch": batch,
                             "work": auto.work, "trees_per_s": rate, "auto": picks,
                             "best": best})
                table.append([cell, str(threads), str(batch), f"{auto.work:,}",
                              f"{rate['frontier']:.0f}", f"{rate['recursive']:.0f}",
                              f"{rate['frontier'] / rate['recursive']:.2f}", picks,
                              "" if picks == best else "<- not the faster"])
                print(" ".join(table[-1]), flush=True)
    print_table(f"frontier against recursive, {described} trees, inference, trees/s (median)",
                ["cell", "thr", "batch", "work", "frontier", "recursive", "ratio", "auto", ""],
                table)
    if args.json:
        write_json(args.json, {"machine": machine_info(), "rows": rows})
    return 0
