"""Every tmath op through the interpreter against an independent NumPy formula."""

from __future__ import annotations

import numpy as np
import pytest

from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.parsing import parse_module

RNG = np.random.default_rng(0)


def run_op(op_text: str, arg_types: list[str], result_type: str, *args: object):
    """Run `%r = <op_text>` in a function of the given argument types."""
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(arg_types))
    text = (
        f"func.func @f({params}) -> {result_type} {{\n"
        f"  %r = {op_text}\n"
        f"  func.return %r : {result_type}\n}}\n"
    )
    (result,) = run_function(parse_module(make_context(), text), "f", list(args))
    return result


def vec(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


UNARY = {
    "neg": lambda x: -x,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "relu": lambda x: np.where(x > 0, x, 0),
    "exp": np.exp,
    "log": lambda x: np.log(np.abs(x)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str):
    x = vec(5)
    if name == "log":
        x = np.abs(x) + 0.1
    got = run_op(f"tmath.{name} %a0 : tensor<5xf32>", ["tensor<5xf32>"], "tensor<5xf32>", x)
    np.testing.assert_allclose(got, UNARY[name](x), rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "formula"),
    [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide)],
)
def test_binary(name: str, formula):
    a, b = vec(2, 3), vec(2, 3) + 3
    t = "tensor<2x3xf32>"
    got = run_op(f"tmath.{name} %a0, %a1 : {t}", [t, t], t, a, b)
    np.testing.assert_allclose(got, formula(a, b), rtol=1e-6)


def test_matvec_and_matmul():
    w, x, b = vec(4, 3), vec(3), vec(3, 2)
    got = run_op(
        "tmath.matvec %a0, %a1 : tensor<4x3xf32>, tensor<3xf32> -> tensor<4xf32>",
        ["tensor<4x3xf32>", "tensor<3xf32>"], "tensor<4xf32>", w, x,
    )
    expected = [sum(float(w[i, j]) * float(x[j]) for j in range(3)) for i in range(4)]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    got = run_op(
        "tmath.matmul %a0, %a1 : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>",
        ["tensor<4x3xf32>", "tensor<3x2xf32>"], "tensor<4x2xf32>", w, b,
    )
    np.testing.assert_allclose(got, w @ b, rtol=1e-5)


def test_bilinear_is_x_v_y_per_slice():
    v, x, y = vec(2, 3, 4), vec(3), vec(4)
    got = run_op(
        "tmath.bilinear %a0, %a1, %a2 : tensor<2x3x4xf32>, tensor<3xf32>, "
        "tensor<4xf32> -> tensor<2xf32>",
        ["tensor<2x3x4xf32>", "tensor<3xf32>", "tensor<4xf32>"], "tensor<2xf32>",
        v, x, y,
    )
    np.testing.assert_allclose(got, [x @ v[k] @ y for k in range(2)], rtol=1e-5)


def test_concat_slice_gather_extract_size():
    a, b = vec(2), vec(3)
    got = run_op(
        "tmath.concat %a0, %a1 : tensor<2xf32>, tensor<3xf32> -> tensor<5xf32>",
        ["tensor<2xf32>", "tensor<3xf32>"], "tensor<5xf32>", a, b,
    )
    np.testing.assert_array_equal(got, np.r_[a, b])
    x = vec(7)
    got = run_op("tmath.slice %a0[2] : tensor<7xf32> -> tensor<3xf32>",
                 ["tensor<7xf32>"], "tensor<3xf32>", x)
    np.testing.assert_array_equal(got, x[2:5])
    table = vec(5, 3)
    got = run_op("tmath.gather %a0[%a1] : tensor<5x3xf32>, i32 -> tensor<3xf32>",
                 ["tensor<5x3xf32>", "i32"], "tensor<3xf32>", table, 4)
    np.testing.assert_array_equal(got, table[4])
    arr = np.array([5, -1, 7], dtype=np.int32)
    got = run_op("tmath.extract %a0[%a1] : tensor<?xi32>, i32 -> i32",
                 ["tensor<?xi32>", "i32"], "i32", arr, 2)
    assert got == 7
    got = run_op("tmath.size %a0 : tensor<?xi32> -> i32", ["tensor<?xi32>"], "i32", arr)
    assert got == 3


def test_reductions_softmax_and_loss():
    x = vec(5)
    t = "tensor<5xf32>"
    assert run_op(f"tmath.sum %a0 : {t} -> f32", [t], "f32", x) == pytest.approx(
        float(np.sum(x.astype(np.float64))), rel=1e-5)
    assert run_op(f"tmath.max %a0 : {t} -> f32", [t], "f32", x) == float(x.max())
    assert run_op(f"tmath.argmax %a0 : {t} -> i32", [t], "i32", x) == int(np.argmax(x))
    p = np.exp(x.astype(np.float64)) / np.exp(x.astype(np.float64)).sum()
    np.testing.assert_allclose(run_op(f"tmath.softmax %a0 : {t}", [t], t, x), p, rtol=1e-5)
    loss = run_op(f"tmath.softmax_xent %a0, %a1 : {t}, i32 -> f32", [t, "i32"], "f32", x, 3)
    assert loss == pytest.approx(-np.log(p[3]), rel=1e-5)


