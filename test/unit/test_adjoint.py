"""The adjoint ops in both engines against NumPy formulas, and their verifiers.

Shapes (7x5, 3x4x6) are not multiples of vector widths, so the kernels'
remainder loops run too; 150x300 covers the vectorized bodies. Accumulation
ops must add into the caller's own array: both engines pass float32
C-contiguous arrays through without copying.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.traits import MemoryEffectKind, Pure, get_effects

import recir
from recir.context import make_context
from recir.dialects import adjoint, tmath
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.parsing import parse_module

ENGINES = ["interpreter", "native"]


def arr(*shape: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([seed, *shape])
    return rng.standard_normal(shape).astype(np.float32)


def type_of(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"tensor<{'x'.join(map(str, value.shape))}xf32>"
    return "i32" if isinstance(value, int) else "f32"


def module(body: str, args: dict[str, Any], result: str | None = None) -> ModuleOp:
    """`@f(args)` running `body`; with `result`, `%r` of that type is returned."""
    params = ", ".join(f"%{name}: {type_of(v)}" for name, v in args.items())
    ret = f"func.return %r : {result}" if result else "func.return"
    arrow = f" -> {result}" if result else ""
    text = f"func.func @f({params}){arrow} {{\n{body}\n{ret}\n}}"
    return parse_module(make_context(), text, "adjoint.mlir")


def run(engine: str, mod: ModuleOp, args: list[Any], cache_dir: Any) -> tuple[Any, ...]:
    if engine == "interpreter":
        return run_function(mod, "f", args)
    return recir.compile(mod, "f", cache_dir=cache_dir, threads=1)(*args)


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    scale = float(np.abs(want).max()) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale)


def relu_grad_inputs() -> tuple[np.ndarray, np.ndarray]:
    y = arr(3, 4, 6)
    y[0, 0, :3] = 0.0  # relu's output is exactly 0 where it was cut off
    return y, arr(3, 4, 6, seed=1)


Case = tuple[str, dict[str, Any], str, Callable[..., np.ndarray]]

VALUE_CASES: dict[str, Case] = {
    "vecmat": ("%r = adjoint.vecmat %dy, %w : tensor<7xf32>, tensor<7x5xf32> -> "
               "tensor<5xf32>", {"dy": arr(7), "w": arr(7, 5)}, "tensor<5xf32>",
               lambda dy, w: w.T @ dy),
    "vecmat_large": ("%r = adjoint.vecmat %dy, %w : tensor<150xf32>, "
                     "tensor<150x300xf32> -> tensor<300xf32>",
                     {"dy": arr(150), "w": arr(150, 300)}, "tensor<300xf32>",
                     lambda dy, w: w.T @ dy),
    "transpose": ("%r = adjoint.transpose %a : tensor<7x5xf32> -> tensor<5x7xf32>",
                  {"a": arr(7, 5)}, "tensor<5x7xf32>", lambda a: a.T),
    "pad": ("%r = adjoint.pad %dy[4] : tensor<3xf32> -> tensor<7xf32>",
            {"dy": arr(3)}, "tensor<7xf32>",
            lambda dy: np.concatenate([np.zeros(4), dy])),
    "pad_rows": ("%r = adjoint.pad %dy[2] : tensor<3x5xf32> -> tensor<7x5xf32>",
                 {"dy": arr(3, 5)}, "tensor<7x5xf32>",
                 lambda dy: np.concatenate([np.zeros((2, 5)), dy, np.zeros((2, 5))])),
    "onehot": ("%r = adjoint.onehot %k, %s : i32, f32 -> tensor<7xf32>",
               {"k": 3, "s": 2.5}, "tensor<7xf32>", lambda k, s: np.eye(7)[k] * s),
    "relu_grad": ("%r = adjoint.relu_grad %y, %dy : tensor<3x4x6xf32>",
                  dict(zip(("y", "dy"), relu_grad_inputs())), "tensor<3x4x6xf32>",
                  lambda y, dy: np.where(y > 0, dy, 0)),
    # with a tmath op after it, native code fuses relu_grad into one loop
    "relu_grad_fused": ("%g = adjoint.relu_grad %y, %dy : tensor<3x4x6xf32>\n"
                        "%r = tmath.mul %g, %y : tensor<3x4x6xf32>",
                        dict(zip(("y", "dy"), relu_grad_inputs())), "tensor<3x4x6xf32>",
                        lambda y, dy: np.where(y > 0, dy, 0) * y),
    "bilinear_lhs": ("%r = adjoint.bilinear_lhs %v, %dr, %y : tensor<3x4x6xf32>, "
                     "tensor<3xf32>, tensor<6xf32> -> tensor<4xf32>",
                     {"v": arr(3, 4, 6), "dr": arr(3), "y": arr(6)}, "tensor<4xf32>",
                     lambda v, dr, y: np.einsum("kij,k,j->i", v, dr, y)),
    "bilinear_rhs": ("%r = adjoint.bilinear_rhs %v, %dr, %x : tensor<3x4x6xf32>, "
                     "tensor<3xf32>, tensor<4xf32> -> tensor<6xf32>",
                     {"v": arr(3, 4, 6), "dr": arr(3), "x": arr(4)}, "tensor<6xf32>",
                     lambda v, dr, x: np.einsum("kij,k,i->j", v, dr, x)),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", VALUE_CASES)
def test_value_ops_match_numpy(name, engine, cache_dir):
    body, args, result, formula = VALUE_CASES[name]
    mod = module(body, args, result)
    (got,) = run(engine, mod, list(args.values()), cache_dir)
    want = formula(*(np.float64(v) if isinstance(v, np.ndarray) else v
                     for v in args.values()))
    assert got.dtype == np.float32
    assert_close(got, want)


ACC_CASES: dict[str, Case] = {
    "accumulate": ("adjoint.accumulate %acc, %v : tensor<3x4x6xf32>, tensor<3x4x6xf32>",
                   {"acc": arr(3, 4, 6), "v": arr(3, 4, 6, seed=1)}, "",
                   lambda acc, v: acc + v),
    "accumulate_outer": ("adjoint.accumulate_outer %acc, %a, %b : tensor<7x5xf32>, "
                         "tensor<7xf32>, tensor<5xf32>",
                         {"acc": arr(7, 5), "a": arr(7), "b": arr(5)}, "",
                         lambda acc, a, b: acc + np.outer(a, b)),
    "accumulate_outer_large": ("adjoint.accumulate_outer %acc, %a, %b : "
                               "tensor<150x300xf32>, tensor<150xf32>, tensor<300xf32>",
                               {"acc": arr(150, 300), "a": arr(150), "b": arr(300)}, "",
                               lambda acc, a, b: acc + np.outer(a, b)),
    "accumulate_row": ("adjoint.accumulate_row %acc[%k], %v : tensor<7x5xf32>, i32, "
                       "tensor<5xf32>", {"acc": arr(7, 5), "k": 4, "v": arr(5)}, "",
                       lambda acc, k, v: acc + np.outer(np.eye(7)[k], v)),
    # two adds into one buffer in one call: the second sees the first
    "accumulate_row_twice": ("adjoint.accumulate_row %acc[%k], %v : tensor<7x5xf32>, "
                             "i32, tensor<5xf32>\n"
                             "adjoint.accumulate_row %acc[%k], %v : tensor<7x5xf32>, "
                             "i32, tensor<5xf32>",
                             {"acc": arr(7, 5), "k": 6, "v": arr(5)}, "",
                             lambda acc, k, v: acc + 2 * np.outer(np.eye(7)[k], v)),
    "accumulate_bilinear": ("adjoint.accumulate_bilinear %acc, %dr, %x, %y : "
                            "tensor<3x4x6xf32>, tensor<3xf32>, tensor<4xf32>, "
                            "tensor<6xf32>", {"acc": arr(3, 4, 6), "dr": arr(3),
                                              "x": arr(4), "y": arr(6)}, "",
                            lambda acc, dr, x, y: acc + np.einsum("k,i,j->kij",
                                                                  dr, x, y)),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ACC_CASES)
def test_accumulation_adds_into_the_callers_array(name, engine, cache_dir):
    body, args, _, formula = ACC_CASES[name]
    mod = module(body, args)
    values = [v.copy() if isinstance(v, np.ndarray) else v for v in args.values()]
    acc = values[0]
    want = formula(*(np.float64(v) if isinstance(v, np.ndarray) else v for v in values))
    assert run(engine, mod, values, cache_dir) == ()
    assert_close(acc, want)


def test_interpreter_passes_the_array_object_through():
    """`run_function` hands the caller's float32 array itself to the op."""
    acc, v = np.zeros(5, np.float32), np.arange(5, dtype=np.float32)
    mod = module("adjoint.accumulate %acc, %v : tensor<5xf32>, tensor<5xf32>",
                 {"acc": acc, "v": v})
    run_function(mod, "f", [acc, v])
    run_function(mod, "f", [acc, v])
    np.testing.assert_array_equal(acc, 2 * v)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("index", [7, -1])
