"""Tree data: structure arrays, the SST loader and synthetic treebanks."""

from recir.data.sst import TreeParseError, Vocabulary, load_sst, parse_tree, sst_path
from recir.data.synthetic import SHAPES, make_tree, make_treebank
from recir.data.trees import (
    Tree,
    TreeBatch,
    TreeStructureError,
    batch_trees,
    validate_structure,
)

__all__ = [
    "SHAPES",
    "Tree",
    "TreeBatch",
    "TreeParseError",
    "TreeStructureError",
    "Vocabulary",
    "batch_trees",
    "load_sst",
    "make_tree",
    "make_treebank",
    "parse_tree",
    "sst_path",
    "validate_structure",
]
