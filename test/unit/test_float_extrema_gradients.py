"""Gradients of `arith.maximumf`, `minimumf`, `maxnumf` and `minnumf`, which
had no rule: the cotangent flows to the operand the op takes, the lhs on a
tie (-0.0 and +0.0 too); where an operand is NaN, to the NaN that maximumf /
minimumf propagate, to the other operand that maxnumf / minnumf keep. On a
recursive tree model in the interpreter, natively, and frontier-batched
(rows: the rule partitions them), against finite differences of a float64
Python twin and against that convention."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_arith_ceildiv_and_num_extrema import maxnumf, minnumf
from test_arith_floor_and_extrema import maximumf, minimumf
from test_gradients import numeric_grad

import recir
from recir.context import make_context
from recir.data import make_tree
from recir.parsing import parse_module

OPS = {"maximumf": maximumf, "minimumf": minimumf, "maxnumf": maxnumf, "minnumf": minnumf}

# leaf i: LEAF(u[w], v[w]); inner node: INNER(left, 0.75 * right)
MODEL = """
func.func @m(%left: tensor<?xi32>, %right: tensor<?xi32>, %word: tensor<?xi32>, %root: i32,
             %u: tensor<7xf32>, %v: tensor<7xf32>) -> f32 {
  invoke.subgraph @node(%i: i32) -> f32 {
    %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
    %zero = arith.constant 0 : i32
    %leaf = arith.cmpi slt, %l, %zero : i32
    %h = scf.if %leaf -> (f32) {
      %wd = tmath.extract %word[%i] : tensor<?xi32>, i32 -> i32
      %x = tmath.extract %u[%wd] : tensor<7xf32>, i32 -> f32
      %y = tmath.extract %v[%wd] : tensor<7xf32>, i32 -> f32
      %m = arith.LEAF %x, %y : f32
      scf.yield %m : f32
    } else {
      %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
      %hl = invoke.invoke @node(%l) : (i32) -> f32
      %hr = invoke.invoke @node(%r) : (i32) -> f32
      %k = arith.constant 0.75 : f32
      %s = arith.mulf %hr, %k : f32
      %m = arith.INNER %hl, %s : f32
      scf.yield %m : f32
    }
    invoke.return %h : f32
  }
  %h = invoke.invoke @node(%root) : (i32) -> f32
  func.return %h : f32
}
"""


def model(leaf: str, inner: str, params: dict[str, np.ndarray]) -> recir.TracedModel:
    text = MODEL.replace("LEAF", leaf).replace("INNER", inner)
    return recir.TracedModel(parse_module(make_context(), text), "m",
                             ["left", "right", "word", "root"], params)


def reference(tree, i: int, leaf: str, inner: str, p: dict[str, np.ndarray]) -> float:
    if tree.left[i] < 0:
        w = tree.word[i]
        return OPS[leaf](float(p["u"][w]), float(p["v"][w]))
    hl = reference(tree, tree.left[i], leaf, inner, p)
    hr = reference(tree, tree.right[i], leaf, inner, p)
    return OPS[inner](hl, 0.75 * hr)


def gradients(engine: str, m: recir.TracedModel, inputs: list[tuple]) -> dict[str, np.ndarray]:
    """Each parameter's gradient summed over the trees."""
    if engine == "frontier":
        return recir.value_and_grad(m, batching="frontier").batch(inputs)[1]
    function = recir.value_and_grad(m, engine=engine)
    total = {k: np.zeros_like(v) for k, v in m.params.items()}
    for item in inputs:
        for k, g in function(*item)[1].items():
            total[k] += g
    return total


ENGINES = ["interpret", "native", "frontier"]
PAIRS = [("maxnumf", "minimumf"), ("minnumf", "maximumf"), ("maximumf", "minnumf"),
         ("minimumf", "maxnumf")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("leaf", "inner"), PAIRS)
def test_extrema_gradients_against_finite_differences(leaf, inner, engine):
    rng = np.random.default_rng(3)
    params = {"u": rng.standard_normal(7).astype(np.float32),
              "v": rng.standard_normal(7).astype(np.float32)}
    trees = [make_tree(shape, n, rng, vocab_size=7)
             for shape, n in [("moderate", 5), ("balanced", 4), ("linear", 6), ("moderate", 1)]]
    inputs = [(t.left, t.right, t.word, t.root) for t in trees]
    got = gradients(engine, model(leaf, inner, params), inputs)
    want = numeric_grad(lambda p: sum(reference(t, t.root, leaf, inner, p) for t in trees),
                        params)
    assert any(np.abs(g).max() > 0 for g in want.values())
    for name in params:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


# one single-leaf tree per word w, its output OP(u[w], v[w]): ties, signed
# zeros, NaN on either side, and each side larger
U = [1.5, -0.0, 0.0, math.nan, 2.0, 1.0, -4.0]
V = [1.5, 0.0, -0.0, 2.0, math.nan, 3.0, -5.0]


def takes_lhs(op: str, a: float, b: float) -> bool:
    """The convention in plain Python: the lhs on a tie, else the operand
    whose value the op returns (maximumf / minimumf: a NaN operand)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) if op in ("maximumf", "minimumf") else math.isnan(b)
    return a == b or OPS[op](a, b) == a


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("op", sorted(OPS))
def test_extrema_gradient_goes_to_the_operand_taken(op, engine):
    params = {"u": np.array(U, np.float32), "v": np.array(V, np.float32)}
    m = model(op, op, params)
    inputs = [(np.array([-1], np.int32), np.array([-1], np.int32), np.array([w], np.int32), 0)
              for w in range(len(U))]
    got = gradients(engine, m, inputs)
    lhs = np.array([takes_lhs(op, a, b) for a, b in zip(U, V, strict=True)])
    np.testing.assert_array_equal(got["u"], lhs.astype(np.float32))
    np.testing.assert_array_equal(got["v"], (~lhs).astype(np.float32))
