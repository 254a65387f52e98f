"""The sentiment job's training epoch and dev scoring under each batching mode.

    python bench/sst_job.py [--train N] [--threads T ...] [--batching MODE ...]

`recir.train.train` on SST's first N training trees (TreeLSTM h = embed =
150, Adagrad, minibatches of 25, the sentiment example's initialisation),
one epoch per mode and thread count, each in a fresh model: the epoch's
trees/s (`TrainConfig.batching` for the gradients) and the dev scoring's
seconds (every node, `NodeScorer` with the same batching). Compiling is
left out (it happens before the epoch; a first run also fills the cache).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import sst_folder_or_complain  # noqa: E402
from recir.data import load_sst  # noqa: E402
from recir.examples.sentiment import init_params, parse_args  # noqa: E402
from recir.models import tree_lstm  # noqa: E402
from recir.train import OPTIMIZERS, NodeScorer, TrainConfig, evaluate, loop, train  # noqa: E402

MODES = ("recursive", "frontier", "auto")


def one_epoch(trees, dev, vocab: int, batching: str, threads: int) -> tuple[float, float]:
    """(training trees/s, dev scoring seconds) of a fresh model's epoch."""
    model = tree_lstm.trace_model(init_params(tree_lstm, parse_args(["--synthetic"]), vocab))
    scorer = NodeScorer(model, threads, batching=batching)
    scorer.prepare(dev)
    record = train(model, OPTIMIZERS["adagrad"](model.params, lr=0.05), trees, [],
                   TrainConfig(epochs=1, threads=threads, batching=batching, progress=False))
    scored = loop.timed(evaluate, scorer, dev, True)
    return record[-1]["trees_per_s"], scored["eval_seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=2000, help="training trees")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batching", nargs="+", default=list(MODES), choices=MODES)
    args = parser.parse_args()
    folder = sst_folder_or_complain()
    if folder is None:
        return 1
    trees, vocab = load_sst(folder / "train.txt")
    dev = load_sst(folder / "dev.txt", vocab, grow_vocab=False)[0]
    trees = trees[:args.train]
    print(f"{len(trees)} SST training trees, {len(dev)} dev trees (every node scored)")
    print(f"{'threads':>7}  {'batching':>9}  {'train trees/s':>13}  {'dev scoring s':>13}")
    for threads in args.threads:
        for mode in args.batching:
            rate, seconds = one_epoch(trees, dev, len(vocab), mode, threads)
            print(f"{threads:>7}  {mode:>9}  {rate:>13.0f}  {seconds:>13.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