def test_onehot_index_out_of_range(engine, index, cache_dir):
    mod = module("%r = adjoint.onehot %k, %s : i32, f32 -> tensor<7xf32>",
                 {"k": 0, "s": 1.0}, "tensor<7xf32>")
    with pytest.raises(RecirError, match="'adjoint.onehot' op index .*out of range"):
        run(engine, mod, [index, 1.0], cache_dir)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("index", [7, -1])
def test_accumulate_row_index_out_of_range(engine, index, cache_dir):
    acc, v = arr(7, 5), arr(5)
    before = acc.copy()
    mod = module("adjoint.accumulate_row %acc[%k], %v : tensor<7x5xf32>, i32, "
                 "tensor<5xf32>", {"acc": acc, "k": 0, "v": v})
    message = "'adjoint.accumulate_row' op index .*out of range"
    with pytest.raises(RecirError, match=message):
        run(engine, mod, [acc, index, v], cache_dir)
    np.testing.assert_array_equal(acc, before)


INVALID = [
    ("%r = adjoint.vecmat %a, %w : tensor<4xf32>, tensor<7x5xf32> -> tensor<5xf32>",
     "'adjoint.vecmat' op vector has shape 4, expected 7"),
    ("%r = adjoint.vecmat %b, %w : tensor<7xf32>, tensor<7x5xf32> -> tensor<7xf32>",
     "'adjoint.vecmat' op result has shape 7, expected 5"),
    ("%r = adjoint.transpose %w : tensor<7x5xf32> -> tensor<7x5xf32>",
     "'adjoint.transpose' op result has shape 7x5, expected 5x7"),
    ("%r = adjoint.transpose %b : tensor<7xf32> -> tensor<7xf32>",
     "'adjoint.transpose' op input must have rank 2, got shape 7"),
    ("%r = adjoint.pad %a[5] : tensor<4xf32> -> tensor<7xf32>",
     r"'adjoint.pad' op rows \[5, 9\) are out of bounds for shape 7"),
    ("%r = adjoint.pad %w[0] : tensor<7x5xf32> -> tensor<9x4xf32>",
     "'adjoint.pad' op input shape 7x5 does not pad to 9x4"),
    ("%r = adjoint.onehot %k, %s : i32, f32 -> tensor<7x5xf32>",
     "'adjoint.onehot' op result must have rank 1, got shape 7x5"),
    ("%r = adjoint.relu_grad %a, %b : tensor<4xf32>, tensor<7xf32>",
     "'adjoint.relu_grad' op operand shapes differ: lhs 4, rhs 7"),
    ("%r = adjoint.bilinear_lhs %v, %a, %c : tensor<3x4x6xf32>, tensor<4xf32>, "
     "tensor<6xf32> -> tensor<4xf32>", "'adjoint.bilinear_lhs' op scale has shape 4, "
     "expected 3"),
    ("%r = adjoint.bilinear_lhs %v, %d, %a : tensor<3x4x6xf32>, tensor<3xf32>, "
     "tensor<4xf32> -> tensor<4xf32>", "'adjoint.bilinear_lhs' op other has shape 4, "
     "expected 6"),
    ("%r = adjoint.bilinear_rhs %v, %d, %a : tensor<3x4x6xf32>, tensor<3xf32>, "
     "tensor<4xf32> -> tensor<4xf32>", "'adjoint.bilinear_rhs' op result has shape 4, "
     "expected 6"),
    ("adjoint.accumulate %w, %a : tensor<7x5xf32>, tensor<4xf32>",
     "'adjoint.accumulate' op value has shape 4, expected 7x5"),
    ("adjoint.accumulate_outer %b, %b, %b : tensor<7xf32>, tensor<7xf32>, "
     "tensor<7xf32>",
     "'adjoint.accumulate_outer' op accumulator must have rank 2, got shape 7"),
    ("adjoint.accumulate_row %w[%k], %b : tensor<7x5xf32>, i32, tensor<7xf32>",
     "'adjoint.accumulate_row' op value has shape 7, expected 5"),
    ("adjoint.accumulate_bilinear %v, %d, %a, %a : tensor<3x4x6xf32>, tensor<3xf32>, "
     "tensor<4xf32>, tensor<4xf32>",
     "'adjoint.accumulate_bilinear' op rhs has shape 4, expected 6"),
    ("%t = tmath.add %b, %b : tensor<7xf32>\n"
     "adjoint.accumulate %t, %b : tensor<7xf32>, tensor<7xf32>",
     r"'adjoint.accumulate' op the accumulator must be an argument of the enclosing "
     r"func.func \(a buffer the caller owns\)"),
]
ARGS = {"a": arr(4), "b": arr(7), "c": arr(6), "d": arr(3), "w": arr(7, 5),
        "v": arr(3, 4, 6), "k": 0, "s": 1.0}


