"""The training loop: shuffled minibatches, progress, evaluation, checkpoints.

Gradients of a minibatch are accumulated in place (`into=`) over its trees
and averaged by the optimizer step, so a step allocates nothing per tree.
The options are checked before anything is compiled, and a resume file
before anything is restored (`TrainConfigError`, `CheckpointError`: one line).
With a test split, the parameters of the epoch with the best dev root
accuracy are scored on it once, at the end (the SST protocol).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import recir
from recir.data.trees import TreeStructureError, read_once, validate_trees
from recir.diagnostics import RecirError
from recir.train.checkpoint import Best, load_checkpoint, save_checkpoint
from recir.train.distributed import COLLECTIVE_TIMEOUT_S, LocalReducer, MPIReducer
from recir.train.metrics import NodeScorer, evaluate
from recir.train.optimizers import (
    Optimizer,
    TrainConfigError,
    check_betas,
    check_eps,
    check_rate,
)

__all__ = ["TrainConfig", "TrainConfigError", "load_checkpoint", "save_checkpoint",
           "train"]


@dataclass
class TrainConfig:
    epochs: int = 1
    batch_size: int = 25
    seed: int = 0
    engine: str = "native"
    checkpoint: Path | str | None = None
    resume: bool = False
    metrics: Path | str | None = None
    all_nodes: bool = False  # evaluate every node too
    threads: int = 1  # trees of a minibatch run side by side
    # how a minibatch's gradient and the scoring's batches run (the batching
    # of `recir.value_and_grad` and `NodeScorer`, compiled code only): "auto"
    # takes the frontier's batched form or the recursive code, whichever the
    # cost model says is faster for the batch
    batching: str = "auto"
    progress: bool = True
    on_epoch: Callable[[dict[str, Any]], None] | None = None  # gets each record
    history: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] | None = None  # what the model is: kind, sizes, vocabulary
    best: Best = field(default_factory=Best)  # the best-dev epoch (kept by `train`)
    test_scores: dict[str, Any] | None = None  # set by `train` given a test split
    # Data-parallel over MPI ranks (recir.train.distributed): rank 0 alone
    # evaluates, logs and checkpoints; `threads` are per rank.
    distributed: bool = False
    collective_timeout: float = COLLECTIVE_TIMEOUT_S


def check_config(config: TrainConfig, optimizer: Optimizer) -> None:
    """Refuse nonsense before any work: sizes, rates, writable output paths."""
    for name in ("epochs", "batch_size", "threads"):
        value = getattr(config, name)
        # (NumPy's integers too; a bool is an Integral: `epochs=True` ran one epoch)
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TrainConfigError(f"{name.replace('_', ' ')} must be an integer, "
                                   f"got {value!r}")
        if value < 1:
            raise TrainConfigError(f"{name.replace('_', ' ')} must be at least 1, "
                                   f"got {value}")
    if not isinstance(config.seed, numbers.Integral) or config.seed < 0:  # (NumPy's seeds)
        raise TrainConfigError(f"seed must be an integer, 0 or more, got {config.seed!r}")
    if config.engine not in ("native", "interpret"):
        raise TrainConfigError(f"unknown engine '{config.engine}' (native, interpret)")
    from recir.auto import MODES  # (the frontier's modules: imported when training)

    if config.batching not in MODES:
        raise TrainConfigError(f"unknown batching '{config.batching}' ({', '.join(MODES)})")
    check_rates(config, optimizer)
    for what in ("metrics", "checkpoint"):  # a str as a Path (the loop reads them as paths)
        value = getattr(config, what)
        if value is not None:
            try:
                path = Path(value)
            except TypeError:
                raise TrainConfigError(f"{what} must be a path, got {value!r}") from None
            check_writable(path, what, appended=what == "metrics")
            setattr(config, what, path)


def check_rates(config: TrainConfig, optimizer: Optimizer) -> None:
    """The optimizer's rates and the collective timeout, numbers in range."""
    check_rate("learning rate", getattr(optimizer, "lr", 1.0))  # (as set since)
    check_rate("weight decay", getattr(optimizer, "weight_decay", 0.0))
    check_eps(getattr(optimizer, "eps", 1.0))  # (Adagrad's, Adam's)
    check_betas(getattr(optimizer, "betas", (0.0, 0.0)))  # (Adam's)
    timeout = config.collective_timeout  # (a Timer's: inf overflows it, 0 fires at once)
    if not isinstance(timeout, numbers.Real) or not 0 < timeout <= threading.TIMEOUT_MAX:
        raise TrainConfigError(f"collective timeout must be a number of seconds above 0, "
                               f"got {timeout!r}")


def check_writable(path: Path, what: str, appended: bool = False) -> None:
    """A file we may create or overwrite at `path` (tested, not written); one
    not `appended` (a checkpoint, a model file: renamed over), a regular
    file (renamed over a device such as /dev/null, it would take its place)."""
    if path.is_dir():
        raise TrainConfigError(f"{what} path {path} is a folder")
    if not appended and path.exists() and not path.is_file():
        raise TrainConfigError(f"{what} path {path} is not a regular file")
    folder = path.parent
    if not folder.is_dir():
        raise TrainConfigError(f"{what} path {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (
            path.exists() and not os.access(path, os.W_OK)):
        raise TrainConfigError(f"{what} path {path} is not writable")


