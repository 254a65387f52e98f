"""Train a recursive sentiment model on the Stanford Sentiment Treebank.

Reads SST's train and dev splits from --data (default: $RECIR_SST_DIR or the
checkout's ../shared/data/sst), or trains on a synthetic treebank whose
labels follow word polarities when SST is absent. Compiles the model to
native code, trains with minibatches, and reports dev accuracy (fine-grained
and binary, at the root; every node with --all-nodes), trees/s and compile
time after each epoch.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from recir.data import load_sst, make_treebank
from recir.models import rntn, tree_lstm, tree_rnn
from recir.train import OPTIMIZERS, TrainConfig, train

MODELS = {"tree_lstm": tree_lstm, "tree_rnn": tree_rnn, "rntn": rntn}
SYNTHETIC_VOCAB = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m recir.examples.sentiment", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="folder with SST train.txt and dev.txt")
    p.add_argument("--model", choices=sorted(MODELS), default="tree_lstm")
    p.add_argument("--epochs", type=int, default=3,
                   help="3 is the default recipe: SST dev accuracy peaks there")
    p.add_argument("--batch-size", type=int, default=25)
    p.add_argument("--hidden", type=int, default=150)
    p.add_argument("--embed", type=int, default=150, help="embedding size (TreeLSTM)")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adagrad")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads: the trees of a minibatch run side by side "
                        "(default: all cores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-train", type=int, help="use only the first N training trees")
    p.add_argument("--checkpoint", type=Path, help="save params and optimizer state here "
                   "(.npz) after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--metrics", type=Path, help="append per-epoch metrics (JSON lines)")
    p.add_argument("--all-nodes", action="store_true", help="also score every node")
    p.add_argument("--engine", choices=["native", "interpret"], default="native")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def load_data(folder: Path | None, seed: int):
    """(train, dev, vocabulary size, description)."""
    if folder is None:
        env = os.environ.get("RECIR_SST_DIR")
        folder = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared/data/sst"
    if (folder / "train.txt").is_file() and (folder / "dev.txt").is_file():
        train_trees, vocab = load_sst(folder / "train.txt")
        dev_trees, _ = load_sst(folder / "dev.txt", vocab, grow_vocab=False)
        return train_trees, dev_trees, len(vocab), f"SST ({folder})"
    trees = make_treebank(3000, vocab_size=SYNTHETIC_VOCAB, seed=seed)
    return trees[:2500], trees[2500:], SYNTHETIC_VOCAB, "synthetic treebank (SST not found)"


def init_params(module, args: argparse.Namespace, vocab: int) -> dict[str, np.ndarray]:
    """The model's shapes; N(0, 1/fan_in) matrices, zero biases, small embeddings."""
    rng = np.random.default_rng(args.seed)
    sizes = {"hidden": args.hidden, "vocab": vocab, "classes": 5}
    if module is tree_lstm:
        sizes["embed"] = args.embed
    params = module.init_params(rng, **sizes)
    for name, value in params.items():
        if name == "emb":
            params[name] = rng.uniform(-0.1, 0.1, value.shape).astype(np.float32)
        elif value.ndim == 1:
            params[name] = np.zeros_like(value)
        else:
            scale = 1 / np.sqrt(value.shape[-1])
            params[name] = (scale * rng.standard_normal(value.shape)).astype(np.float32)
    return params


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    train_trees, dev_trees, vocab, source = load_data(args.data, args.seed)
    if args.max_train:
        train_trees = train_trees[:args.max_train]
    print(f"data: {source}: {len(train_trees)} train, {len(dev_trees)} dev trees, "
          f"vocabulary {vocab}")
    module = MODELS[args.model]
    params = init_params(module, args, vocab)
    model = module.trace_model(params)
    optimizer = OPTIMIZERS[args.optimizer](model.params, lr=args.lr,
                                           weight_decay=args.weight_decay)
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, seed=args.seed,
                         engine=args.engine, checkpoint=args.checkpoint, resume=args.resume,
                         metrics=args.metrics, all_nodes=args.all_nodes, threads=args.threads,
                         progress=not args.no_progress)
    print(f"model: {args.model}, hidden {args.hidden}, {args.optimizer} lr {args.lr}, "
          f"batch {args.batch_size}, engine {args.engine}, {args.threads} threads")
    start = time.perf_counter()
    for record in train(model, optimizer, train_trees, dev_trees, config):
        extra = "".join(f", {k} {record[k]:.3f}" for k in ("all_fine", "all_binary")
                        if k in record)
        print(f"epoch {record['epoch']}: loss {record['loss']:.3f}, "
              f"{record['trees_per_s']:.0f} trees/s, dev root fine {record['root_fine']:.3f}, "
              f"root binary {record['root_binary']:.3f}{extra}", flush=True)
    if config.history:
        last = config.history[-1]
        print(f"done in {time.perf_counter() - start:.1f} s; compile "
              f"{last['compile_seconds']:.2f} s; dev root binary accuracy "
              f"{last['root_binary']:.3f}, fine {last['root_fine']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
