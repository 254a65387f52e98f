"""Tree data: structure arrays, the SST loader and synthetic treebanks.

The SST names load lazily so that `python -m recir.data.sst` runs the module
fresh instead of re-executing one this package already imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recir.data.synthetic import (
    SHAPES,
    make_tree,
    make_treebank,
    sentiment_label,
    word_polarity,
)
from recir.data.trees import (
    Tree,
    TreeBatch,
    TreeStructureError,
    batch_trees,
    validate_structure,
    validate_trees,
)

if TYPE_CHECKING:
    from recir.data.sst import (
        TreeParseError,
        Vocabulary,
        load_sst,
        download,
        parse_tree,
        sst_folder,
        sst_path,
    )

SST_NAMES = frozenset({
    "TreeParseError", "Vocabulary", "download", "load_sst",
    "parse_tree", "sst_folder", "sst_path",
})

__all__ = [
    "SHAPES", "Tree", "TreeBatch", "TreeParseError", "TreeStructureError", "Vocabulary",
    "batch_trees", "download", "load_sst", "make_tree", "make_treebank",
    "parse_tree", "sentiment_label", "sst_folder", "sst_path", "validate_structure",
    "validate_trees", "word_polarity",
]


def __getattr__(name: str) -> Any:
    if name in SST_NAMES:
        from recir.data import sst

        return getattr(sst, name)
    raise AttributeError(f"module 'recir.data' has no attribute '{name}'")
