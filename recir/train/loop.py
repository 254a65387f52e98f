"""The training loop: shuffled minibatches, progress, evaluation, checkpoints.

Gradients of a minibatch are accumulated in place (`into=`) over its trees
and averaged by the optimizer step, so a step allocates nothing per tree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import recir
from recir.train.distributed import COLLECTIVE_TIMEOUT_S, LocalReducer, make_reducer
from recir.train.metrics import evaluate
from recir.train.optimizers import Optimizer


@dataclass
class TrainConfig:
    epochs: int = 1
    batch_size: int = 25
    seed: int = 0
    engine: str = "native"
    checkpoint: Path | None = None
    resume: bool = False
    metrics: Path | None = None
    all_nodes: bool = False  # evaluate every node too (slower)
    threads: int = 1  # trees of a minibatch run side by side
    progress: bool = True
    on_epoch: Callable[[dict[str, Any]], None] | None = None  # gets each record
    history: list[dict[str, Any]] = field(default_factory=list)
    # Data-parallel over MPI ranks (recir.train.distributed): rank 0 alone
    # evaluates, logs and checkpoints; `threads` are per rank.
    distributed: bool = False
    collective_timeout: float = COLLECTIVE_TIMEOUT_S


def embedding_rows(batch: Sequence[Any], grads: dict[str, np.ndarray]
                   ) -> dict[str, np.ndarray]:
    """The rows of `emb` a minibatch can touch: its word ids."""
    if "emb" not in grads:
        return {}
    words = np.concatenate([t.word for t in batch])
    return {"emb": np.unique(words[words >= 0])}


def tree_inputs(tree: Any) -> tuple[Any, ...]:
    return tree.left, tree.right, tree.word, tree.label, tree.root


def train(model: recir.TracedModel, optimizer: Optimizer, trees: Sequence[Any],
          dev: Sequence[Any], config: TrainConfig) -> list[dict[str, Any]]:
    """Trains `model.params` in place; returns one metrics dict per epoch."""
    reducer = make_reducer(config.distributed, embedding_rows,
                           config.collective_timeout)
    with reducer.fail_fast():
        return train_ranks(model, optimizer, trees, dev, config, reducer)


def train_ranks(model: recir.TracedModel, optimizer: Optimizer, trees: Sequence[Any],
                dev: Sequence[Any], config: TrainConfig, reducer: LocalReducer
                ) -> list[dict[str, Any]]:
    start = time.perf_counter()
    step = recir.value_and_grad(model, engine=config.engine, threads=config.threads)
    forward = (recir.compile(model, threads=config.threads)
               if config.engine == "native" else model.run)
    compile_seconds = time.perf_counter() - start
    rng = np.random.default_rng(config.seed)
    first_epoch = 0
    if config.resume and config.checkpoint and config.checkpoint.exists():
        first_epoch, rng = load_checkpoint(config.checkpoint, model.params, optimizer)
    reducer.check_same("the training trees", len(trees))
    reducer.check_same("the parameters",
                       sum(float(v.sum()) for v in model.params.values()))
    grads = reducer.gradient_buffers(model.params)
    for epoch in range(first_epoch, config.epochs):
        order = rng.permutation(len(trees))
        record = {"epoch": epoch + 1,
                  **run_epoch(step, optimizer, [trees[i] for i in order], grads,
                              config, f"epoch {epoch + 1}/{config.epochs}", reducer),
                  "compile_seconds": compile_seconds}
        if not reducer.is_root:  # rank 0 evaluates, logs and checkpoints
            config.history.append(reducer.from_root(record))
            continue
        record |= evaluate(forward, model.params, dev, config.all_nodes)
        config.history.append(record)
        if config.on_epoch is not None:
            config.on_epoch(record)
        if config.metrics:
            with open(config.metrics, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        if config.checkpoint:
            save_checkpoint(config.checkpoint, model.params, optimizer, epoch + 1, rng)
        reducer.from_root(record)
    return config.history


def run_epoch(step: Any, optimizer: Optimizer, trees: Sequence[Any],
              grads: dict[str, np.ndarray], config: TrainConfig, desc: str,
              reducer: LocalReducer | None = None) -> dict[str, float]:
    """One pass in the given order: a step per minibatch on its mean gradient
    (with several ranks, each computes its share and the sums are reduced)."""
    reducer = reducer or LocalReducer()
    began, total_loss, seen = time.perf_counter(), 0.0, 0
    with tqdm(total=len(trees), disable=not (config.progress and reducer.is_root),
              desc=desc, unit="tree", leave=False) as bar:
        for first in range(0, len(trees), config.batch_size):
            batch = trees[first:first + config.batch_size]
            with reducer.phase("compute"):
                outputs, _ = step.batch([tree_inputs(t) for t in reducer.shard(batch)],
                                        grads, config.threads)
            total_loss += reducer.reduce(grads, sum(float(out[-1]) for out in outputs),
                                         batch)
            with reducer.phase("optimizer"):
                optimizer.step(grads, 1.0 / len(batch), embedding_rows(batch, grads),
                               zero=True)
            seen += len(batch)
            bar.update(len(batch))
            bar.set_postfix(loss=f"{total_loss / seen:.3f}", refresh=False)
    seconds = time.perf_counter() - began
    return {"loss": total_loss / max(seen, 1), "trees_per_s": seen / seconds,
            "train_seconds": seconds, **reducer.report()}


def save_checkpoint(path: Path, params: dict[str, np.ndarray], optimizer: Optimizer,
                    epoch: int, rng: np.random.Generator) -> None:
    arrays = {f"param/{k}": v for k, v in params.items()}
    arrays |= {f"opt/{k}": v for k, v in optimizer.state_dict().items()}
    arrays["epoch"] = np.array(epoch)
    arrays["rng"] = np.array(json.dumps(rng.bit_generator.state))
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def load_checkpoint(path: Path, params: dict[str, np.ndarray], optimizer: Optimizer
                    ) -> tuple[int, np.random.Generator]:
    """Restores params (in place), optimizer state and the shuffling rng."""
    with np.load(path) as data:
        for name, value in params.items():
            value[...] = data[f"param/{name}"]
        optimizer.load_state_dict({k[4:]: data[k] for k in data.files
                                   if k.startswith("opt/")})
        rng = np.random.default_rng()
        rng.bit_generator.state = json.loads(str(data["rng"]))
        return int(data["epoch"]), rng