@pytest.mark.parametrize(("body", "message"), INVALID, ids=lambda x: x.split(" ")[0])
def test_verifier_errors_name_the_shapes(body, message):
    with pytest.raises(RecirError, match=message):
        module(body, ARGS)


def test_accumulator_from_another_block_is_rejected():
    """An argument of a later block is not a buffer the caller passed."""
    text = """
    func.func @f(%b: tensor<7xf32>) {
      cf.br ^next(%b : tensor<7xf32>)
    ^next(%acc: tensor<7xf32>):
      adjoint.accumulate %acc, %b : tensor<7xf32>, tensor<7xf32>
      func.return
    }"""
    with pytest.raises(RecirError, match="must be an argument of the enclosing"):
        parse_module(make_context(), text)


def test_traits():
    """Value ops are pure; accumulation writes its target, row locks order
    memory and a log reservation writes the log, so DCE keeps them."""
    assert adjoint.ReluGradOp.has_trait(tmath.Elementwise)
    for op in adjoint.Adjoint.operations:
        writes = issubclass(op, adjoint.AccumulateBase | adjoint.LockRowOp | adjoint.UnlockRowOp
                            | adjoint.LogReserveOp)
        assert op.has_trait(Pure) != writes, op.name
    mod = module(ACC_CASES["accumulate_outer"][0], ACC_CASES["accumulate_outer"][1])
    acc_op = next(op for op in mod.walk() if isinstance(op, adjoint.AccumulateOuterOp))
    assert not acc_op.has_trait(Pure)
    effects = get_effects(acc_op)
    assert effects is not None
    assert {(e.kind, e.value) for e in effects} == {
        (MemoryEffectKind.WRITE, acc_op.acc)}
