"""`run.py distributed`: data-parallel TreeLSTM training over MPI ranks.

Trains one epoch of TreeLSTM (h=150, Adagrad, seed 0) on SST train ($RECIR_SST_DIR;
synthetic trees without SST) with `python -m recir.examples.sentiment`: alone
for 1 rank (batch 25), under `mpiexec -n R ... --distributed` for more, each
rank on `--threads` threads, two ways: `split`, one batch of 25 split across
the ranks (the same updates as one process, hence the same accuracy), and
`per_rank`, 25 trees per rank (a batch of 25 R, as data-parallel training
usually scales). Reports trees/s, rank 0's time split (compute, allreduce
with the wait for the slowest rank, optimizer), bytes reduced per step and
dev accuracy. Then it times bare `Allreduce` calls of 4 KB-4 MB on 2..R
ranks, fits t = a * 2ceil(log2 N) + b * 2(N-1)/N * bytes (recursive doubling
for latency, reduce-scatter + allgather for volume: MPICH's algorithms), and
predicts the speedup on 2, 4 and 8 machines over 10 and 25 Gb/s Ethernet
(bench/distributed_model.py) beside the paper's 1.85x / 3.65x / 7.34x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import fmt, machine_info, print_table, write_json
from bench.distributed_model import fit, predictions

ROOT = Path(__file__).resolve().parent.parent
PROBE_FLOATS = [1 << k for k in range(10, 21)]  # 4 KB .. 4 MB
PROBE_REPEATS = 30
BATCH, HIDDEN = 25, 150


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--ranks", default=None, metavar="LIST",
                        help="rank counts, e.g. 1,2,4 (default: 1, 2 and the powers "
                        "of two up to the cores, 16 at most)")
    parser.add_argument("--threads", type=int, default=1, help="threads per rank")
    parser.add_argument("--max-train", type=int, metavar="N",
                        help="train on the first N trees (default: all, one epoch)")
    parser.add_argument("--quick", action="store_true", help="--max-train 1000")
    parser.add_argument("--probe", metavar="OUT", help=argparse.SUPPRESS)


def mpiexec() -> str:
    here = Path(sys.executable).with_name("mpiexec")
    return str(here) if here.exists() else "mpiexec"


def sst_folder() -> Path | None:
    from recir.data import sst_path

    train = sst_path("train")
    return train.parent if train and sst_path("dev") else None


def train_row(ranks: int, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One epoch on `ranks` ranks: the sentiment CLI's metrics record. Mode
    `split`: one batch of 25 split across the ranks (the updates of one
    process); `per_rank`: 25 trees per rank, a batch of 25 * ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        command = [sys.executable, "-m", "recir.examples.sentiment", "--epochs", "1",
                   "--threads", str(args.threads), "--no-all-nodes", "--no-progress",
                   "--seed", "0", "--metrics", str(metrics), "--batch-size",
                   str(BATCH * (ranks if mode == "per_rank" else 1))]
        folder = sst_folder()
        command += ["--data", str(folder)] if folder else ["--synthetic"]
        max_train = 1000 if args.quick and not args.max_train else args.max_train
        if max_train:
            command += ["--max-train", str(max_train)]
        if ranks > 1:
            command = [mpiexec(), "-n", str(ranks), *command, "--distributed"]
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            raise RuntimeError(f"{ranks} ranks failed: {done.stderr.strip()[-500:]}")
        record = json.loads(metrics.read_text().splitlines()[-1])
    record |= {"ranks": ranks, "mode": mode, "threads": args.threads, "wall_seconds":
               time.perf_counter() - began, "data": "SST" if folder else "synthetic"}
    record["trees"] = round(record["trees_per_s"] * record["train_seconds"])
    batch = BATCH * (ranks if mode == "per_rank" else 1)
    record["steps"] = -(-record["trees"] // batch)
    per_step = {k: 1e3 * record[f"{k}_seconds"] / record["steps"]
                for k in ("compute", "allreduce", "optimizer")}
    print(f"  {mode}: {ranks} rank(s) x {args.threads} thread(s): "
          f"{record['trees_per_s']:.0f} trees/s, ms/step " +
          " ".join(f"{k} {v:.2f}" for k, v in per_step.items()) +
          f", dev root fine {fmt(record['root_fine'], 4)} "
          f"binary {fmt(record['root_binary'], 4)}",
          flush=True)
    return record


def probe(out: str) -> int:
    """Inside mpiexec: seconds of an in-place Allreduce per size (the
    slowest rank's fastest repeat)."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rows = []
    for floats in PROBE_FLOATS:
        buffer = np.ones(floats, np.float32)
        times = []
        for _ in range(PROBE_REPEATS):
            comm.Barrier()
            began = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buffer)
            times.append(time.perf_counter() - began)
        # the fastest of the repeats: the collective's own cost, not the
        # moments a rank waited for the scheduler on a shared host
        slowest = comm.reduce(min(times), op=MPI.MAX, root=0)
        rows.append({"ranks": comm.Get_size(), "bytes": 4 * floats, "seconds": slowest})
    if comm.Get_rank() == 0:
        Path(out).write_text(json.dumps(rows))
    return 0


