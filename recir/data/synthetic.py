"""Synthetic treebanks shaped like SST, for tests and benchmarks without SST.

Shapes follow the recursive-dataflow-graphs paper's Table 1 (EuroSys'18):
`balanced` (complete-ish: the left subtree gets ceil(k/2) of k leaves, depth
ceil(log2 k)), `linear` (a right-branching chain, every internal node has a
leaf child, depth k-1) and `moderate` in between: with probability `PEEL` a
single word is split off either end (as parsers often do), otherwise the split
point is uniform. `PEEL = 0.55` matches SST's depth per sentence length: mean
depth 10.4 at 19 leaves (SST 10.1), 6.7 at 10 (SST 6.8), 13.3 at 30 (SST 13.8).

Labels are learnable: each word id has a fixed polarity -1, 0 or +1 (most are
neutral, like SST), a node's score is the sum over its leaves, and the label is
the score bucketed to 0-4 (`sentiment_label`), so a leaf is 1, 2 or 3.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from recir.data.trees import Tree

SHAPES = ("balanced", "moderate", "linear")
PEEL = 0.55  # moderate: chance of splitting one word off an end
MEAN_LEAVES, STD_LEAVES, MAX_LEAVES = 19.0, 9.3, 52  # SST train sentence lengths


def word_polarity(word: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """-1, 0 or +1 per word id, fixed by a hash of the id (id 0 is neutral).

    Independent of vocabulary size and seed, so banks built with different
    settings agree on what a word means. About 20% negative, 20% positive.
    """
    ids = np.asarray(word, dtype=np.uint64)
    fraction = ((ids * np.uint64(2654435761)) % np.uint64(2**32)) / 2**32
    polarity = np.where(fraction < 0.2, -1, np.where(fraction >= 0.8, 1, 0))
    return np.where(ids == 0, 0, polarity).astype(np.int32)


def sentiment_label(score: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Summed polarity -> 0-4: <=-3, -2..-1, 0, 1..2, >=3."""
    return np.digitize(np.asarray(score), [-2.5, -0.5, 0.5, 2.5]).astype(np.int32)


def split_point(shape: str, leaves: int, rng: np.random.Generator) -> int:
    """How many of `leaves` (>= 2) go to the left subtree."""
    if shape == "balanced":
        return (leaves + 1) // 2
    if shape == "linear":
        return 1
    if rng.random() < PEEL:
        return 1 if rng.random() < 0.5 else leaves - 1
    return int(rng.integers(1, leaves))


def whole(value: object) -> bool:
    """An integer (a NumPy one too), not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def make_tree(
    shape: str, num_leaves: int, rng: np.random.Generator, vocab_size: int = 100
) -> Tree:
    """A random tree of `num_leaves` leaves (2k-1 nodes), words in [0, vocab_size)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown tree shape '{shape}', expected one of {SHAPES}")
    # (a float count never reaches 1 leaf per subtree: the split loops forever;
    # word ids past int32 would wrap negative)
    if not (whole(num_leaves) and whole(vocab_size)):
        raise ValueError(f"make_tree: num_leaves and vocab_size must be integers, "
                         f"got {num_leaves!r} and {vocab_size!r}")
    if num_leaves < 1 or not 1 <= vocab_size <= np.iinfo(np.int32).max + 1:
        raise ValueError(f"need num_leaves >= 1 and vocab_size in [1, 2**31], "
                         f"got {num_leaves} and {vocab_size}")
    left: list[int] = []
    right: list[int] = []
    # Iterative post-order construction; a frame is (leaves, left leaves, children).
    stack: list[tuple[int, int, list[int]]] = [(num_leaves, 0, [])]
    while stack:
        leaves, k, kids = stack[-1]
        if leaves == 1 or len(kids) == 2:
            stack.pop()
            left.append(kids[0] if kids else -1)
            right.append(kids[1] if kids else -1)
            if stack:
                stack[-1][2].append(len(left) - 1)
        elif kids:  # left subtree done: the right one gets the other leaves
            stack.append((leaves - k, 0, []))
        else:
            k = split_point(shape, leaves, rng)
            stack[-1] = (leaves, k, kids)
            stack.append((k, 0, []))
    lefts, rights = np.array(left, np.int32), np.array(right, np.int32)
    is_leaf = lefts < 0
    word = np.full(lefts.shape, -1, np.int32)
    word[is_leaf] = rng.integers(vocab_size, size=num_leaves)
    return Tree(lefts, rights, word, sentiment_label(subtree_sums(lefts, rights, word)))


def subtree_sums(
    left: npt.NDArray[np.int32],
    right: npt.NDArray[np.int32],
    word: npt.NDArray[np.int32],
) -> npt.NDArray[np.int64]:
    """Summed word polarity under every node; post-order makes one pass enough."""
    score = np.where(left < 0, word_polarity(np.maximum(word, 0)), 0).astype(np.int64)
    for node in np.flatnonzero(left >= 0):
        score[node] = score[left[node]] + score[right[node]]
    return score


def make_treebank(
    n: int, shape: str = "moderate", *, num_leaves: int | None = None,
    vocab_size: int = 100, seed: int = 0,
) -> list[Tree]:
    """`n` trees, deterministic given `seed`.

    Without `num_leaves`, sizes follow SST's sentence lengths: a negative
    binomial with mean 19 and standard deviation 9.3, clipped to [2, 52].
    Mean / max depth over 2000 trees (seed 0): moderate 9.8 / 24 (SST train
    9.8 / 29), balanced 4.5 / 6, linear 18.1 / 51.
    """
    if not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"make_treebank: n (the number of trees) must be an integer >= 0, "
                         f"got {n!r}")
    if num_leaves is not None and not (whole(num_leaves) and num_leaves >= 1):
        raise ValueError(f"make_treebank: num_leaves must be an integer >= 1, "
                         f"got {num_leaves!r}")  # (2.5 made trees of 2 leaves)
    if isinstance(seed, int | np.integer) and seed < 0:
        raise ValueError(f"make_treebank: seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    if num_leaves is None:
        p = MEAN_LEAVES / STD_LEAVES**2
        sizes = np.clip(rng.negative_binomial(MEAN_LEAVES * p / (1 - p), p, n),
                        2, MAX_LEAVES)
    else:
        sizes = np.full(n, num_leaves)
    return [make_tree(shape, int(k), rng, vocab_size) for k in sizes]