def embedding_rows(batch: Sequence[Any], grads: dict[str, np.ndarray]
                   ) -> dict[str, np.ndarray]:
    """The rows of `emb` a minibatch can touch: its word ids."""
    if "emb" not in grads:
        return {}
    words = np.concatenate([t.word for t in batch])
    return {"emb": np.unique(words[words >= 0])}


TREE_FIELDS = ("left", "right", "word", "label", "root")  # what `tree_inputs` reads


def tree_inputs(tree: Any) -> tuple[Any, ...]:
    return tree.left, tree.right, tree.word, tree.label, tree.root


def train(model: recir.TracedModel, optimizer: Optimizer, trees: Iterable[Any],
          dev: Iterable[Any], config: TrainConfig, test: Iterable[Any] = ()
          ) -> list[dict[str, Any]]:
    """Trains `model.params` in place; returns one metrics dict per epoch.
    With `test`, `config.test_scores` gets the best-dev epoch's test scores.
    Each set of trees may be any iterable (a generator is read once)."""
    check_config(config, optimizer)
    trees, dev, test = (as_list(items, what) for what, items in
                        (("training", trees), ("dev", dev), ("test", test)))
    if not trees:  # (an epoch of no steps reported a loss of 0.0)
        raise TrainConfigError("no training trees: the training set is empty")
    for what, items in (("training", trees), ("dev", dev), ("test", test)):
        for k, item in enumerate(items):
            if not all(hasattr(item, field) for field in TREE_FIELDS):
                raise TrainConfigError(f"{what} tree {k} is a {type(item).__name__}, not a "
                                       f"tree (with {', '.join(TREE_FIELDS)})")
        try:  # (a cycle ran the compiled model out of stack: 'recursion ... too deep')
            validate_trees(items, f"{what} tree")
        except TreeStructureError as error:
            raise TrainConfigError(str(error)) from None
    reducer = (MPIReducer(embedding_rows, config.collective_timeout) if config.distributed
               else LocalReducer())
    with reducer.fail_fast():
        return train_ranks(model, optimizer, trees, dev, config, reducer, test)


def as_list(items: Iterable[Any], what: str) -> list[Any]:
    """The trees as a list, read once: a generator was used up by the check of
    its items, and its `len()` then failed."""
    listed = read_once(items)
    if listed is None:
        raise TrainConfigError(f"the {what} trees must be a list (or any iterable) of "
                               f"trees, got a {type(items).__name__}")
    return listed


def train_ranks(model: recir.TracedModel, optimizer: Optimizer, trees: Sequence[Any],
                dev: Sequence[Any], config: TrainConfig, reducer: LocalReducer,
                test: Sequence[Any] = ()) -> list[dict[str, Any]]:
    rng = np.random.default_rng(config.seed)
    first_epoch, best = 0, config.best
    if config.resume and config.checkpoint and config.checkpoint.exists():
        first_epoch, rng = load_checkpoint(config.checkpoint, model.params, optimizer,
                                           best, config.info)
    start = time.perf_counter()
    batching = config.batching if config.engine == "native" else "recursive"
    step = recir.value_and_grad(model, engine=config.engine, threads=config.threads,
                                batching=batching)
    scorer = NodeScorer(model, config.threads, config.engine,
                        roots_only=not config.all_nodes, batching=batching)
    if reducer.is_root:  # rank 0 alone evaluates
        scorer.prepare(dev, test)
    compile_seconds = time.perf_counter() - start
    reducer.check_same("the training trees", len(trees))
    reducer.check_same("the training options", training_options(optimizer, config))
    reducer.check_same("the parameters",
                       sum(float(v.sum()) for v in model.params.values()))
    grads = reducer.gradient_buffers(model.params)
    for epoch in range(first_epoch, config.epochs):
        order = rng.permutation(len(trees))
        record = {"epoch": epoch + 1,
                  **run_epoch(step, optimizer, trees, order, grads, config, epoch + 1,
                              reducer),
                  "compile_seconds": compile_seconds}
        check_finite(model.params, epoch + 1)
        if not reducer.is_root:  # rank 0 evaluates, logs and checkpoints
            config.history.append(reducer.from_root(record))
            continue
        record |= timed(evaluate, scorer, dev, config.all_nodes)
        dev_fine = record["root_fine"]  # None: no dev root scored, the latest epoch kept
        best.offer(epoch + 1, epoch if dev_fine is None else dev_fine, model.params)
        record["best_epoch"] = best.epoch
        log(record, config)
        if config.checkpoint:
            save_checkpoint(config.checkpoint, model.params, optimizer, epoch + 1, rng,
                            best, config.info)
        reducer.from_root(record)
    if test and reducer.is_root:
        dev_scored = any(t.label[t.root] >= 0 for t in dev)
        config.test_scores = score_best(model.params, best, scorer, test, config,
                                        dev_scored)
    return config.history


