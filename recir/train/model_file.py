"""A model that is a file: `recir.train.load(path)` gives a ready tree model.

A checkpoint (`--checkpoint`) or an exported model (`--save-model`) holds a
JSON description (`kind`, `sizes`, `vocabulary`) beside the parameters. From
a checkpoint, `load` takes the best-dev epoch's parameters when it has them
(the ones the protocol reports), else the last epoch's.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recir.data.sst import Vocabulary
from recir.data.trees import Tree, read_once, validate_trees
from recir.train.checkpoint import (
    Arrays,
    CheckpointError,
    NpzArrays,
    check_arrays,
    count,
    model_info,
    read_npz,
    write_npz,
)
from recir.train.metrics import NodeScorer, softmax_rows

KINDS = ("tree_lstm", "tree_rnn", "rntn")


def describe(kind: str, sizes: dict[str, int], vocabulary: Vocabulary | None
             ) -> dict[str, Any]:
    """What a model file says about the model besides its parameters."""
    return {"kind": kind, "sizes": sizes,
            "vocabulary": None if vocabulary is None else list(vocabulary.words)}


def save_model(path: str | Path, params: Arrays, info: dict[str, Any]) -> None:
    write_npz(path, {**{f"param/{k}": v for k, v in params.items()},
                     "model": np.array(json.dumps(info))})


@dataclass
class LoadedModel:
    """A traced tree model with its vocabulary, ready to score trees."""

    kind: str
    sizes: dict[str, int]
    vocabulary: Vocabulary | None
    model: Any  # recir.models.tree_common.TreeModel
    epoch: int | None  # the epoch its parameters are from (checkpoints)

    def scorer(self, threads: int = 1, roots_only: bool = False) -> NodeScorer:
        """`roots_only`: a tree too large for a score table gets its root's
        row alone (one forward, not one per node)."""
        return NodeScorer(self.model, threads, roots_only=roots_only)

    def predict(self, trees: Iterable[Any], scorer: NodeScorer | None = None,
                all_nodes: bool = False) -> list[dict[str, Any]]:
        """Per tree (a list or any iterable of `Tree`, read once): the root's
        label and class probabilities and, with `all_nodes`, every node's
        label (post-order: children first, root last)."""
        listed = read_once(trees)  # (a generator was used up by the check below)
        bad = trees if listed is None else next(
            (t for t in listed if not isinstance(t, Tree)), None)
        if bad is not None:  # (the scorer's AttributeError named no argument)
            hint = " (recir.data.parse_tree makes one of text)" if isinstance(bad, str) else ""
            raise TypeError(f"predict takes a list of Tree, got a {type(bad).__name__}"
                            f"{' alone' if bad is trees else ''}{hint}")
        validate_trees(listed)  # (a cycle ran the model out of stack: 'too deep')
        out = []
        for logits in (scorer or self.scorer(roots_only=not all_nodes))(listed):
            probs = softmax_rows(logits.astype(np.float64))
            record: dict[str, Any] = {
                "label": int(np.argmax(probs[-1])),
                "probabilities": [round(float(p), 6) for p in probs[-1]]}
            if all_nodes:
                record["nodes"] = np.argmax(probs, axis=1).tolist()
            out.append(record)
        return out


def load(path: str | Path) -> LoadedModel:
    """The model a checkpoint or exported model file describes. Raises
    `CheckpointError` (one line) for a file that is not one."""
    path = Path(path)
    with read_npz(path) as data:
        return read_model(data, path)


def read_model(data: NpzArrays, path: Path) -> LoadedModel:
    info = model_info(data, path)
    if info is None:
        raise CheckpointError(f"{path}: no model description (a checkpoint from before "
                              f"model files, or not a recir model)")
    kind, sizes = info["kind"], info.get("sizes")
    if kind not in KINDS:
        raise CheckpointError(f"{path}: unknown model kind '{kind}' (known: "
                              f"{', '.join(KINDS)})")
    module = importlib.import_module(f"recir.models.{kind}")
    shapes = None
    if isinstance(sizes, dict) and all(type(v) is int and v > 0 for v in sizes.values()):
        try:
            shapes = module.param_shapes(**sizes)
        except TypeError:
            pass
    if shapes is None:
        raise CheckpointError(f"{path}: sizes {sizes} do not describe a {kind}")
    best = "best_epoch" in data and count(data, "best_epoch", path, "best epoch") > 0
    prefix = "best" if best else "param"
    try:  # shapes without memory (the file's sizes may ask for any amount)
        expected = {k: np.broadcast_to(np.float32(0), s) for k, s in shapes.items()}
    except ValueError:  # (a dimension beyond any array's)
        raise CheckpointError(f"{path}: sizes {sizes} are too large for any "
                              f"{kind}") from None
    check_arrays(data, prefix, expected, path, "parameter")
    params = {k: np.array(data[f"{prefix}/{k}"], np.float32) for k in shapes}
    words = info.get("vocabulary")
    if words is not None and not (isinstance(words, list)
                                  and all(isinstance(w, str) for w in words)):
        raise CheckpointError(f"{path}: the vocabulary is not a list of words")
    if words is not None and (words[:1] != [Vocabulary.UNK] or len(set(words)) < len(words)):
        # (ids come from the list: another order read each row as another word's)
        raise CheckpointError(f"{path}: the vocabulary is not '{Vocabulary.UNK}' then "
                              "distinct words (its word ids would not be its rows)")
    vocabulary = None if words is None else Vocabulary.from_words(words)
    if vocabulary is not None and len(vocabulary) != sizes.get("vocab"):
        raise CheckpointError(f"{path}: {len(vocabulary)} vocabulary words for "
                              f"{sizes.get('vocab')} embedding rows")
    epoch = (count(data, "best_epoch" if best else "epoch", path, "epoch")
             if "epoch" in data else None)
    return LoadedModel(kind, sizes, vocabulary, module.trace_model(params), epoch)
