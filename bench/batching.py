"""Frontier batching: recir against PyTorch level-batched, DyNet autobatch and eager.

TreeLSTM, identical weights and trees, side by side in one process: recir's
frontier form (`recir.compile(batching="frontier")`: invoke-to-frontier's
batched IR compiled natively; training through
`value_and_grad(batching="frontier")`), recir's recursive native code,
PyTorch level-batched (nodes grouped by height, one batched cell per level:
the Fold/DGL method, `bench/torch_level_batched.py`), DyNet 2.1 with
autobatching (one thread: its CPU build has no thread option) and PyTorch
eager (one graph per tree). Workloads: SST dev trees (synthetic SST-like
trees without the data) and complete binary trees of 32 and 256 leaves.
Each contestant runs `n` trees in minibatches of `batch` and reports
trees/s (median of the repeats); training computes the gradients of the
summed loss (no optimizer step). Threads: the team that recir's frontier
splits its products and row loops across, `torch.set_num_threads` for
PyTorch, the libgomp team for recir's recursive code. PyTorch level-batched runs at its strongest: on rows of N > 1
threads it is timed on 1 and on N threads (intra-op threads can lose to one
thread on few cores) and the faster counts (`torch-level` is the best,
`level thr` says which). The SGEMM roof (`bench/roof.py`) is the best rate of
NumPy's BLAS, PyTorch and recir's own kernels at a 2048^3 product and at the
TreeLSTM's widest frontier products, at the same thread count, measured before
and after the rows; `roof %` is a recir mode's FLOP rate (the cell's matrix
products; training three times inference's: forward, dX and dW) over it.
Every cell prints the mode `batching="auto"` picks and its rate over the best
recir mode's (`auto/best`). The run records the CPU model and the BLAS each
peer runs on (`bench/peers.py`).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bench.batching_report import print_report
from bench.common import attempt, contest_times, machine_info, majority, median, \
    write_json
from bench.dynet_models import dynet_autobatch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="h=150, SST, batch 1 and 25, 3 repeats")
    parser.add_argument("--hidden", type=int, nargs="+", default=[150, 256])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 10, 25, 100])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workloads", nargs="+", default=["sst", "complete-32",
                                                           "complete-256"])
    parser.add_argument("--modes", nargs="+", default=["infer", "train"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip", nargs="*", default=[],
                        help="contestants to leave out (e.g. torch-eager)")
    parser.add_argument("--roof-repeats", type=int, default=3,
                        help="timings per product of the SGEMM roof")


# --- workloads ------------------------------------------------------------

def workload(name: str, batch: int) -> tuple[list[Any], int, str]:
    """Trees (enough for the largest batch), vocabulary size, description."""
    from recir.data import make_treebank
    from recir.data.sst import load_sst, sst_path

    count = max(batch, 100)  # 4 batches of 25: a timing long enough for this noisy host
    if name == "sst":
        path = sst_path("dev")
        if path is not None:
            trees, vocab = load_sst(path)
            return trees[:count], len(vocab), "SST dev"
        return make_treebank(count, seed=0, vocab_size=5000), 5000, "synthetic SST-like"
    leaves = int(name.split("-")[1])
    count = max(batch, 4 if leaves >= 128 else 10)
    return (make_treebank(count, "balanced", num_leaves=leaves, vocab_size=5000, seed=1),
            5000, f"complete, {leaves} leaves")


def make_params(hidden: int, vocab: int) -> dict[str, np.ndarray]:
    from bench.native import make_params as scaled

    return scaled(hidden, vocab)


def cell_flops(trees: list[Any], hidden: int) -> float:
    """Multiply-adds x 2 of the cell's matrix products (leaf, internal, output)."""
    leaves = sum(t.num_leaves for t in trees)
    inner = sum(t.num_nodes for t in trees) - leaves
    return 2.0 * (leaves * 3 * hidden * hidden + inner * 5 * hidden * 2 * hidden
                  + (leaves + inner) * 5 * hidden)


# --- contestants: each builds run(trees) for one mode ----------------------

def args_of(t: Any) -> tuple:
    return (t.left, t.right, t.word, t.label, t.root)


def recir_frontier(params, mode, threads):
    import recir
    from recir.models import tree_lstm

    traced = tree_lstm.trace_model(params)
    if mode == "infer":
        fn = recir.compile(traced, batching="frontier", threads=threads)
        run = lambda trees: [o[1] for o in fn.batch([args_of(t) for t in trees])]  # noqa: E731
    else:
        grad = recir.value_and_grad(traced, batching="frontier", threads=threads)
        into = {k: np.zeros_like(v) for k, v in params.items()}
        run = lambda trees: [o[1] for o in grad.batch([args_of(t) for t in trees], into)[0]]  # noqa: E731

    return run


