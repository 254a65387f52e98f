"""Scoring SST trees at every node: one forward per tree (the node score
table) against one forward per node, the evaluation it replaces.

    python bench/sst_eval_time.py [--trees N] [--per-node N] [--batching MODE...]

Uses the SST train split as a stand-in when the test split is absent (same
sentence-length distribution); times are for untrained TreeLSTM h=150
parameters, which cost the same as trained ones.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import sst_folder_or_complain  # noqa: E402
from recir.data import load_sst  # noqa: E402
from recir.examples.sentiment import init_params, parse_args  # noqa: E402
from recir.models import tree_lstm  # noqa: E402
from recir.train import NodeScorer, evaluate  # noqa: E402


class PerNode:
    """The model without its score table: NodeScorer falls back to one
    forward rooted at each node."""

    def __init__(self, model):
        self.module, self.entry = model.module, model.entry
        self.input_names, self.params = model.input_names, model.params


def timed(scorer: NodeScorer, trees) -> float:
    scorer.prepare(trees)
    began = time.perf_counter()
    evaluate(scorer, trees, all_nodes=True)
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", type=int, default=2210, help="trees to score")
    parser.add_argument("--per-node", type=int, default=100,
                        help="trees scored the old way (slow; an even sample), "
                        "scaled up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batching", nargs="+", default=["auto"],
                        choices=["recursive", "frontier", "auto"],
                        help="how the one-pass scorer runs its batches")
    args = parser.parse_args()
    folder = sst_folder_or_complain()
    if folder is None:
        return 1
    train, vocab = load_sst(folder / "train.txt")
    split = "test" if (folder / "test.txt").is_file() else "train"
    trees = (load_sst(folder / "test.txt", vocab, grow_vocab=False)[0]
             if split == "test" else train)[:args.trees]
    model = tree_lstm.trace_model(init_params(tree_lstm, parse_args(["--synthetic"]),
                                              len(vocab)))
    for mode in args.batching:
        one = timed(NodeScorer(model, args.threads, batching=mode), trees)
        print(f"{len(trees)} SST {split} trees, all nodes, {args.threads} threads: "
              f"one pass ({mode}) {one:.2f} s")
    if args.per_node:
        sample = trees[::max(1, len(trees) // args.per_node)][:args.per_node]
        old = timed(NodeScorer(PerNode(model), args.threads), sample)
        print(f"per-node forwards: {old:.2f} s for {len(sample)} trees (every "
              f"{max(1, len(trees) // args.per_node)}th), "
              f"~{old * len(trees) / len(sample):.0f} s for {len(trees)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
