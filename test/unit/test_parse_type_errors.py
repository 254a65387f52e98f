"""Type errors xDSL finds while parsing are one located line naming the op,
like the verifier's (they were a caret under a token, often on the next
op's line, without the op's name, or a message over two lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recir.context import make_context
from recir.diagnostics import RecirError
from recir.parsing import parse_module
from recir.tools import recir_opt, recir_run

CALLEE = "func.func @g(%a: i32) -> i32 {\n  func.return %a : i32\n}\n"

# name: (IR text, the error after `FILE:`)
TYPE_ERRORS: dict[str, tuple[str, str]] = {
    "operand of another type": (
        "func.func @f(%a: i32, %b: f32) -> i32 {\n  %c = arith.addi %a, %b : i32\n"
        "  func.return %c : i32\n}\n",
        "2:3: error: 'arith.addi' op operand %b has type f32 but is used as i32"),
    "returned value of another type": (
        "func.func @f(%a: i32) -> f32 {\n  func.return %a : f32\n}\n",
        "2:3: error: 'func.return' op operand %a has type i32 but is used as f32"),
    "condition of another type": (
        "func.func @f(%a: i32) -> i32 {\n  %r = scf.if %a -> (i32) {\n"
        "    scf.yield %a : i32\n  } else {\n    scf.yield %a : i32\n  }\n"
        "  func.return %r : i32\n}\n",
        "2:3: error: 'scf.if' op operand %a has type i32 but is used as i1"),
    "type the op does not take": (
        "func.func @f(%a: f32) -> f32 {\n  %c = arith.addi %a, %a : f32\n"
        "  func.return %c : f32\n}\n",
        "2:3: error: 'arith.addi' op Unexpected attribute f32"),
    "type the op does not take, generic": (
        "func.func @f(%a: f32) -> f32 {\n"
        "  %c = \"arith.addi\"(%a, %a) : (f32, f32) -> f32\n"
        "  func.return %c : f32\n}\n",
        "2:3: error: 'arith.addi' op operand 'lhs' at position 0 does not verify: "
        "Unexpected attribute f32"),
    "index of another type": (
        "func.func @f(%s: tensor<?xi32>, %i: f32) -> i32 {\n"
        "  %c = tmath.extract %s[%i] : tensor<?xi32>, f32 -> i32\n"
        "  func.return %c : i32\n}\n",
        "2:3: error: 'tmath.extract' op Unexpected attribute f32"),
    "uses of one value with two types": (
        "func.func @f(%a: i32) -> i32 {\n  %x = arith.addi %later, %a : i32\n"
        "  %y = arith.addf %later, %later : f32\n  %later = arith.constant 1 : i32\n"
        "  func.return %x : i32\n}\n",
        "3:3: error: 'arith.addf' op operand %later is used as f32 here but as i32 at "
        "an earlier use"),
    "result of another type than its use": (
        "func.func @f(%a: i32) -> i32 {\n  %x = arith.addi %later, %a : i32\n"
        "  %later = arith.constant 1.0 : f32\n  func.return %x : i32\n}\n",
        "3:3: error: 'arith.constant' op result %later has type f32 but an earlier use "
        "has it as i32"),
    "more operands than types": (
        CALLEE + "func.func @f(%a: i32) -> i32 {\n"
        "  %r = func.call @g(%a, %a) : (i32) -> i32\n  func.return %r : i32\n}\n",
        "5:3: error: 'func.call' op has 2 operands but its type lists 1"),
    "literal its type cannot hold": (
        "func.func @f() -> i32 {\n  %c = arith.constant 1.5 : i32\n"
        "  func.return %c : i32\n}\n",
        "2:3: error: 'arith.constant' op Floating point value is not valid for integer "
        "type."),
    "float literal beyond f32": (  # was "too large to hold in memory" under a caret
        "func.func @f() -> f32 {\n  %c = arith.constant 1.0e40 : f32\n"
        "  func.return %c : f32\n}\n",
        "2:3: error: 'arith.constant' op the value 1.0e40 overflows f32"),
    "negative float literal beyond f32": (
        "func.func @f() -> f32 {\n  %c = arith.constant -3.5e38 : f32\n"
        "  func.return %c : f32\n}\n",
        "2:3: error: 'arith.constant' op the value -3.5e38 overflows f32"),
    "dense literal beyond f32": (
        "func.func @f() -> tensor<2xf32> {\n"
        "  %k = tmath.constant dense<[1.0, 2.0e39]> : tensor<2xf32>\n"
        "  func.return %k : tensor<2xf32>\n}\n",
        "2:3: error: 'tmath.constant' op the value 2.0e39 overflows f32"),
    "float literal beyond f64": (  # (xDSL read it as infinity)
        "func.func @f() -> f32 {\n  %d = arith.constant 1.0e400 : f64\n"
        "  %c = arith.constant 1.0 : f32\n  func.return %c : f32\n}\n",
        "2:3: error: 'arith.constant' op the value 1.0e400 overflows f64"),
    "dense literal of another shape": (
        "func.func @f() -> tensor<4xf32> {\n"
        "  %k = tmath.constant dense<[1.0, 2.0]> : tensor<4xf32>\n"
        "  func.return %k : tensor<4xf32>\n}\n",
        "2:3: error: 'tmath.constant' op Shape mismatch in dense literal. Expected [4] "
        "shape from the type, but got [2] shape."),
    "empty function body": (
        "func.func @f(%a: i32) -> i32 {\n}\n",
        "1:1: error: 'func.func' op @f has an empty block: a block ends with a "
        "terminator such as 'func.return'"),
}


@pytest.mark.parametrize("case", sorted(TYPE_ERRORS))
def test_parse_module_gives_one_located_line(case):
    text, error = TYPE_ERRORS[case]
    with pytest.raises(RecirError) as info:
        parse_module(make_context(), text, "bad.mlir")
    assert str(info.value) == f"bad.mlir:{error}"


@pytest.mark.parametrize("case", sorted(TYPE_ERRORS))
def test_the_tools_print_the_same_line(tmp_path: Path, capsys, case):
    text, error = TYPE_ERRORS[case]
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    assert recir_opt.main([str(path)]) == 1
    assert capsys.readouterr().err == f"{path}:{error}\n"
    assert recir_run.main([str(path), "--entry", "f", "--interpret"]) == 1
    assert capsys.readouterr().err == f"{path}:{error}\n"


@pytest.mark.parametrize(("literal", "value"), [
    ("3.4028235e38 : f32", 3.4028234663852886e38),  # the largest f32, rounded to it
    ("-3.4028235e38 : f32", -3.4028234663852886e38),
    ("0x7F800000 : f32", float("inf")),  # an infinity given as its bits
    ("1.0e300 : f64", 1.0e300),
])
def test_float_literals_within_range_parse(literal, value):
    typ = literal.split(": ")[1]
    text = (f"func.func @f() -> {typ} {{\n  %c = arith.constant {literal}\n"
            f"  func.return %c : {typ}\n}}\n")
    op = next(iter(parse_module(make_context(), text).ops)).body.block.first_op
    assert op.value.value.data == value


def test_split_input_file_counts_lines_from_the_file(tmp_path: Path, capsys):
    path = tmp_path / "two.mlir"
    path.write_text(CALLEE + "// -----\nfunc.func @f(%a: i32) -> f32 {\n"
                    "  func.return %a : f32\n}\n")
    assert recir_opt.main([str(path), "--split-input-file"]) == 1
    assert capsys.readouterr().err.endswith(
        f"{path}:6:3: error: 'func.return' op operand %a has type i32 but is used as "
        "f32\n")


def test_a_syntax_error_keeps_its_caret():
    text = ('func.func @f(%a: i32) -> i32 {\n'
            '  %x = "arith.addi"(%a, %a) {foo = [1 : i32 2]} : (i32, i32) -> i32\n'
            '  func.return %x : i32\n}\n')
    with pytest.raises(RecirError) as info:
        parse_module(make_context(), text, "bad.mlir")
    assert str(info.value) == (
        "bad.mlir:2:45: error: ']' expected\n"
        '  %x = "arith.addi"(%a, %a) {foo = [1 : i32 2]} : (i32, i32) -> i32\n'
        "                                            ^")


def test_recir_run_names_an_entry_without_a_body(tmp_path: Path, capsys):
    path = tmp_path / "decl.mlir"
    path.write_text("func.func private @ext(%a: i32) -> i32\n")
    for engine in ("--interpret", "--jit"):
        assert recir_run.main([str(path), "--entry", "ext", "--arg", "1", engine]) == 1
        assert capsys.readouterr().err == (
            f"{path}:1:1: error: 'func.func' op @ext is a declaration without a body: "
            "only a function with a body can run\n")


@pytest.mark.parametrize("text", ["", "\n\n", "// nothing here yet\n"])
def test_input_without_ops_is_an_empty_module(tmp_path: Path, capsys, text: str):
    """As MLIR reads it; xDSL said 'Could not parse entire input!' over a
    caret under nothing."""
    assert list(parse_module(make_context(), text, "empty.mlir").ops) == []
    path = tmp_path / "empty.mlir"
    path.write_text(text)
    assert recir_opt.main([str(path)]) == 0
    assert capsys.readouterr().out.split() == ["builtin.module", "{", "}"]
