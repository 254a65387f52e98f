"""A cold recursive compile three ways, alternating in one process.

`python -m bench.compile_modes --threads 2 --rounds 6` times `recir.compile`
plus `recir.value_and_grad` of TreeLSTM h=150 (embed 150, vocab 1,000) until
both have their code, each into a fresh cache folder, with LLVM's half:
- `here`: on the compiling thread, the module whole (as `compile_module`
  does when its stages are timed);
- `background`: on a thread of its own, the module whole, so that the
  gradient's passes overlap the inference's LLVM;
- `parts`: on a thread of its own, each large function but the largest in a
  child process at once (`llvm_split`, `llvm_workers`): the default.
With `--batching frontier`, `here` compiles each object in this process and
`parts` each in a child from when its IR is made. The modes take turns
within each round, after one untimed compile, and the
results of each mode's code are checked equal to the first mode's. Then
each mode's last gradient function is timed on SST-length trees (`--calls`
a round, the modes alternating): a part's code must run as fast as the
whole module's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from bench.common import (fmt, machine_info, median, print_table, rounds_times, run_script,
                          write_json)

MODES = ("here", "background", "parts")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=200, help="gradient calls a round")
    parser.add_argument("--batching", choices=["recursive", "frontier"], default="recursive",
                        help="frontier: its objects in this process (here) or in children")
    parser.add_argument("--json", metavar="FILE", help="write the results here")


@contextmanager
def mode(name: str) -> Iterator[None]:
    """`compile_module` and the child processes as the mode has them, for
    the `with` block (a frontier compile has no background: `here` and
    `background` both compile its objects in this process)."""
    from recir import gradients, pipeline
    from recir.backend import llvm_workers

    compile_module, split_module = pipeline.compile_module, pipeline.split_module
    child = llvm_workers.Child

    def no_child(*args: Any, **kwargs: Any) -> Any:
        raise OSError("compiled in this process")

    def here(*args: Any, **kwargs: Any) -> Any:
        return compile_module(*args, **{"timings": {}, **kwargs})

    if name == "here":
        pipeline.compile_module = gradients.compile_module = here  # type: ignore[assignment]
    if name != "parts":
        pipeline.split_module = lambda text, suffix: ([text], [])  # type: ignore[assignment]
        llvm_workers.Child = no_child  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        pipeline.compile_module = gradients.compile_module = compile_module
        pipeline.split_module = split_module
        llvm_workers.Child = child  # type: ignore[misc]


def model() -> tuple[Any, tuple[Any, ...]]:
    """TreeLSTM h=150 and one tree's inputs."""
    from recir.models import tree_lstm

    params = tree_lstm.init_params(np.random.default_rng(0), hidden=150, embed=150, vocab=1000)
    return tree_lstm.trace_model(params), tree_inputs(100)


def cold(traced: Any, threads: int, batching: str) -> tuple[float, Callable[..., Any], Any]:
    """Seconds until a cold inference and gradient compile both have their code."""
    import recir

    cache = tempfile.mkdtemp(prefix="recir-modes-")
    start = time.perf_counter()
    inference = recir.compile(traced, cache_dir=cache, threads=threads, batching=batching)
    gradient = recir.value_and_grad(traced, cache_dir=cache, threads=threads,
                                    batching=batching).wait()
    inference.wait()
    return time.perf_counter() - start, inference, gradient


def measure(threads: int, rounds: int, modes: tuple[str, ...] = MODES, calls: int = 0,
            batching: str = "recursive"
            ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each mode's cold compile seconds, and its gradient code's seconds a
    call (`calls` a round, where not 0)."""
    traced, inputs = model()
    with mode(modes[0]):
        cold(traced, threads, batching)  # imports, kernels, the Ctrl-C handler
    seconds: dict[str, list[float]] = {name: [] for name in modes}
    expected, gradients = None, {}
    for _ in range(rounds):
        for name in modes:
            with mode(name):
                took, inference, gradient = cold(traced, threads, batching)
            seconds[name].append(took)
            gradients[name] = gradient
            (_, loss), grads = gradient(*inputs)
            got = (inference(*inputs)[1], loss, grads["u"].copy())
            expected = expected or got
            assert np.allclose(got[0], expected[0]) and np.allclose(got[1], expected[1])
            assert np.allclose(got[2], expected[2], rtol=1e-5, atol=1e-7)
    trees = [tree_inputs(seed) for seed in range(10)]
    runs = {name: lambda g=g: [g(*trees[k % 10]) for k in range(calls)]
            for name, g in gradients.items()}
    per_call = {name: [t / calls for t in times] for name, times in rounds_times(
        runs, rounds, warmup_s=0.2).items()} if calls else {}
    return seconds, per_call


def tree_inputs(seed: int) -> tuple[Any, ...]:
    """An SST-length tree's inputs (about 20 leaves)."""
    from recir.data import make_tree

    tree = make_tree("moderate", 20, np.random.default_rng(seed), vocab_size=1000)
    return tree.left, tree.right, tree.word, tree.label % 5, tree.root


def run(args: argparse.Namespace) -> int:
    modes = MODES if args.batching == "recursive" else ("here", "parts")
    seconds, per_call = measure(args.threads, args.rounds, modes, args.calls, args.batching)
    print_table(f"cold compile of TreeLSTM h=150 inference + gradient until loaded, "
                f"batching={args.batching}, {args.threads} thread(s), {args.rounds} rounds, s",
                ["mode", "median", "min", "max", "median / here"],
                [[name, fmt(median(s), 2), fmt(min(s), 2), fmt(max(s), 2),
                  fmt(median(s) / median(seconds["here"]), 2)] for name, s in seconds.items()])
    if per_call:
        print_table(f"each mode's gradient code, an SST-length tree a call, {args.threads} "
                    "thread(s), us a call", ["mode", "median", "median / here"],
                    [[name, fmt(1e6 * median(t), 1),
                      fmt(median(t) / median(per_call["here"]), 3)]
                     for name, t in per_call.items()])
    if args.json:
        write_json(args.json, {"machine": machine_info(), "threads": args.threads,
                               "seconds": seconds, "gradient_s_per_call": per_call})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(__doc__, add_arguments, run))
