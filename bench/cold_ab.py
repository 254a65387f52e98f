"""Cold frontier compiles of two source trees, alternating process by process.

`python bench/cold_ab.py BEFORE AFTER --rounds 6 --threads 1 --compiles 3`
times `recir.compile` and `recir.value_and_grad` with `batching="frontier"`
(the first until it returns, the second until both have their code)
for TreeLSTM h=150 (embed 150, vocab 1,000), each compile into a fresh cache
folder, in child processes that import recir from BEFORE or AFTER (two
checkouts, e.g. `git worktree add ../before <commit>`). A child compiles once
to warm up (the matrix kernels are then in memory, as on any run after the
first) and then `--compiles` times; the rounds alternate which tree goes
first. On a shared host only alternation makes the two comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

COLUMNS = ("inference wall", "gradient wall", "total wall", "total CPU")


def child(source: str, threads: int, compiles: int) -> None:
    sys.path.insert(0, source)
    import numpy as np

    import recir
    from recir.models import tree_lstm

    if not recir.__file__.startswith(os.path.abspath(source)):
        raise SystemExit(f"recir came from {recir.__file__}, not {source}")
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=150, embed=150, vocab=1000)
    traced = tree_lstm.trace_model(params)

    def once() -> list[float]:
        cache = tempfile.mkdtemp()
        wall, cpu = time.perf_counter(), time.process_time()
        made = [recir.compile(traced, batching="frontier", cache_dir=cache, threads=threads)]
        middle = time.perf_counter()
        made.append(recir.value_and_grad(traced, batching="frontier", cache_dir=cache,
                                         threads=threads))
        for function in made:  # (a tree whose compile returns loaded has no wait)
            getattr(function, "wait", lambda: None)()
        end = time.perf_counter()
        return [middle - wall, end - middle, end - wall, time.process_time() - cpu]

    once()
    print(json.dumps([once() for _ in range(compiles)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compiles", type=int, default=3, help="timed compiles a process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.before, args.threads, args.compiles)
    runs: dict[str, list[list[float]]] = {args.before: [], args.after: []}
    for r in range(args.rounds):
        for source in (args.before, args.after) if r % 2 == 0 else (args.after, args.before):
            done = subprocess.run([sys.executable, __file__, source, source, "--child",
                                   "--threads", str(args.threads), "--compiles",
                                   str(args.compiles)],
                                  capture_output=True, text=True, check=True)
            runs[source] += json.loads(done.stdout.strip().splitlines()[-1])
    for name, source in (("before", args.before), ("after", args.after)):
        columns = list(zip(*runs[source], strict=True))
        print(f"{name} ({source}), {args.threads} thread(s), s: " + "; ".join(
            f"{k} median {statistics.median(c):.2f} min {min(c):.2f}"
            for k, c in zip(COLUMNS, columns, strict=True)))


if __name__ == "__main__":
    main()
