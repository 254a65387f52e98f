"""The IR examples in docs/ir.md parse and verify: the reference stays true."""

import re
from pathlib import Path

import pytest

from recir.context import make_context
from recir.parsing import parse_module

IR_DOC = Path(__file__).resolve().parents[2] / "docs" / "ir.md"
BLOCK = re.compile(r"^```mlir\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[int, str]]:
    """(line number, text) of every ```mlir block."""
    text = IR_DOC.read_text()
    return [(text.count("\n", 0, m.start(1)), m.group(1)) for m in BLOCK.finditer(text)]


def test_doc_has_examples():
    assert len(blocks()) >= 5


@pytest.mark.parametrize(("line", "text"), blocks(), ids=lambda v: str(v)[:40])
def test_ir_example_parses_and_verifies(line: int, text: str):
    parse_module(make_context(), text, str(IR_DOC), line_offset=line)


README = IR_DOC.parents[1] / "README.md"


def test_readme_example_runs():
    """The README's example (trace, compile, grad, train) runs as printed, and
    its native loss is the interpreter's."""
    code = re.search(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M).group(1)
    scope: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), scope)
    assert abs(scope["loss"] - scope["loss_ref"]) <= 1e-4 * abs(scope["loss_ref"])
    assert scope["grads"]["w"].shape == (16, 32)
    history = scope["history"]
    assert len(history) == 2
    assert history[1]["loss"] < history[0]["loss"]