def training_options(optimizer: Optimizer, config: TrainConfig) -> str:
    """What every rank's steps must share for the ranks to stay the same."""
    settings = {k: sorted(v) if isinstance(v, frozenset) else v
                for k, v in sorted(vars(optimizer).items())
                if isinstance(v, numbers.Real | str | frozenset)}  # (lr, eps, frozen: no state)
    return (f"{type(optimizer).__name__} {settings}, batch {config.batch_size}, epochs "
            f"{config.epochs}, seed {config.seed}")


def check_finite(params: dict[str, np.ndarray], epoch: int) -> None:
    """A step on an inf or NaN gradient under a finite loss (which the loop
    checks per minibatch) leaves its parameters so: found once an epoch, a
    pass over them, before they are evaluated or checkpointed."""
    for name, value in params.items():
        if not np.isfinite(value).all():
            raise RecirError(f"error: parameter '{name}' is not finite after epoch {epoch}: "
                             "a step's gradient was inf or NaN while its loss was finite "
                             "(any checkpoint is the last full epoch's)")


def timed(score: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    began = time.perf_counter()
    return {**score(*args), "eval_seconds": time.perf_counter() - began}


def log(record: dict[str, Any], config: TrainConfig) -> None:
    config.history.append(record)
    if config.on_epoch is not None:
        config.on_epoch(record)
    append_metrics(record, config)


def append_metrics(record: dict[str, Any], config: TrainConfig) -> None:
    """One JSON line in the --metrics file, if there is one."""
    if config.metrics:
        with open(config.metrics, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def score_best(params: dict[str, np.ndarray], best: Best, scorer: NodeScorer,
               test: Sequence[Any], config: TrainConfig, dev_scored: bool = True
               ) -> dict[str, Any]:
    """Test accuracy (root and all nodes) of the best-dev epoch's parameters,
    swapped in for the call; logged as a `"split": "test"` metrics line.
    Without `dev_scored` (no dev root had a label) the best epoch is the
    latest and its score the epoch's number, no dev accuracy."""
    last = {k: v.copy() for k, v in params.items()}
    try:
        for k, v in (best.params or last).items():
            params[k][...] = v
        scorer.roots_only = False
        record = {"split": "test", "picked_epoch": best.epoch or None,
                  "dev_root_fine": best.score if best.epoch and dev_scored else None,
                  **timed(evaluate, scorer, test, True)}
    finally:
        for k, v in last.items():
            params[k][...] = v
    append_metrics(record, config)
    return record


def run_epoch(step: Any, optimizer: Optimizer, trees: Sequence[Any], order: np.ndarray,
              grads: dict[str, np.ndarray], config: TrainConfig, epoch: int,
              reducer: LocalReducer) -> dict[str, float]:
    """One pass over `trees` in `order`: a step per minibatch on its mean
    gradient (with several ranks, each computes its share and the sums are
    reduced). A loss that is not finite stops it before its step."""
    began, total_loss, seen = time.perf_counter(), 0.0, 0
    desc = f"epoch {epoch}/{config.epochs}"
    with tqdm(total=len(trees), disable=not (config.progress and reducer.is_root),
              desc=desc, unit="tree", leave=False) as bar:
        for first in range(0, len(trees), config.batch_size):
            picked = order[first:first + config.batch_size]
            batch = [trees[i] for i in picked]
            share = reducer.shard(batch)
            with reducer.phase("compute"):
                try:
                    outputs, _ = step.batch([tree_inputs(t) for t in share], grads,
                                            config.threads)
                except RecirError as error:
                    raise name_the_tree(error, step, share, batch, picked) from None
            loss = reducer.reduce(grads, sum(float(out[-1]) for out in outputs), batch)
            if not math.isfinite(loss):  # (one compare per minibatch)
                raise RecirError(
                    f"error: the training loss is {loss} in epoch {epoch}, minibatch "
                    f"{first // config.batch_size + 1}: stopped before its step (the "
                    f"parameters gave this loss; any checkpoint is the last full epoch's)")
            total_loss += loss
            with reducer.phase("optimizer"):
                optimizer.step(grads, 1.0 / len(batch), embedding_rows(batch, grads),
                               zero=True)
            seen += len(batch)
            bar.update(len(batch))
            bar.set_postfix(loss=f"{total_loss / seen:.3f}", refresh=False)
    seconds = time.perf_counter() - began
    return {"loss": total_loss / max(seen, 1), "trees_per_s": seen / seconds,
            "train_seconds": seconds, **reducer.report()}


def name_the_tree(error: RecirError, step: Any, share: Sequence[Any],
                  batch: Sequence[Any], picked: np.ndarray) -> RecirError:
    """`error` of a minibatch, naming the training tree that causes it: each
    tree of the minibatch is run alone until one fails (on the error path
    only; the gradients of this minibatch are dropped with the error)."""
    for tree in share:
        try:
            step(*tree_inputs(tree))
        except RecirError as alone:
            k = next(j for j, t in enumerate(batch) if t is tree)
            return RecirError(f"{alone} (training tree {picked[k]})")
    return RecirError(f"{error} (a minibatch of training trees "
                      f"{', '.join(map(str, picked))})")
