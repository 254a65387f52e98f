"""Train a recursive sentiment model on the Stanford Sentiment Treebank.

Reads SST's train and dev splits from --data (default: $RECIR_SST_DIR, else
the download folder of `python -m recir.data.sst fetch`, else the checkout's
../shared/data/sst), or trains on a synthetic treebank whose labels follow
word polarities when SST is absent (or with --synthetic); --fetch downloads
SST first when it is missing. The vocabulary is the training split's; unseen
words map to <unk>. Compiles the model to native code, trains with
minibatches, and reports dev accuracy (fine-grained and binary, at the root
and over all nodes), trees/s and compile time after each epoch. With --test,
the epoch with the best dev root accuracy is scored once on the test split.

`python -m recir.examples.sentiment predict --model-file PATH [FILE|-]`
labels trees with a saved model (see `recir.examples.sentiment_predict`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from recir.data import load_sst, make_treebank, sst_folder
from recir.data.download import DownloadError, download
from recir.data.embeddings import EmbeddingError, read_embeddings
from recir.data.sst import TreeParseError, Vocabulary
from recir.diagnostics import RecirError
from recir.models import rntn, tree_lstm, tree_rnn
from recir.train import (
    OPTIMIZERS,
    CheckpointError,
    TrainConfig,
    TrainConfigError,
    train,
)
from recir.train.distributed import abort_job, join_job
from recir.train.loop import check_writable
from recir.train.model_file import describe, save_model
from recir.train.optimizers import FLOAT32_MAX

MODELS = {"tree_lstm": tree_lstm, "tree_rnn": tree_rnn, "rntn": rntn}
# Measured over one SST epoch (TreeLSTM h=150, batch 25): Adam at 1e-3 lags
# far behind, SGD above 0.1 diverges (the loss sums over all nodes).
LEARNING_RATES = {"adagrad": 0.05, "adam": 0.01, "sgd": 0.1}
SYNTHETIC_VOCAB = 1000
SYNTHETIC_SPLITS = (2500, 500, 500)  # train, dev, test trees
DEFAULT_SIZE = 150
# RNTN's tensor V holds 4 d^3 weights: d = 25 as in Socher et al. 2013 (at 150
# it is 54 MB, read from memory at every node)
MODEL_SIZES = {"rntn": 25}


class UsageError(ValueError):
    """A command-line option that cannot work; one line."""


def argument_parser() -> argparse.ArgumentParser:
    """The training job's options (`predict` has its own)."""
    p = argparse.ArgumentParser(prog="python -m recir.examples.sentiment",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--data", type=Path, metavar="DIR",
        help="folder with SST train.txt and dev.txt (and test.txt for --test; "
        "default: $RECIR_SST_DIR, else the fetch folder, else ../shared/data/sst, "
        "else synthetic)")
    add("--synthetic", action="store_true",
        help="train on the synthetic treebank even when SST is present")
    add("--fetch", action="store_true",
        help="download SST first when it is not found (else: synthetic trees)")
    add("--test", action="store_true",
        help="score the best-dev epoch's parameters on the test split at the end")
    add("--model", choices=sorted(MODELS), default="tree_lstm",
        help="the cell (default %(default)s)")
    add("--epochs", type=int, default=3, metavar="N",
        help="passes over the training trees (default %(default)s: SST dev accuracy "
        "levels off there)")
    add("--batch-size", type=int, default=25, metavar="N",
        help="trees per optimizer step, gradients averaged (default %(default)s)")
    add("--hidden", type=int, metavar="N",
        help=f"state size (default {DEFAULT_SIZE}; RNTN {MODEL_SIZES['rntn']}; TreeRNN's and "
        "RNTN's the --embeddings file's)")
    add("--embed", type=int, metavar="N",
        help=f"embedding size (default {DEFAULT_SIZE}, or the --embeddings file's; "
        "TreeLSTM only, the others embed at --hidden)")
    add("--embeddings", type=Path, metavar="FILE",
        help="initial word vectors, GloVe/word2vec text (plain, .gz or .zip); "
        "words not in it start random")
    add("--freeze-embeddings", action="store_true",
        help="keep the word vectors fixed")
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
        help="save params, optimizer state, rng and the model description here "
        "(.npz) after every epoch; a model file for `predict`")
    add("--save-model", type=Path, metavar="PATH",
        help="at the end, save the best-dev epoch's model (.npz) for `predict`")
    add("--resume", action="store_true",
        help="continue from --checkpoint (a fresh start if it does not exist yet)")
    add("--metrics", type=Path, metavar="FILE",
        help="append per-epoch metrics (JSON lines)")
    add("--all-nodes", action=argparse.BooleanOptionalAction, default=True,
        help="also score every node of the dev trees (default: on)")
    add("--engine", choices=["native", "interpret"], default="native",
        help="compiled code (default) or the reference interpreter (slow)")
    add("--batching", choices=["auto", "frontier", "recursive"], default="auto",
        help="how minibatches train and dev trees are scored: the frontier's batched "
        "form, the recursive code, or whichever the cost model says is faster (default)")
    add("--no-progress", action="store_true", help="no progress bar")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = argument_parser().parse_args(argv)
    if args.hidden is None and (args.embeddings is None or args.model == "tree_lstm"):
        args.hidden = MODEL_SIZES.get(args.model, DEFAULT_SIZE)  # (else the vectors' width)
    check_args(args)
    return args