def probe_rows(ranks: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        command = [mpiexec(), "-n", str(ranks), sys.executable,
                   str(ROOT / "bench" / "run.py"), "distributed", "--probe", str(out)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            raise RuntimeError(f"probe on {ranks} ranks: {done.stderr.strip()[-500:]}")
        return json.loads(out.read_text())


def dense_floats() -> int:
    """TreeLSTM h=150's parameters other than the embedding table."""
    import numpy as np

    from recir.models import tree_lstm

    shapes = tree_lstm.init_params(np.random.default_rng(0), hidden=HIDDEN,
                                   embed=HIDDEN, vocab=1)
    return sum(v.size for k, v in shapes.items() if k != "emb")


def batch_stats(count: int) -> dict[int, dict[str, float]]:
    """Per batch of the epoch's order, split 1, 2, 4, 8 ways: the largest
    share's nodes over the mean (`imbalance`) and the shares' embedding rows
    summed (`rows`); per `ways` batches together (one per machine), the rows
    they touch (`union_rows`) and one optimizer step on them (`optimizer_s`)."""
    import numpy as np

    from recir.data import load_sst, make_treebank
    from recir.train.distributed import split_by_nodes

    folder = sst_folder()
    # at least 8 batches: a short epoch (--max-train) still fills every grouping
    trees = (load_sst(folder / "train.txt")[0] if folder
             else make_treebank(3000, vocab_size=1000, seed=0))[:max(count, 8 * BATCH)]
    vocab = 1 + max(int(t.word.max()) for t in trees)
    order = np.random.default_rng(0).permutation(len(trees))
    batches = [[trees[i] for i in order[f:f + BATCH]]
               for f in range(0, len(trees), BATCH)]

    def words(group: list[Any]) -> Any:
        ids = np.concatenate([t.word for t in group])
        return np.unique(ids[ids >= 0])

    stats = {}
    for ways in (1, 2, 4, 8):
        imbalance, rows, union = [], [], []
        for batch in batches:
            shares = [[batch[i] for i in s] for s in
                      split_by_nodes([t.num_nodes for t in batch], ways)]
            loads = [sum(t.num_nodes for t in share) for share in shares]
            imbalance.append(max(loads) * ways / sum(loads))
            rows.append(sum(len(words(share)) for share in shares if share))
        for first in range(0, len(batches) - ways + 1, ways):
            group = [t for batch in batches[first:first + ways] for t in batch]
            union.append(len(words(group)))
        stats[ways] = {"imbalance": float(np.mean(imbalance)),
                       "rows": float(np.mean(rows)),
                       "union_rows": float(np.mean(union)),
                       "optimizer_s": optimizer_seconds(vocab, int(np.mean(union)))}
    return stats


def optimizer_seconds(vocab: int, rows: int, repeats: int = 20) -> float:
    """Fastest Adagrad step of TreeLSTM h=150 touching `rows` embedding rows
    (only the ratio between row counts is used)."""
    import numpy as np

    from recir.models import tree_lstm
    from recir.train import Adagrad

    rng = np.random.default_rng(0)
    params = tree_lstm.init_params(rng, hidden=HIDDEN, embed=HIDDEN, vocab=vocab)
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    optimizer, times = Adagrad(params, lr=0.05, weight_decay=1e-4), []
    for _ in range(repeats + 2):
        touched = {"emb": np.sort(rng.choice(vocab, rows, replace=False))}
        for name, grad in grads.items():
            grad[touched["emb"] if name == "emb" else slice(None)] = 1e-3
        began = time.perf_counter()
        optimizer.step(grads, 1 / BATCH, touched, zero=True)
        times.append(time.perf_counter() - began)
    return min(times[2:])


def rank_counts(text: str | None) -> list[int]:
    if text:
        return [int(r) for r in text.split(",")]
    cores = min(os.cpu_count() or 1, 16)
    return [1] + [r for r in (2, 4, 8, 16) if r <= max(cores, 2)]


def run(args: argparse.Namespace) -> int:
    if args.probe:
        return probe(args.probe)
    ranks = rank_counts(args.ranks)
    print(f"TreeLSTM h=150, batch 25, {args.threads} thread(s) per rank; ranks {ranks}",
          flush=True)
    rows = [train_row(r, args, "split") for r in ranks]
    rows += [train_row(r, args, "per_rank") for r in ranks if r > 1]
    base = rows[0]
    for row in rows:
        row["speedup"] = row["trees_per_s"] / base["trees_per_s"]
        steps = max(row["steps"], 1)
        for phase in ("compute", "allreduce", "optimizer"):
            row[f"{phase}_ms_per_step"] = 1e3 * row[f"{phase}_seconds"] / steps
    probes = [p for r in ranks if r > 1 for p in probe_rows(max(r, 2))]
    probes = probes or probe_rows(2)
    model, stats = fit(probes), batch_stats(base["trees"])
    report: dict[str, Any] = {
        "machine": machine_info(), "rows": rows, "probes": probes,
        "allreduce_model": model, "batch_stats": stats,
        "predictions": predictions(model, base, stats, dense_floats(), HIDDEN)}
    show(report)
    if args.json:
        write_json(args.json, report)
        print(f"\nwrote {args.json}")
    return 0


def show(report: dict[str, Any]) -> None:
    rows = report["rows"]
    print_table("one epoch, per rank (rank 0's split; allreduce includes waiting for "
                "the slowest rank)",
                ["mode", "ranks x threads", "trees/s", "speedup", "compute ms/step",
                 "allreduce ms/step", "optimizer ms/step", "KB reduced/step",
                 "dev root fine", "dev root binary"],
                [[r["mode"], f"{r['ranks']} x {r['threads']}", fmt(r["trees_per_s"]),
                  fmt(r["speedup"], 2), fmt(r["compute_ms_per_step"], 2),
                  fmt(r["allreduce_ms_per_step"], 2),
                  fmt(r["optimizer_ms_per_step"], 2),
                  fmt(r["bytes_reduced_per_step"] / 1e3), fmt(r["root_fine"], 4),
                  fmt(r["root_binary"], 4)] for r in rows])
    m = report["allreduce_model"]
    print(f"\nallreduce model (shared memory here): {1e6 * m['latency_s']:.1f} us per "
          f"round, {m['bytes_per_s'] / 1e9:.2f} GB/s per byte moved "
          f"(fit over {m['points']} points, max error {100 * m['max_rel_error']:.0f}%)")
    print_table("predicted speedup over one machine (Ethernet; transfer and local "
                "sums serial / overlapped)",
                ["case", "machines", "10 Gb/s", "25 Gb/s", "paper"],
                [[p["case"], str(p["machines"]),
                  *(f"{p[f'speedup_{g}gbps']:.2f} / "
                    f"{p[f'speedup_{g}gbps_overlapped']:.2f}" for g in (10, 25)),
                  fmt(p["paper"], 2)]
                 for p in report["predictions"]])
