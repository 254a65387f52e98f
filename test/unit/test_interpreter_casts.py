"""Casts and signed and unsigned picks that native code runs and the
interpreter had no implementation of, or ran apart from it (`recir-run` of
hand-written IR): `uitofp`, `bitcast`, `maxui`, `minui`, and `maxsi`,
`minsi` of i1 (whose true is -1), on scalars and on rows, each against
NumPy's reading of the bits or a truth table, and the native result."""

from __future__ import annotations

import numpy as np
import pytest

import recir
from recir.context import make_context
from recir.interpreter import run_function
from recir.parsing import parse_module


def function(arg_types: list[str], result: str, body: str) -> str:
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(arg_types))
    return (f"func.func @f({params}) -> {result} {{\n  %r = {body}\n"
            f"  func.return %r : {result}\n}}\n")


def both(text: str, *args):
    """The interpreter's result and native code's for `args`."""
    (interpreted,) = run_function(parse_module(make_context(), text), "f", list(args))
    (native,) = recir.compile(parse_module(make_context(), text), entry="f", threads=1)(*args)
    return interpreted, native


U32 = 1 << 32
CASES = [
    (function(["i32"], "f32", "arith.uitofp %a0 : i32 to f32"),
     lambda a: float(np.float32(a % U32)), [(-1,), (5,), (-2**31,), (16777217,)]),
    (function(["i32"], "f32", "arith.bitcast %a0 : i32 to f32"),
     lambda a: float(np.array(a % U32, np.uint32).view(np.float32)),
     [(1065353216,), (-1071644672,), (1,)]),
    (function(["f32"], "i32", "arith.bitcast %a0 : f32 to i32"),
     lambda a: int(np.array(a, np.float32).view(np.int32)), [(1.0,), (-2.5,), (-0.0,)]),
    (function(["i32", "i32"], "i32", "arith.maxui %a0, %a1 : i32"),
     lambda a, b: int(np.int32(np.uint32(max(a % U32, b % U32)))), [(-1, 5), (3, 5)]),
    (function(["i32", "i32"], "i32", "arith.minui %a0, %a1 : i32"),
     lambda a, b: int(np.int32(np.uint32(min(a % U32, b % U32)))), [(-1, 5), (3, 5)]),
    (function(["i1", "i1"], "i1", "arith.maxsi %a0, %a1 : i1"),  # a true i1 is -1
     lambda a, b: a and b, [(True, False), (False, True), (True, True)]),
    (function(["i1", "i1"], "i1", "arith.minsi %a0, %a1 : i1"),
     lambda a, b: a or b, [(True, False), (False, True), (False, False)]),
]


@pytest.mark.parametrize(("text", "reference", "argsets"), CASES,
                         ids=["uitofp", "bitcast-to-f32", "bitcast-to-i32", "maxui", "minui",
                              "maxsi-i1", "minsi-i1"])
def test_the_interpreter_runs_what_native_code_runs(text, reference, argsets):
    for args in argsets:
        interpreted, native = both(text, *args)
        want = reference(*args)
        assert type(interpreted) is type(want), (args, interpreted)
        assert interpreted == native == want, (args, interpreted, native, want)


# i1 ops on rows of i1 as on i1 values (a true i1 is -1; 1 + 1 is 0), each a
# truth table in plain Python
I1_ROW_OPS = {"maxsi": lambda a, b: a and b, "minsi": lambda a, b: a or b,
              "addi": lambda a, b: a != b, "subi": lambda a, b: a != b,
              "muli": lambda a, b: a and b, "andi": lambda a, b: a and b,
              "ori": lambda a, b: a or b, "xori": lambda a, b: a != b}
I1_ROWS = ("func.func @rows(%a: tensor<?xi1>, %b: tensor<?xi1>) -> ("
           + ", ".join(["tensor<?xi1>"] * len(I1_ROW_OPS)) + ") {\n"
           + "".join(f"  %{name} = arith.{name} %a, %b : tensor<?xi1>\n" for name in I1_ROW_OPS)
           + "  func.return " + ", ".join(f"%{name}" for name in I1_ROW_OPS) + " : "
           + ", ".join(["tensor<?xi1>"] * len(I1_ROW_OPS)) + "\n}\n")


def test_i1_row_forms_compute_as_the_scalar_ops(tmp_path):
    """Rows of i1 (a byte each natively, 0 or 1 in the interpreter) took
    `maxsi` as `or` (1 > 0) in both, and `1 + 1` as 2, read back as true."""
    from xdsl.dialects import func

    from recir.frontier_compile import compile_rows

    a = np.array([1, 1, 0, 0] * 9, np.int32)  # (past one vector's lanes)
    b = np.array([1, 0, 1, 0] * 9, np.int32)
    interpreted = run_function(parse_module(make_context(), I1_ROWS), "rows", [a, b])
    function = next(op for op in parse_module(make_context(), I1_ROWS).ops
                    if isinstance(op, func.FuncOp))
    native = compile_rows([([function], None)], tmp_path).functions["rows"]([a, b])
    for k, (name, table) in enumerate(I1_ROW_OPS.items()):
        want = [bool(table(bool(x), bool(y))) for x, y in zip(a, b, strict=True)]
        assert [bool(v) for v in interpreted[k]] == want, name
        assert [bool(v) for v in native[k]] == want, name
