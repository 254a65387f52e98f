"""SST accuracy: fine-grained (5 classes) and binary, at the root and over all nodes.

Binary follows the usual SST protocol: gold labels 0-1 are negative, 3-4
positive, neutral (2) is left out; the prediction compares the summed
probabilities of the negative and positive classes. Nodes labelled -1
(unknown) are not scored. An accuracy with nothing scored is None, not 0 of
0 read as 0 (fine: no trees, or none with a known label; binary: no polar
gold label either), printed as n/a.

Scores come from a `NodeScorer`: a tree model traced with a node score table
(`recir.models.tree_common`) gives every node's logits in one forward per
tree, run in batches through the compiled function. A model without one
(any traced model with `w_out`/`b_out`), or a tree beyond `TABLE_NODES`,
falls back to one forward rooted at each node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import recir
from recir.diagnostics import RecirError

# Trees per `.batch` call: large enough that a team of threads stays busy,
# small enough that a batch's score tables stay in cache-sized memory.
SCORE_BATCH = 256
# Smallest node capacity of the score table; capacities are powers of two, so
# a treebank retraces at most a few times (SST's largest tree has 103 nodes).
MIN_CAPACITY = 64
# Largest tree scored through a table: its mask is capacity x capacity*classes
# floats (21 MB at 1024), so a 60,000-leaf line asked for 64 GiB. Larger trees
# are scored a forward per node (or, with `roots_only`, per root).
TABLE_NODES = 1024


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class Accuracy:
    """Counts fine and binary hits."""

    def __init__(self) -> None:
        self.fine = self.fine_total = self.binary = self.binary_total = 0

    def add_many(self, probs: np.ndarray, labels: np.ndarray) -> None:
        """Rows of class probabilities and their gold labels (-1: skipped)."""
        known = labels >= 0
        probs, labels = probs[known], labels[known]
        self.fine += int(np.count_nonzero(np.argmax(probs, axis=1) == labels))
        self.fine_total += len(labels)
        polar = labels != 2
        positive = probs[polar, 3:].sum(axis=1) > probs[polar, :2].sum(axis=1)
        self.binary += int(np.count_nonzero(positive == (labels[polar] > 2)))
        self.binary_total += int(np.count_nonzero(polar))

    def as_dict(self, prefix: str) -> dict[str, float | None]:
        """Each accuracy, None where nothing was scored."""
        return {f"{prefix}_fine": self.fine / self.fine_total if self.fine_total else None,
                f"{prefix}_binary": (self.binary / self.binary_total if self.binary_total
                                     else None)}


def scoring_inputs(tree: Any) -> tuple[Any, ...]:
    """A tree as the models' inputs for scoring; unknown labels (-1) read as
    0, since the loss output is not used and a label indexes the logits."""
    return tree.left, tree.right, tree.word, np.maximum(tree.label, 0), tree.root


class NodeScorer:
    """Every node's logits, `(num_nodes, classes)` per tree.

    `model` is a `TreeModel` (one forward per tree with a score table whose
    capacity covers the largest tree of a batch) or any traced model with
    `w_out`/`b_out` whose first output is h (one forward per node; with
    `roots_only`, one per tree, giving the root's row only)."""

    def __init__(self, model: Any, threads: int = 1, engine: str = "native",
                 roots_only: bool = False, batching: str = "auto"):
        """`batching`: how `recir.compile` runs a batch of trees; `auto`
        takes the frontier's batched form or the recursive code, whichever
        the cost model says is faster for the batch
        (`bench/sst_eval_time.py --batching` times each)."""
        if engine not in ("native", "interpret"):  # (any other ran the interpreter)
            raise ValueError(f"unknown engine '{engine}' (native, interpret)")
        self.model, self.threads, self.engine = model, threads, engine
        self.roots_only, self.batching = roots_only, batching
        self.compiled: dict[int, Callable[..., Any]] = {}
        self.table = hasattr(model, "with_node_scores")

    def function(self, capacity: int) -> Any:
        """The compiled (or interpreted) model for trees of up to `capacity` nodes."""
        if capacity not in self.compiled:
            model = self.model.with_node_scores(capacity) if self.table else self.model
            if self.engine != "native":
                self.compiled[capacity] = model
            else:
                self.compiled[capacity] = recir.compile(model, threads=self.threads,
                                                        batching=self.batching)
        return self.compiled[capacity]

    def capacity(self, trees: Sequence[Any]) -> int:
        """The table's node capacity for these trees: the smallest one compiled
        already that fits, else a power of two (few variants per treebank)."""
        if not self.table:
            return 0
        largest = max((t.num_nodes for t in trees if t.num_nodes <= TABLE_NODES),
                      default=1)  # (larger trees are scored without a table)
        fits = [c for c in self.compiled if c >= largest]
        return min(fits) if fits else max(MIN_CAPACITY, 1 << (largest - 1).bit_length())

    def prepare(self, *splits: Sequence[Any]) -> None:
        """Compile ahead what scoring these splits will need: one capacity
        for all their trees."""
        self.function(self.capacity([t for trees in splits for t in trees]))

    def __call__(self, trees: Sequence[Any]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for first in range(0, len(trees), SCORE_BATCH):
            batch = trees[first:first + SCORE_BATCH]
            try:
                out += self.score(batch)
            except RecirError as error:
                raise self.name_the_tree(error, batch, first, len(trees)) from None
        overflowed = next((k for k, table in enumerate(out) if not np.isfinite(table).all()),
                          None)
        if overflowed is not None:  # (its accuracy or label would be a number all the same)
            raise RecirError(f"error: the model scores inf or NaN (tree {overflowed} of the "
                             f"{len(trees)} scored): its parameters overflow, as after a "
                             "training run that diverged (a lower learning rate?)")
        return out

    def score(self, batch: Sequence[Any]) -> list[np.ndarray]:
        if not self.table:
            return self.per_root(batch)
        large = [k for k, t in enumerate(batch) if t.num_nodes > TABLE_NODES]
        if not large:
            return self.tables(batch)
        out = dict(zip(large, self.per_root([batch[k] for k in large]), strict=True))
        small = [k for k in range(len(batch)) if k not in out]
        if small:
            out |= dict(zip(small, self.tables([batch[k] for k in small]), strict=True))
        return [out[k] for k in range(len(batch))]

    def name_the_tree(self, error: RecirError, batch: Sequence[Any], first: int,
                      count: int) -> RecirError:
        """`error` of a batch, naming the tree that causes it: the batch's
        trees scored alone until one fails (the error path only; a tree
        alone fits a table already compiled)."""
        for k, tree in enumerate(batch):
            try:
                self.score([tree])
            except RecirError as alone:
                return RecirError(f"{alone} (tree {first + k} of the {count} scored)")
        return RecirError(f"{error} (trees {first}-{first + len(batch) - 1} of the "
                          f"{count} scored)")

    def tables(self, trees: Sequence[Any]) -> list[np.ndarray]:
        capacity = self.capacity(trees)
        fn = self.function(capacity)
        inputs = [scoring_inputs(t) for t in trees]
        outputs = (fn.batch(inputs) if self.engine == "native"
                   else [fn.run(*x) for x in inputs])
        classes = self.model.params["b_out"].shape[0]
        return [np.asarray(out[-1], np.float32).reshape(capacity, classes)[:t.num_nodes]
                for out, t in zip(outputs, trees, strict=True)]

    def per_root(self, trees: Sequence[Any]) -> list[np.ndarray]:
        fn = self.function(0)
        call = fn if self.engine == "native" else fn.run
        p = self.model.params
        out = []
        for t in trees:
            left, right, word, label, root = scoring_inputs(t)
            nodes = [root] if self.roots_only else range(t.num_nodes)
            h = np.stack([np.asarray(call(left, right, word, label, i)[0])
                          for i in nodes])
            out.append(h @ p["w_out"].T + p["b_out"])
        return out


def evaluate(scorer: Callable[[Sequence[Any]], list[np.ndarray]], trees: Sequence[Any],
             all_nodes: bool = False) -> dict[str, float | None]:
    """Root accuracy; with `all_nodes`, also every node's. `scorer` maps trees
    to their per-node logits (a `NodeScorer`). None where nothing was scored."""
    root, nodes = Accuracy(), Accuracy()
    tables = scorer(trees)
    if not trees:
        return root.as_dict("root") | (nodes.as_dict("all") if all_nodes else {})
    # a table of every node has the root's row at `root` (a `Tree`'s is its last)
    roots = [s[t.root] if len(s) == t.num_nodes else s[-1] for s, t in zip(tables, trees,
                                                                            strict=True)]
    root.add_many(softmax_rows(np.stack(roots).astype(np.float64)),
                  np.array([t.label[t.root] for t in trees]))
    out = root.as_dict("root")
    if all_nodes:
        if any(len(s) != t.num_nodes for s, t in zip(tables, trees, strict=True)):
            raise ValueError("all-node accuracy needs a score for every node")
        nodes.add_many(softmax_rows(np.concatenate(tables).astype(np.float64)),
                       np.concatenate([t.label for t in trees]))
        out |= nodes.as_dict("all")
    return out