def test_constant_and_fill():
    got = run_op("tmath.constant dense<[1.0, 2.5]> : tensor<2xf32>", [], "tensor<2xf32>")
    np.testing.assert_array_equal(got, [1.0, 2.5])
    got = run_op("tmath.constant dense<0.5> : tensor<2x2xf32>", [], "tensor<2x2xf32>")
    np.testing.assert_array_equal(got, np.full((2, 2), 0.5))
    got = run_op("tmath.fill %a0 : f32 -> tensor<3xf32>", ["f32"], "tensor<3xf32>", 1.5)
    np.testing.assert_array_equal(got, [1.5, 1.5, 1.5])


@pytest.mark.parametrize("index", [-1, 3, 100])
def test_out_of_range_index_is_a_located_error(index: int):
    arr = np.array([5, -1, 7], dtype=np.int32)
    with pytest.raises(RecirError, match=r"<input>:2:\d+: error: 'tmath.extract' op index"):
        run_op("tmath.extract %a0[%a1] : tensor<?xi32>, i32 -> i32",
               ["tensor<?xi32>", "i32"], "i32", arr, index)


def test_argument_checks():
    t = "tensor<2xf32>"
    with pytest.raises(RecirError, match="takes 1 arguments, got 2"):
        run_op(f"tmath.neg %a0 : {t}", [t], t, vec(2), vec(2))
    with pytest.raises(RecirError, match=r"got an array of shape \(3,\)"):
        run_op(f"tmath.neg %a0 : {t}", [t], t, vec(3))
    arr = np.array([5, -1, 7], dtype=np.int32)
    with pytest.raises(RecirError, match="argument 1 .* expects an integer"):
        run_op("tmath.extract %a0[%a1] : tensor<?xi32>, i32 -> i32",
               ["tensor<?xi32>", "i32"], "i32", arr, 1.5)


DEEP = """
func.func @count(%n: i32) -> i32 {
  invoke.subgraph @down(%k: i32) -> i32 {
    %zero = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %c = arith.cmpi sle, %k, %zero : i32
    %r = scf.if %c -> (i32) {
      scf.yield %zero : i32
    } else {
      %k1 = arith.subi %k, %one : i32
      %a = invoke.invoke @down(%k1) : (i32) -> i32
      %s = arith.addi %a, %one : i32
      scf.yield %s : i32
    }
    invoke.return %r : i32
  }
  %r = invoke.invoke @down(%n) : (i32) -> i32
  func.return %r : i32
}
"""


def test_recursion_depth_counts_and_too_deep_is_an_error(monkeypatch):
    module = parse_module(make_context(), DEEP)
    assert run_function(module, "count", [3000]) == (3000,)
    import recir.interpreter as interpreter

    monkeypatch.setattr(interpreter, "MAX_PYTHON_FRAMES", 20_000)
    with pytest.raises(RecirError, match="recursion too deep"):
        run_function(module, "count", [100_000])


def test_calls_on_several_threads_put_the_recursion_limit_back():
    """Each call put back the limit it found: overlapping calls left the
    raised one for good, and plain Python recursion then overflowed the C
    stack (a segfault) instead of raising RecursionError."""
    import sys
    import threading

    module = parse_module(make_context(), DEEP)
    limit, stack = sys.getrecursionlimit(), threading.stack_size()
    results: list[tuple[int, ...]] = []

    def calls() -> None:
        results.extend(run_function(module, "count", [n]) for n in range(40))

    for _ in range(5):
        threads = [threading.Thread(target=calls) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert (sys.getrecursionlimit(), threading.stack_size()) == (limit, stack)
    assert sorted(results) == sorted([(n,) for n in range(40)] * 15)


def test_a_subgraphs_invocation_nests_in_its_definitions_scope(monkeypatch):
    """Each invocation's scope nested in its caller's: a closure value's
    lookup walked every frame of the recursion, and a chain of depth d took
    d^2 steps (depth 4000: 29 s). Nested in the defining scope, the chain
    an op looks values up in stays as short as the code's nesting."""
    from xdsl.interpreter import Interpreter

    module = parse_module(make_context(), DEEP)
    longest = [0]
    run_region = Interpreter.run_ssacfg_region

    def measured(self, region, args, name="unknown"):
        scope, chain = self._ctx, 0
        while scope is not None:
            scope, chain = scope.parent, chain + 1
        longest[0] = max(longest[0], chain)
        return run_region(self, region, args, name)

    monkeypatch.setattr(Interpreter, "run_ssacfg_region", measured)
    assert run_function(module, "count", [500]) == (500,)
    assert 2 <= longest[0] <= 6  # the function's, the subgraph's, the branch's scopes


def test_a_load_of_a_slot_never_saved_is_a_located_error():
    """A frame passed on and read where nothing was saved: a KeyError."""
    module = parse_module(make_context(), """func.func @f() -> f32 {
  %f = tape.new 8 : !tape.frame
  %y = func.call @g(%f) : (!tape.frame) -> f32
  func.return %y : f32
}
func.func @g(%f: !tape.frame) -> f32 {
  %y = tape.load %f[0] : f32
  func.return %y : f32
}""", "frames.mlir")
    with pytest.raises(RecirError, match=r"^frames.mlir:7:3: error: 'tape.load' op reads "
                                         r"offset 0 of a frame where nothing was saved$"):
        run_function(module, "f", [])
