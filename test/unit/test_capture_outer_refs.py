"""capture-outer-refs keeps meaning: same interpreter results before and after."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recir.context import make_context
from recir.dialects import invoke
from recir.interpreter import run_function
from recir.parsing import parse_module
from recir.passes.capture_outer_refs import CaptureOuterRefsPass
from recir.verification import verify_located

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"


def before_and_after(filename: str):
    ctx = make_context()
    text = (EXAMPLES / filename).read_text()
    before = parse_module(ctx, text, filename)
    after = parse_module(ctx, text, filename)
    CaptureOuterRefsPass().apply(ctx, after)
    verify_located(after)
    assert not any(isinstance(op, invoke.SubgraphOp | invoke.ReturnOp) for op in after.walk())
    return before, after


@pytest.mark.parametrize(
    ("filename", "entry", "args"),
    [("fib.mlir", "fib", [10]), ("ackermann.mlir", "ack", [2, 2]),
     ("takeuchi.mlir", "tak", [6, 4, 2]), ("thesis_primes.mlir", "thesis_primes", [30])],
)
def test_programs_agree(filename: str, entry: str, args: list[int]):
    before, after = before_and_after(filename)
    assert run_function(before, entry, args) == run_function(after, entry, args)


def test_tree_lstm_agrees_and_captures_its_parameters():
    before, after = before_and_after("tree_lstm.mlir")
    node = next(op for op in after.ops if getattr(op, "sym_name", None) and op.sym_name.data == "node")
    assert len(node.function_type.inputs) == 1 + 8  # the node index + 8 outer values
    rng = np.random.default_rng(1)
    left = np.array([-1, -1, 0, -1, 2], dtype=np.int32)
    right = np.array([-1, -1, 1, -1, 3], dtype=np.int32)
    word = np.array([3, 7, -1, 1, -1], dtype=np.int32)
    shapes = [(10, 3), (12, 3), (12,), (20, 8), (20,)]
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    args = [left, right, word, 4, *params]
    for a, b in zip(run_function(before, "tree_lstm", args),
                    run_function(after, "tree_lstm", args), strict=True):
        np.testing.assert_array_equal(a, b)