def check_args(args: argparse.Namespace) -> None:
    """Every option that cannot work, refused before any work (`UsageError`)."""
    check_numbers(args)
    splits = ("train", "dev", "test") if args.test else ("train", "dev")
    if args.data is not None:
        missing = [s for s in splits if not (args.data / f"{s}.txt").is_file()]
        if missing:
            raise UsageError(f"--data {args.data}: no {', '.join(missing)} split there "
                             f"({' and '.join(s + '.txt' for s in missing)})")
    if args.resume and args.checkpoint is None:
        raise UsageError("--resume needs --checkpoint")
    if args.embeddings is not None and not args.embeddings.is_file():
        raise UsageError(f"--embeddings {args.embeddings}: no such file")
    if args.freeze_embeddings and args.embeddings is None:
        raise UsageError("--freeze-embeddings needs --embeddings")
    paths = [getattr(args, n) for n in ("metrics", "checkpoint", "save_model")]
    if len({p.resolve() for p in paths if p is not None}) < sum(p is not None for p in paths):
        raise UsageError("--metrics, --checkpoint and --save-model must name different files")
    for name in ("metrics", "checkpoint", "save_model"):
        if getattr(args, name) is not None:
            try:
                check_writable(getattr(args, name), f"--{name.replace('_', '-')}",
                               appended=name == "metrics")
            except TrainConfigError as e:
                raise UsageError(str(e)) from None


