"""A frontier call repeated on its last plans against one made by the schedule.

    .venv/bin/python -m bench.repeat_ab --mode infer --threads 2 --rounds 40

The frontier TreeLSTM's inference or gradient (SST dev, batches of 25,
h=150) on 1 and N threads, in one process. Each round times a run of calls both ways in
turn: as a user's calls run (`backend/repeat_call`: each call after the
first writes its inputs into the last call's plans) and with the repeat
dropped before every call (the schedule finds and fills every plan, as
before the repeat). Prints the medians a call and the N-thread over
one-thread ratio each way.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from bench.batching import args_of, keep_freed_memory, make_params, workload


def timed(fn, batches, repeated: bool, calls: int, *more) -> float:
    """Seconds a call over `calls` calls cycling through `batches` (`more`:
    the rest of `fn.batch`'s arguments)."""
    started = time.perf_counter()
    for k in range(calls):
        if not repeated:
            fn.again = None
        fn.batch(batches[k % len(batches)], *more)
    return (time.perf_counter() - started) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=16, help="calls a round, each way")
    args = parser.parse_args()
    import recir
    from recir.models import tree_lstm

    keep_freed_memory()
    trees, vocab, _ = workload("sst", 25)
    params = make_params(args.hidden, vocab)
    model = tree_lstm.trace_model(params)
    make = recir.compile if args.mode == "infer" else recir.value_and_grad
    fns = {t: make(model, batching="frontier", threads=t) for t in (1, args.threads)}
    more = () if args.mode == "infer" else ({k: np.zeros_like(v) for k, v in params.items()},)
    batches = [[args_of(t) for t in trees[k:k + 25]] for k in range(0, 100, 25)]
    times: dict[tuple[int, bool], list[float]] = {
        (t, r): [] for t in fns for r in (False, True)}
    for fn in fns.values():
        for _ in range(2):
            timed(fn, batches, True, len(batches), *more)
    for _ in range(args.rounds):
        for repeated in (False, True):
            for t, fn in fns.items():
                times[t, repeated].append(timed(fn, batches, repeated, args.calls, *more))
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"frontier {args.mode} h={args.hidden} SST b25, us a call (medians of {args.rounds} "
          f"rounds of {args.calls} calls)")
    for repeated in (False, True):
        one, many = median[1, repeated], median[args.threads, repeated]
        print(f"  {'repeated' if repeated else 'schedule':9s} 1t {1e6 * one:7.0f}  "
              f"{args.threads}t {1e6 * many:7.0f}  {args.threads}t/1t {one / many:.3f}")
    for t in fns:
        print(f"  {t}t: repeated over schedule {median[t, True] / median[t, False]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