def recir_recursive(params, mode, threads):
    import recir
    from recir.models import tree_lstm

    traced = tree_lstm.trace_model(params)
    if mode == "infer":
        fn = recir.compile(traced, threads=threads)  # the trees as tasks of one team
        return lambda trees: [o[1] for o in fn.batch([args_of(t) for t in trees])]
    grad = recir.value_and_grad(traced, threads=threads)
    into = {k: np.zeros_like(v) for k, v in params.items()}
    return lambda trees: [o[1] for o in grad.batch([args_of(t) for t in trees], into,
                                                   threads=threads)[0]]


def torch_level(params, mode, threads):
    import torch

    from bench.torch_level_batched import TreeLSTM

    torch.set_num_threads(threads)
    if mode == "infer":
        model = TreeLSTM(params)

        def infer(trees):
            torch.set_num_threads(threads)  # the other thread count's contestant shares torch
            return [o[1] for o in model.infer(trees)]

        return infer
    model = TreeLSTM(params, train=True)

    def train(trees):
        torch.set_num_threads(threads)
        losses = model.forward(trees)[1]
        losses.sum().backward()
        for v in model.p.values():
            v.grad = None
        return sums_per_tree(losses.detach().numpy(), trees)

    return train


def sums_per_tree(losses: np.ndarray, trees: list[Any]) -> list[float]:
    bounds = np.cumsum([0] + [t.num_nodes for t in trees])
    return [float(losses[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def torch_level_one(params, mode, threads):
    """PyTorch level-batched on one thread, beside its N-thread row."""
    return torch_level(params, mode, 1)


def torch_eager(params, mode, threads):
    import torch

    from bench.torch_models import TreeLSTM

    torch.set_num_threads(threads)
    if mode == "infer":
        model = TreeLSTM(params)

        def infer(trees):
            torch.set_num_threads(threads)
            return [model(t, t.root)[1] for t in trees]

        return infer
    model = TreeLSTM(params, train=True)

    def train(trees):
        torch.set_num_threads(threads)
        losses = [model.loss(t) for t in trees]
        torch.stack(losses).sum().backward()
        for v in model.p.values():
            v.grad = None
        return [float(x) for x in losses]

    return train


CONTESTANTS = {"recir-frontier": recir_frontier, "recir-recursive": recir_recursive,
               "torch-level": torch_level, "torch-level-1t": torch_level_one,
               "dynet-auto": dynet_autobatch, "torch-eager": torch_eager}


# --- measurement ----------------------------------------------------------

def auto_choice(params: dict[str, np.ndarray], mode: str, threads: int,
                chunks: list[list[tuple]]) -> str:
    """The mode `batching="auto"` runs these minibatches in (`majority`)."""
    import recir
    from recir.models import tree_lstm

    traced = tree_lstm.trace_model(params)
    if mode == "infer":
        auto = recir.compile(traced, batching="auto", threads=threads)
        return majority([auto.choose(c) for c in chunks])
    grad = recir.value_and_grad(traced, batching="auto", threads=threads)
    return majority([grad.choose(c, threads) for c in chunks])


def raise_roof(roof: dict[str, float], measured: dict[str, float]) -> None:
    """A roof is the best rate seen: measured before and after the rows, so a
    slow spell of a shared host at the start does not lower it."""
    for k, v in measured.items():
        roof[k] = max(roof.get(k, 0.0), v)


def repeat(fn: Any, k: int) -> list[float]:
    fn()
    times = []
    for _ in range(k):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def in_batches(run: Any, trees: list[Any], batch: int) -> Any:
    def all_trees() -> list[float]:
        out: list[float] = []
        for k in range(0, len(trees), batch):
            out.extend(run(trees[k:k + batch]))
        return out
    return all_trees


def one_config(params, trees, batch, mode, threads, repeats, skip) -> dict[str, Any]:
    fns, errors, losses = {}, {}, {}
    for name, build in CONTESTANTS.items():
        if name in skip or (name == "torch-level-1t" and threads == 1):
            continue
        run, reason = attempt(name, lambda b=build: b(params, mode, threads))
        if run is None:
            errors[name] = reason
            continue
        fn = in_batches(run, trees, batch)
        out, reason = attempt(name, fn)
        if out is None:
            errors[name] = reason
            continue
        fns[name], losses[name] = fn, np.asarray(out, np.float64)
    base = losses.get("recir-frontier")
    check = {n: float(np.abs(v - base).max() / np.abs(base).max())
             for n, v in losses.items()} if base is not None else {}
    times = contest_times(fns, repeats, warmup_s=0.3)
    rate = {n: len(trees) / median(t) for n, t in times.items()}
    level = {thr: rate.pop(n) for n, thr in (("torch-level", threads), ("torch-level-1t", 1))
             if n in rate}
    level_threads = max(level, key=level.get) if level else None
    if level_threads is not None:  # the peer at its strongest: the faster thread count
        rate["torch-level"] = level[level_threads]
    return {"trees_per_s": rate, "skipped": errors, "max_rel_loss_diff": check,
            "torch_level_by_threads": level, "torch_level_threads": level_threads}


def keep_freed_memory() -> bool:
    """glibc: serve large arrays from the heap and keep freed memory, for every
    contestant alike. By default each multi-megabyte array (a frontier's
    gates) is a fresh mmap whose pages fault in again on every use; measured
    here, that cost PyTorch and NumPy alike up to a third of their time."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim, m_top_pad, m_mmap = -1, -2, -3
        return bool(libc.mallopt(m_mmap, 32 << 20) and libc.mallopt(m_trim, 1 << 30)
                    and libc.mallopt(m_top_pad, 64 << 20))
    except OSError:
        return False


def measure_roof(report: dict[str, Any], args: argparse.Namespace) -> None:
    """The SGEMM roof on each thread count, the best seen kept (`raise_roof`)."""
    from bench.roof import quick_roof

    for threads in args.threads:
        raise_roof(report["roof"].setdefault(threads, {}),
                   quick_roof(threads, max(args.hidden), args.roof_repeats))
        print(f"SGEMM roof, {threads} thread(s): " + ", ".join(
            f"{k} {v:.0f} GFLOP/s" for k, v in report["roof"][threads].items()), flush=True)


def cell_row(args: argparse.Namespace, params: dict[str, Any], trees: list[Any], batch: int,
             mode: str, threads: int, hidden: int, name: str) -> dict[str, Any]:
    """One cell's row: every contestant's trees/s, auto's choice, recir's GFLOP/s."""
    row = one_config(params, trees, batch, mode, threads, args.repeats, args.skip)
    row.update(hidden=hidden, workload=name, batch=batch, threads=threads, mode=mode,
               trees=len(trees), auto=auto_choice(params, mode, threads, [
                   [args_of(t) for t in trees[i:i + batch]]
                   for i in range(0, len(trees), batch)]))
    per_tree = cell_flops(trees, hidden) / len(trees) * (
        1 if mode == "infer" else 3)  # training: forward, dX, dW
    row["gflops"] = {n: per_tree * r / 1e9 for n, r in row["trees_per_s"].items()
                     if n.startswith("recir")}
    print("  trees/s: " + ", ".join(f"{n} {v:.1f}" for n, v in row["trees_per_s"].items())
          + f"; torch-level threads {row['torch_level_threads']}"
          + f"; auto picks {row['auto']}", flush=True)
    return row


def run(args: argparse.Namespace) -> int:
    report_malloc = keep_freed_memory()
    print(f"glibc keeps freed memory (mallopt): {report_malloc}", flush=True)
    if args.quick:
        args.hidden, args.workloads, args.batches = [150], ["sst"], [1, 25]
        args.repeats = 3
    from bench.peers import blas_report, summary

    report: dict[str, Any] = {"machine": machine_info(), "blas": blas_report(),
                              "mallopt": report_malloc, "roof": {}, "rows": []}
    print(f"CPU: {report['machine']['cpu']} ({report['machine']['nproc']} cores)")
    print(summary(report["blas"]), flush=True)

    measure_roof(report, args)
    for hidden in args.hidden:
        for name in args.workloads:
            for batch in args.batches:
                trees, vocab, desc = workload(name, batch)
                params = make_params(hidden, vocab)
                for threads in args.threads:
                    for mode in args.modes:
                        print(f"h={hidden} {desc} batch={batch} threads={threads} {mode}",
                              flush=True)
                        report["rows"].append(cell_row(args, params, trees, batch, mode,
                                                       threads, hidden, name))
                        if args.json:  # what is done so far survives a cut-off run
                            write_json(args.json, report)
    measure_roof(report, args)
    for row in report["rows"]:  # against the best roof seen over the whole run
        roof = report["roof"][row["threads"]]["roof"]
        row["roof_fraction"] = {n: g / roof for n, g in row["gflops"].items()}
    print_report(report)
    if args.json:
        write_json(args.json, report)
    return 0