def check_numbers(args: argparse.Namespace) -> None:
    """Counts at least 1, a seed and rates 0 or more."""
    for name in ("epochs", "batch_size", "hidden", "embed", "max_train", "threads"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.seed < 0:  # (numpy's seeds are non-negative)
        raise UsageError(f"--seed must be 0 or more, got {args.seed}")
    for name in ("lr", "weight_decay"):
        value = getattr(args, name)
        if value is not None and not 0 <= value <= FLOAT32_MAX:  # (NaN fails both)
            raise UsageError(f"--{name.replace('_', '-')} must be a number >= 0 within "
                             f"float32's range, got {value}")


def find_sst(args: argparse.Namespace) -> Path | None:
    """The SST folder to read, downloading it first with --fetch."""
    splits = ("train", "dev", "test") if args.test else ("train", "dev")
    if args.synthetic:
        return None
    if args.data is not None or (found := sst_folder(*splits)) is not None:
        return args.data or found
    if args.test and not args.fetch and (partial := sst_folder("train", "dev")) is not None:
        raise UsageError(f"--test: {partial} has no test.txt; `python -m recir.data.sst "
                         f"fetch` downloads all three splits")
    if args.fetch:
        try:
            return download(timeout=15)  # its own bar: a download is worth watching
        except DownloadError as e:
            print(f"SST not downloaded ({e}); get it with `python -m recir.data.sst "
                  f"fetch`; training on the synthetic treebank")
    return None


def load_data(folder: Path | None, synthetic: bool, seed: int, test: bool = False):
    """(train, dev, test, vocabulary or None, vocabulary size, description)."""
    if folder is not None and not synthetic:
        train_trees, vocab = load_sst(folder / "train.txt")
        dev_trees, _ = load_sst(folder / "dev.txt", vocab, grow_vocab=False)
        test_trees = (load_sst(folder / "test.txt", vocab, grow_vocab=False)[0]
                      if test else [])
        for name, trees in (("train", train_trees), ("dev", dev_trees),
                            ("test", test_trees if test else [None])):
            if not trees:
                raise UsageError(f"{folder / (name + '.txt')}: no trees in the file")
        return train_trees, dev_trees, test_trees, vocab, len(vocab), f"SST ({folder})"
    n_train, n_dev, n_test = SYNTHETIC_SPLITS
    trees = make_treebank(n_train + n_dev, vocab_size=SYNTHETIC_VOCAB, seed=seed)
    # drawn apart, so that train and dev are the same trees with or without --test
    test_trees = (make_treebank(n_test, vocab_size=SYNTHETIC_VOCAB, seed=seed + 1)
                  if test else [])
    why = "--synthetic" if synthetic else "SST not found"
    return (trees[:n_train], trees[n_train:], test_trees, None, SYNTHETIC_VOCAB,
            f"synthetic treebank ({why})")


def model_sizes(module, args: argparse.Namespace, vocab: int) -> dict[str, int]:
    sizes = {"hidden": args.hidden, "vocab": vocab, "classes": 5}
    if module is tree_lstm:
        sizes["embed"] = args.embed or DEFAULT_SIZE
    return sizes


def pretrained(args: argparse.Namespace, vocab: Vocabulary | None
               ) -> tuple[np.ndarray, np.ndarray] | None:
    """The --embeddings rows for the vocabulary; sets --embed from the file."""
    if args.embeddings is None:
        return None
    if vocab is None:
        raise UsageError("--embeddings needs SST: the synthetic treebank has no words")
    vectors, found = read_embeddings(args.embeddings, vocab)
    dim = vectors.shape[1]
    size = "embed" if args.model == "tree_lstm" else "hidden"
    given = getattr(args, size)
    if given is not None and given != dim:
        raise UsageError(f"--embeddings {args.embeddings} has {dim}-d vectors but "
                         f"--{size} is {given} ({args.model} embeds at --{size})")
    setattr(args, size, dim)
    print(f"embeddings: {int(found.sum())} of {len(vocab)} words from "
          f"{args.embeddings} ({dim}-d){', frozen' if args.freeze_embeddings else ''}")
    return vectors, found


def check_memory(module, args: argparse.Namespace, vocab: int) -> None:
    """Refuse sizes whose training state cannot fit in this machine's memory,
    before allocating any of it: float32 parameters, gradients and optimizer
    slots (4 bytes each), and the float64 draw and its scaled copy of the
    largest parameter while it is initialised (16 bytes an element)."""
    described = model_sizes(module, args, vocab)
    sizes = [math.prod(s) for s in module.param_shapes(**described).values()]
    arrays = 2 + len(OPTIMIZERS[args.optimizer].SLOTS)
    needed = 4 * arrays * sum(sizes) + 16 * max(sizes)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory:
        shown = ", ".join(f"{k} {v}" for k, v in described.items())
        raise UsageError(f"a {args.model} of {shown} has {sum(sizes):,} parameters: "
                         f"training needs about {needed / 2**30:.0f} GiB, more than this "
                         f"machine's {memory / 2**30:.0f} GiB of memory")


def init_params(module, args: argparse.Namespace, vocab: int,
                vectors: tuple[np.ndarray, np.ndarray] | None = None
                ) -> dict[str, np.ndarray]:
    """The model's shapes; N(0, 1/fan_in) weights, zero biases, small embeddings
    (or the pretrained `vectors` where they have a word).

    The models' own `init_params` (std 0.5) saturates the cells. The RNTN
    tensor's fan-in is (2h)^2: its bilinear form sums that many products.
    """
    rng = np.random.default_rng(args.seed)
    params = module.init_params(rng, **model_sizes(module, args, vocab))
    for name, value in params.items():
        if name == "emb":
            params[name] = rng.uniform(-0.1, 0.1, value.shape).astype(np.float32)
        elif value.ndim == 1:
            params[name] = np.zeros_like(value)
        else:
            scale = 1 / np.sqrt(np.prod(value.shape[1:]))
            params[name] = (scale * rng.standard_normal(value.shape)).astype(np.float32)
    if vectors is not None:
        rows, found = vectors
        params["emb"][found] = rows[found]
    return params


def accuracies(record: dict) -> str:
    text = f"root fine {score(record['root_fine'])} binary {score(record['root_binary'])}"
    if "all_fine" in record:
        text += (f", all nodes fine {score(record['all_fine'])} "
                 f"binary {score(record['all_binary'])}")
    return text


def score(accuracy: float | None) -> str:
    """None: nothing scored (no known label; binary: no polar one)."""
    return "n/a" if accuracy is None else f"{accuracy:.3f}"


def epoch_line(record: dict, epochs: int) -> str:
    return (f"epoch {record['epoch']}/{epochs}: loss {record['loss']:.3f}, "
            f"{record['trees_per_s']:.0f} trees/s ({record['train_seconds']:.1f} s); "
            f"dev {accuracies(record)} ({record['eval_seconds']:.1f} s)")


def test_line(record: dict) -> str:
    picked = (f"epoch {record['picked_epoch']}, dev root fine "
              f"{score(record['dev_root_fine'])}" if record["picked_epoch"]
              else "the last parameters")
    return f"test ({picked}): {accuracies(record)} ({record['eval_seconds']:.1f} s)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["predict"]:
            from recir.examples import sentiment_predict

            return sentiment_predict.main(argv[1:])
        return run(parse_args(argv))
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (for the exit's flush)
        return 1
    except (UsageError, TrainConfigError, CheckpointError, EmbeddingError,
            TreeParseError, RecirError) as e:  # (RecirError: a bad tree, a NaN loss)
        text = str(e)
        located = text.startswith("error: ") or " error: " in text
        print(text if located else f"error: {text}", file=sys.stderr)
        code = 2
    except SystemExit as e:  # argparse's (its message printed), or a message of ours
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else 1
    if code and "--distributed" in argv:
        abort_job(code)  # (the other ranks would wait for this one for ever)
    return code


def run(args: argparse.Namespace) -> int:
    try:
        cores, rank = join_job(args.distributed)
    except RuntimeError as error:  # (no MPI)
        raise UsageError(f"--distributed: {error}") from None
    args.threads = args.threads or cores
    train_trees, dev_trees, test_trees, vocab, vocab_size, source = load_data(
        find_sst(args), args.synthetic, args.seed, args.test)
    if args.max_train:
        train_trees = train_trees[:args.max_train]
    print(f"data: {source}: {len(train_trees)} train, {len(dev_trees)} dev"
          f"{f', {len(test_trees)} test' if args.test else ''} trees, "
          f"vocabulary {vocab_size}")
    module = MODELS[args.model]
    vectors = pretrained(args, vocab)  # (it sets the embedding width the check counts)
    check_memory(module, args, vocab_size)
    params = init_params(module, args, vocab_size, vectors)
    model = module.trace_model(params)
    lr = LEARNING_RATES[args.optimizer] if args.lr is None else args.lr
    optimizer = OPTIMIZERS[args.optimizer](model.params, lr=lr,
                                           weight_decay=args.weight_decay)
    if args.freeze_embeddings:
        optimizer.frozen = frozenset({"emb"})
    info = describe(args.model, model_sizes(module, args, vocab_size), vocab)
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size,
                         seed=args.seed, engine=args.engine, checkpoint=args.checkpoint,
                         resume=args.resume, metrics=args.metrics,
                         all_nodes=args.all_nodes, threads=args.threads,
                         batching=args.batching,
                         progress=not args.no_progress, info=info,
                         distributed=args.distributed)
    print(f"model: {args.model}, hidden {args.hidden}, {args.optimizer} lr {lr}, "
          f"batch {args.batch_size} ({args.batching}), engine {args.engine}, "
          f"{args.threads} thread{'s' * (args.threads != 1)}")
    start = time.perf_counter()
    config.on_epoch = lambda record: print(epoch_line(record, args.epochs), flush=True)
    history = train(model, optimizer, train_trees, dev_trees, config, test_trees)
    if config.test_scores is not None:
        print(test_line(config.test_scores))
    if args.save_model and rank == 0:  # (rank 0 alone knows the best epoch)
        save_model(args.save_model, config.best.params or model.params, info)
        print(f"model saved to {args.save_model} (epoch "
              f"{config.best.epoch or 'last'})")
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
