"""`run.py sparse-step`: the optimizer step, NumPy against the fused kernel.

TreeLSTM h=150's parameters with the embedding table of SST's vocabulary
($RECIR_SST_DIR; 18,280 synthetic words without SST). A step touches the
embedding rows of the words in 1, 2, 4 and 8 minibatches of 25 trees (the
union a data-parallel step over 1..8 ranks updates) and all of the other
parameters. Times the fastest of `--repeats` steps, for the whole step and
for the embedding alone, with the NumPy step (`FUSED = None`, the code every
optimizer ran before `recir.train.fused_step`) and the fused one, and checks
that both leave the same bits.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import fmt, machine_info, print_table, write_json

BATCH, HIDDEN, EMBED = 25, 150, 300


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--repeats", type=int, default=30, help="steps timed per case")


def sst_batches(count: int) -> tuple[list[Any], int]:
    """The first `count` batches of SST train in a seeded order, and the vocabulary."""
    import numpy as np

    from recir.data import load_sst, make_treebank, sst_path

    train = sst_path("train")
    trees = load_sst(train)[0] if train else make_treebank(count * BATCH, vocab_size=18280,
                                                          seed=0)
    vocab = 1 + max(int(t.word.max()) for t in trees)
    order = np.random.default_rng(0).permutation(len(trees))
    return [[trees[i] for i in order[f:f + BATCH]]
            for f in range(0, count * BATCH, BATCH)], vocab


def time_step(cls: type, fused: bool, rows: Any, vocab: int, names: set[str] | None,
              repeats: int) -> tuple[float, dict[str, Any]]:
    """Fastest step of `cls` over `rows` of the table (and every other
    parameter unless `names` limits them); the parameters after all steps."""
    import numpy as np

    from recir.models import tree_lstm

    params = tree_lstm.init_params(np.random.default_rng(0), hidden=HIDDEN, embed=EMBED,
                                   vocab=vocab)
    params = {k: v for k, v in params.items() if names is None or k in names}
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    optimizer = type("Timed", (cls,), {"FUSED": cls.FUSED if fused else None})(
        params, lr=0.05, weight_decay=1e-4)
    noise, times = np.random.default_rng(1), []
    for _ in range(repeats + 2):
        for name, grad in grads.items():
            where = rows if name == "emb" else slice(None)
            grad[where] = noise.standard_normal(grad[where].shape) * 1e-2
        began = time.perf_counter()
        optimizer.step(grads, 1 / BATCH, {"emb": rows}, zero=True)
        times.append(time.perf_counter() - began)
    return min(times[2:]), params


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from recir.train import SGD, Adagrad

    batches, vocab = sst_batches(8)
    print(f"TreeLSTM h={HIDDEN}, embedding {vocab} x {EMBED}, best of {args.repeats} steps")
    results = []
    for cls in (Adagrad, SGD):
        for count in (1, 2, 4, 8):
            ids = np.concatenate([t.word for batch in batches[:count] for t in batch])
            rows = np.unique(ids[ids >= 0])
            row: dict[str, Any] = {"optimizer": cls.__name__, "batches": count,
                                   "rows": len(rows)}
            for scope, names in (("step", None), ("emb", {"emb"})):
                before, old = time_step(cls, False, rows, vocab, names, args.repeats)
                after, new = time_step(cls, True, rows, vocab, names, args.repeats)
                row[f"{scope}_numpy_ms"], row[f"{scope}_fused_ms"] = 1e3 * before, 1e3 * after
                row["same_bits"] = row.get("same_bits", True) and all(
                    np.array_equal(old[k], new[k]) for k in old)
            results.append(row)
    print_table("optimizer step, ms (NumPy -> fused)",
                ["optimizer", "batches", "rows", "whole step", "speedup",
                 "embedding rows", "speedup", "same bits"],
                [[r["optimizer"], str(r["batches"]), str(r["rows"]),
                  f"{fmt(r['step_numpy_ms'], 3)} -> {fmt(r['step_fused_ms'], 3)}",
                  fmt(r["step_numpy_ms"] / r["step_fused_ms"], 1),
                  f"{fmt(r['emb_numpy_ms'], 3)} -> {fmt(r['emb_fused_ms'], 3)}",
                  fmt(r["emb_numpy_ms"] / r["emb_fused_ms"], 1), str(r["same_bits"])]
                 for r in results])
    if args.json:
        write_json(args.json, {"machine": machine_info(), "vocab": vocab, "rows": results})
        print(f"\nwrote {args.json}")
    return 0 if all(r["same_bits"] for r in results) else 1
