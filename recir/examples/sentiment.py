"""Train a recursive sentiment model on the Stanford Sentiment Treebank.

Reads SST's train and dev splits from --data (default: $RECIR_SST_DIR or the
checkout's ../shared/data/sst), or trains on a synthetic treebank whose
labels follow word polarities when SST is absent (or with --synthetic).
The vocabulary is the training split's; unseen dev words map to <unk>.
Compiles the model to native code, trains with minibatches, and reports dev
accuracy (fine-grained and binary, at the root and over all nodes), trees/s
and compile time after each epoch.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from recir.data import load_sst, make_treebank, sst_path
from recir.models import rntn, tree_lstm, tree_rnn
from recir.train import OPTIMIZERS, TrainConfig, train

MODELS = {"tree_lstm": tree_lstm, "tree_rnn": tree_rnn, "rntn": rntn}
# Measured over one SST epoch (TreeLSTM h=150, batch 25): Adam at 1e-3 lags
# far behind, SGD above 0.1 diverges (the loss sums over all nodes).
LEARNING_RATES = {"adagrad": 0.05, "adam": 0.01, "sgd": 0.1}
SYNTHETIC_VOCAB = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m recir.examples.sentiment",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--data", type=Path, metavar="DIR",
        help="folder with SST train.txt and dev.txt (default: $RECIR_SST_DIR, else "
        "../shared/data/sst, else synthetic)")
    add("--synthetic", action="store_true",
        help="train on the synthetic treebank even when SST is present")
    add("--model", choices=sorted(MODELS), default="tree_lstm",
        help="the cell (default %(default)s)")
    add("--epochs", type=int, default=3, metavar="N",
        help="passes over the training trees (default %(default)s: SST dev accuracy "
        "levels off there)")
    add("--batch-size", type=int, default=25, metavar="N",
        help="trees per optimizer step, gradients averaged (default %(default)s)")
    add("--hidden", type=int, default=150, metavar="N",
        help="state size (default %(default)s)")
    add("--embed", type=int, default=150, metavar="N",
        help="embedding size (default %(default)s; TreeLSTM only, the others embed "
        "at --hidden)")
    add("--optimizer", choices=sorted(OPTIMIZERS), default="adagrad",
        help="update rule (default %(default)s, as Tai et al. 2015)")
    add("--lr", type=float,
        help="learning rate (default: adagrad 0.05, adam 0.01, sgd 0.1)")
    add("--weight-decay", type=float, default=1e-4, metavar="L2",
        help="L2 penalty on the parameters a step touches (default %(default)s)")
    add("--threads", type=int, metavar="N",
        help="the trees of a minibatch run side by side (default: all cores; with "
        "--distributed, per rank: the cores over the ranks on this host)")
    add("--distributed", action="store_true",
        help="data-parallel over MPI ranks: mpiexec -n N python -m "
        "recir.examples.sentiment --distributed (see docs/distributed.md)")
    add("--seed", type=int, default=0,
        help="initialisation and shuffling (default %(default)s)")
    add("--max-train", type=int, metavar="N",
        help="use only the first N training trees")
    add("--checkpoint", type=Path, metavar="PATH",
        help="save params, optimizer state and rng here (.npz) after every epoch")
    add("--resume", action="store_true",
        help="continue from --checkpoint (a fresh start if it does not exist yet)")
    add("--metrics", type=Path, metavar="FILE",
        help="append per-epoch metrics (JSON lines)")
    add("--all-nodes", action=argparse.BooleanOptionalAction, default=True,
        help="also score every node of the dev trees, one forward per node "
        "(default: on)")
    add("--engine", choices=["native", "interpret"], default="native",
        help="compiled code (default) or the reference interpreter (slow)")
    add("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.data is not None and not all((args.data / f).is_file()
                                         for f in ("train.txt", "dev.txt")):
        p.error(f"--data {args.data}: no train.txt and dev.txt there")
    if args.resume and args.checkpoint is None:
        p.error("--resume needs --checkpoint")
    return args


def load_data(folder: Path | None, synthetic: bool, seed: int):
    """(train, dev, vocabulary size, description)."""
    if folder is None and not synthetic and sst_path("train") and sst_path("dev"):
        folder = sst_path("train").parent  # type: ignore[union-attr]
    if folder is not None and not synthetic:
        train_trees, vocab = load_sst(folder / "train.txt")
        dev_trees, _ = load_sst(folder / "dev.txt", vocab, grow_vocab=False)
        return train_trees, dev_trees, len(vocab), f"SST ({folder})"
    trees = make_treebank(3000, vocab_size=SYNTHETIC_VOCAB, seed=seed)
    why = "--synthetic" if synthetic else "SST not found"
    return trees[:2500], trees[2500:], SYNTHETIC_VOCAB, f"synthetic treebank ({why})"


def init_params(module, args: argparse.Namespace, vocab: int) -> dict[str, np.ndarray]:
    """The model's shapes; N(0, 1/fan_in) weights, zero biases, small embeddings.

    The models' own `init_params` (std 0.5) saturates the cells. The RNTN
    tensor's fan-in is (2h)^2: its bilinear form sums that many products.
    """
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
            scale = 1 / np.sqrt(np.prod(value.shape[1:]))
            params[name] = (scale * rng.standard_normal(value.shape)).astype(np.float32)
    return params


def distributed_setup(distributed: bool) -> int:
    """Threads per rank (the host's cores shared by its ranks); with
    --distributed, only rank 0 prints."""
    cores = os.cpu_count() or 1
    if not distributed:
        return cores
    from recir.train.distributed import quiet_unless_root, world

    try:
        rank, ranks, here, where = world()
    except RuntimeError as error:
        raise SystemExit(f"error: --distributed: {error}") from None
    quiet_unless_root(rank)
    print(f"distributed: {ranks} ranks ({', '.join(where)}), {here} on this host")
    return max(1, cores // here)


def accuracies(record: dict) -> str:
    text = f"root fine {record['root_fine']:.3f} binary {record['root_binary']:.3f}"
    if "all_fine" in record:
        text += (f", all nodes fine {record['all_fine']:.3f} "
                 f"binary {record['all_binary']:.3f}")
    return text


def epoch_line(record: dict, epochs: int) -> str:
    return (f"epoch {record['epoch']}/{epochs}: loss {record['loss']:.3f}, "
            f"{record['trees_per_s']:.0f} trees/s ({record['train_seconds']:.1f} s); "
            f"dev {accuracies(record)}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cores = distributed_setup(args.distributed)
    args.threads = args.threads or cores
    train_trees, dev_trees, vocab, source = load_data(args.data, args.synthetic,
                                                      args.seed)
    if args.max_train:
        train_trees = train_trees[:args.max_train]
    print(f"data: {source}: {len(train_trees)} train, {len(dev_trees)} dev trees, "
          f"vocabulary {vocab}")
    module = MODELS[args.model]
    params = init_params(module, args, vocab)
    model = module.trace_model(params)
    lr = LEARNING_RATES[args.optimizer] if args.lr is None else args.lr
    optimizer = OPTIMIZERS[args.optimizer](model.params, lr=lr,
                                           weight_decay=args.weight_decay)
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size,
                         seed=args.seed, engine=args.engine, checkpoint=args.checkpoint,
                         resume=args.resume, metrics=args.metrics,
                         all_nodes=args.all_nodes, threads=args.threads,
                         progress=not args.no_progress, distributed=args.distributed)
    print(f"model: {args.model}, hidden {args.hidden}, {args.optimizer} lr {lr}, "
          f"batch {args.batch_size}, engine {args.engine}, {args.threads} threads")
    start = time.perf_counter()
    config.on_epoch = lambda record: print(epoch_line(record, args.epochs), flush=True)
    history = train(model, optimizer, train_trees, dev_trees, config)
    if not history:
        print("nothing to train: the checkpoint has all epochs")
        return 0
    last = history[-1]
    seconds = sum(r["train_seconds"] for r in history)
    trees_s = sum(r["trees_per_s"] * r["train_seconds"] for r in history) / seconds
    print(f"done in {time.perf_counter() - start:.1f} s: compile "
          f"{last['compile_seconds']:.2f} s, {trees_s:.0f} trees/s; dev accuracy "
          f"after epoch {last['epoch']}: {accuracies(last)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
