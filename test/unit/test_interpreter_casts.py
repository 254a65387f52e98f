"""Casts and signed and unsigned picks that native code runs and the
interpreter had no implementation of, or ran apart from it (`recir-run` of
hand-written IR): `uitofp`, `bitcast`, `maxui`, `minui`, and `maxsi`,
`minsi` of i1 (whose true is -1), each against NumPy's reading of the bits
and the native result."""

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
