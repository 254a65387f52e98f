"""A recursive batch's fields by columns against call by call, on SST batches.

`NativeFunction.batch` lays a batch's arguments out by columns
(`backend/batch_fields.py`) where every call passes an input alike, else
prepares each call (`Arguments.prepare` and `fields`). Both are timed here
on the recursive TreeLSTM (h=150; `--model tree_rnn` or `rntn`, `--hidden`)
over batches of 25 SST trees on `--threads`: the layout alone (warm, best
of 5 runs of 500), then whole batches with either, in alternating rounds:
a batch's wall time, its part outside the team's native call
(`teams.run_team`), which the calling thread runs alone, and the layout's
share of that part (`NativeFunction.batch_fields`; their medians):

    .venv/bin/python -m bench.batch_layout --mode infer --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.batching import args_of, make_params, workload
from bench.common import repeat_times
from recir.backend import runtime
from recir.backend.batch_fields import batch_fields


def best_of(fn: Callable[[], Any], runs: int = 5, calls: int = 500) -> float:
    """The least seconds a call of `fn` took, over `runs` runs of `calls`."""
    return min(repeat_times(lambda: [fn() for _ in range(calls)], runs)) / calls


def model(mode: str, threads: int, name: str = "tree_lstm", hidden: int = 150
          ) -> tuple[Any, list[Any], Callable[[list[Any]], Any], list[list[Any]]]:
    """The native function, the first batch as it takes it, a batch's call
    and SST batches of the model's inputs (`name`: a module of recir.models
    with the TreeLSTM's inputs, its weights scaled as `make_params`')."""
    import importlib

    import recir

    trees, vocab, _ = workload("sst", 25)
    module = importlib.import_module(f"recir.models.{name}")
    params = make_params(hidden, vocab) if name == "tree_lstm" else {
        k: (v / (0.5 * np.sqrt(v.shape[-1])) if v.ndim >= 2 and k != "emb" else v)
        .astype(np.float32) for k, v in module.init_params(
            np.random.default_rng(0), hidden=hidden, vocab=vocab).items()}
    traced = module.trace_model(params)
    batches = [[args_of(t) for t in trees[i:i + 25]] for i in range(0, len(trees), 25)]
    if mode == "infer":
        fn = recir.compile(traced, batching="recursive", threads=threads)
        return fn, batches[0], fn.batch, batches
    grad = recir.value_and_grad(traced, batching="recursive", threads=threads)
    into = {k: np.zeros_like(v) for k, v in params.items()}
    shared = [*grad.params.values(), *grad.gradient_args(into)]  # as `batch` adds them
    return grad.native, [(*item, *shared) for item in batches[0]], (
        lambda batch: grad.batch(batch, into)), batches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--model", choices=["tree_lstm", "tree_rnn", "rntn"],
                        default="tree_lstm")
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    native, items, call, batches = model(args.mode, args.threads, args.model, args.hidden)
    arguments = native.arguments
    by_columns = best_of(lambda: batch_fields(arguments, items, []))
    by_call = best_of(lambda: [arguments.fields(arguments.prepare(item, [], outputs=False)[0])
                               for item in items] and native.sizes(items))
    print(f"{args.model} h={args.hidden} {args.mode}, a batch of 25: fields by columns {by_columns * 1e6:.0f} us, "
          f"call by call {by_call * 1e6:.0f} us")
    layouts = {"by columns": batch_fields, "call by call": lambda *_: None}
    timed = {name: ([], [], []) for name in layouts}  # wall, outside the team call, layout
    spent, run_team = [0.0, 0.0], runtime.run_team  # in the team call, in the layout

    def clocked(k: int, inner: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args)
            finally:
                spent[k] += time.perf_counter() - start
        return call

    runtime.run_team, method = clocked(0, run_team), runtime.NativeFunction.batch_fields
    runtime.NativeFunction.batch_fields = clocked(1, method)  # type: ignore[method-assign]
    try:
        for batch in batches:
            call(batch)
        for _ in range(args.rounds):
            for name, layout in layouts.items():
                runtime.batch_fields = layout  # (the per-call path where it gives None)
                spent[:], start = [0.0, 0.0], time.perf_counter()
                for batch in batches:
                    call(batch)
                wall = time.perf_counter() - start
                for k, value in enumerate((wall, wall - spent[0], spent[1])):
                    timed[name][k].append(value / len(batches))
    finally:
        runtime.batch_fields, runtime.run_team = batch_fields, run_team
        runtime.NativeFunction.batch_fields = method  # type: ignore[method-assign]
    print(f"{args.mode} on {args.threads} threads, a batch (medians of {args.rounds} rounds): "
          + "; ".join(f"{name} {statistics.median(wall) * 1e6:.0f} us, outside the team "
                      f"call {statistics.median(alone) * 1e6:.0f} us (of it laying out "
                      f"{statistics.median(laid) * 1e6:.0f} us)"
                      for name, (wall, alone, laid) in timed.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
