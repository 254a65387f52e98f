"""Arguments are checked where they are converted, the same on every path
(interpreter, recursive native, `.batch`, frontier, gradients): structure
arrays of another integer width are range-checked before narrowing, floats
and non-numeric arrays are refused, scalars fit their type (i1: 0 or 1)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import recir
from recir.context import make_context
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.models import tree_rnn
from recir.parsing import parse_module
from recir.pipeline import compile_module
from recir.tools import recir_run


@pytest.fixture(scope="module")
def model():
    params = tree_rnn.init_params(np.random.default_rng(0), vocab=100)
    traced = tree_rnn.trace_model(params)
    tree = make_treebank(1, seed=3)[0]
    paths = {
        "native": recir.compile(traced, threads=1),
        "frontier": recir.compile(traced, batching="frontier"),
        "grad": recir.value_and_grad(traced, threads=1),
        "grad-frontier": recir.value_and_grad(traced, batching="frontier"),
        "auto": recir.compile(traced, batching="auto", threads=2),
        "grad-auto": recir.value_and_grad(traced, batching="auto", threads=2),
    }
    return traced, params, tree, paths


def calls(model):
    """Every way to run the model on one tree's arguments."""
    traced, params, _, paths = model
    yield "interpreter", lambda *a: run_function(traced.module, traced.entry,
                                                 [*a, *params.values()])
    for name, fn in paths.items():
        yield name, fn
        yield f"{name}.batch", lambda *a, fn=fn: fn.batch([a])[0]


def loss_of(result) -> float:
    value = result[0] if isinstance(result[0], tuple) else result
    return float(value[-1])


def test_wider_structure_arrays_in_range_give_the_same_result(model):
    _, params, tree, _ = model
    expected = tree_rnn.reference(tree, tree.root, params)[1]
    for dtype in (np.int64, np.uint16):
        word = np.maximum(tree.word, 0).astype(dtype)  # -1 marks inner nodes: unread
        for name, call in calls(model):
            got = loss_of(call(tree.left.astype(np.int64), tree.right, word, tree.label,
                               tree.root))
            assert got == pytest.approx(expected, rel=1e-5), (name, dtype)


@pytest.mark.parametrize(("dtype", "offset"), [(np.int64, 2**32), (np.uint64, 2**32),
                                               (np.int64, -2**32), (np.uint32, 2**31)])
def test_word_ids_that_do_not_fit_are_refused_on_every_path(model, dtype, offset):
    _, _, tree, _ = model
    word = tree.word.astype(np.int64) + offset
    if offset < 0:
        word[1:] = tree.word[1:]
    for name, call in calls(model):
        with pytest.raises(RecirError, match=r"argument 2 \(tensor<\?xi32>\) holds "
                                             r"-?\d+, which does not fit in int32"):
            call(tree.left, tree.right, word.astype(dtype), tree.label, tree.root)
        assert name


@pytest.mark.parametrize("argument", [0, 2])
def test_float_structure_arrays_are_refused_on_every_path(model, argument):
    _, _, tree, _ = model
    args = [tree.left, tree.right, tree.word, tree.label, tree.root]
    args[argument] = args[argument].astype(np.float64)
    for _, call in calls(model):
        with pytest.raises(RecirError, match=f"argument {argument} .* expects integers, "
                                             "got dtype float64"):
            call(*args)


@pytest.mark.parametrize("argument", [0, 3])
def test_zero_dimensional_structure_arrays_are_refused_on_every_path(model, argument):
    _, _, tree, _ = model
    args = [tree.left, tree.right, tree.word, tree.label, tree.root]
    args[argument] = np.array(3, np.int32)
    for name, call in calls(model):
        with pytest.raises(RecirError, match=f"argument {argument} .* got an array of "
                                             r"shape \(\)"):
            call(*args)
        assert name


def batches(model):
    """Every `.batch` (the interpreter has none)."""
    _, _, _, paths = model
    for name, fn in paths.items():
        yield name, fn.batch


def test_malformed_batches_are_refused_on_every_path(model):
    _, _, tree, _ = model
    args = (tree.left, tree.right, tree.word, tree.label, tree.root)
    # (a generator would be used up by the first look at it: `auto` returned [])
    bad = [(lambda: (a for a in [args, args]),
            r"a batch .* is a list or tuple of input tuples, got generator"),
           (lambda: [args, None], r"batch element 1 .* is a list or tuple of inputs, "
                                  "got NoneType"),
           (lambda: args, r"batch element 0 .* is a list or tuple of inputs, got ndarray"),
           (lambda: [args, args[:3]], r"takes 5 inputs, got 3")]
    for name, batch in batches(model):
        for items, message in bad:
            with pytest.raises(RecirError, match=message):
                batch(items())
        assert name


def test_a_batch_error_names_the_element_at_fault(model):
    """A bad input's check named no element, and a native check on a team or
    in the frontier's batch raised for the batch as a whole: the message
    names the element (the first that fails alone, run again by itself)."""
    traced, _, _, paths = model
    teams = {"native-team": recir.compile(traced, threads=2),
             "grad-team": recir.value_and_grad(traced, threads=2)}
    good = [(t.left, t.right, t.word, t.label, t.root)
            for t in make_treebank(6, seed=5, vocab_size=100)]
    out_of_range = list(good[4])
    out_of_range[2] = np.where(good[4][0] < 0, 10**6, -1).astype(np.int32)
    floats = list(good[2])
    floats[0] = floats[0].astype(np.float64)
    for name, fn in {**paths, **teams}.items():
        before = fn.batch(good)
        for at, bad, message in [(4, out_of_range, r"'tmath.gather' op index 1000000 out of range for length 100 "),
                                 (2, floats, r"argument 0 .* expects integers")]:
            with pytest.raises(RecirError, match=rf"{message}.* \(batch element {at}\)$"):
                fn.batch([*good[:at], tuple(bad), *good[at + 1:]])
        after = fn.batch(good)  # (and the function is whole after the error)
        outputs = [o if name.startswith("grad") else (o, {}) for o in (before, after)]
        assert [loss_of(r) for r in outputs[0][0]] == [loss_of(r) for r in outputs[1][0]], name


SCALARS = """func.func @f(%a: i32, %b: i64, %c: i1) -> i64 {
  %e = arith.extsi %a : i32 to i64
  %s = arith.addi %e, %b : i64
  %z = arith.extui %c : i1 to i64
  %t = arith.addi %s, %z : i64
  func.return %t : i64
}
"""


@pytest.fixture(scope="module")
def scalar_paths():
    module = parse_module(make_context(), SCALARS, "scalars.mlir")
    native = compile_module(module, "f")
    return {"interpreter": lambda *a: run_function(module, "f", a), "native": native}


BAD_SCALARS = [
    ((2**31, 0, 0), r"argument 0 \(i32\) does not fit: 2147483648 is outside "
                    r"\[-2147483648, 2147483647\]"),
    ((-(2**31) - 1, 0, 0), r"argument 0 \(i32\) does not fit"),
    ((0, 2**63, 0), r"argument 1 \(i64\) does not fit: 9223372036854775808 is outside "
                    r"\[-9223372036854775808, 9223372036854775807\]"),
    ((0, 0, 2), r"argument 2 \(i1\) does not fit: 2 is outside \[0, 1\]"),
    ((0, 0, -1), r"argument 2 \(i1\) does not fit: -1 is outside \[0, 1\]"),
    ((0, 0, 1.0), r"argument 2 \(i1\) expects an integer"),
    # a bool is an i1's only (it was taken as 0 or 1 for any integer)
    ((True, 0, 0), r"argument 0 \(i32\) expects an integer, got True"),
    ((0, np.bool_(False), 0), r"argument 1 \(i64\) expects an integer, got "),
]


@pytest.mark.parametrize(("args", "message"), BAD_SCALARS)
def test_scalars_out_of_range_are_refused_by_interpreter_and_jit(scalar_paths, args,
                                                                 message):
    for call in scalar_paths.values():
        with pytest.raises(RecirError, match=message):
            call(*args)


def test_scalars_at_the_limits_are_accepted(scalar_paths):
    cases = [((2**31 - 1, 2**62, True), 2**31 - 1 + 2**62 + 1),
             ((-(2**31), -(2**62), False), -(2**31) - 2**62),
             ((np.int64(5), np.uint8(7), np.bool_(True)), 13)]
    for args, expected in cases:
        for name, call in scalar_paths.items():
            assert call(*args) == (expected,), name


@pytest.mark.parametrize("mode", ["--interpret", "--jit"])
def test_recir_run_refuses_an_i32_argument_that_does_not_fit(tmp_path, capsys, mode):
    (tmp_path / "s.mlir").write_text(SCALARS)
    args = [str(tmp_path / "s.mlir"), "--entry", "f", mode]
    assert recir_run.main([*args, "--arg", "2147483647", "--arg", "1", "--arg", "1"]) == 0
    assert capsys.readouterr().out == f"{2**31 + 1}\n"
    assert recir_run.main([*args, "--arg", "2147483648", "--arg", "1", "--arg", "0"]) == 1
    err = capsys.readouterr().err
    # named as the user gave it: the first --arg (the interpreter counts from 0)
    assert err.count("error:") == 1 and "--arg 1 ('2147483648', i32) does not fit" in err


VEC = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tmath.add %x, %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""
NON_NUMERIC = {
    "str": np.array(["a", "b", "c", "d"]),
    "bytes": np.array([b"a", b"b", b"c", b"d"]),
    "datetime": np.array(["2020-01-01"] * 4, dtype="datetime64[D]"),
    "timedelta": np.arange(4).astype("timedelta64[s]"),
    "complex": np.ones(4, np.complex64),
    "structured": np.zeros(4, dtype=[("a", "f4")]),
}


@pytest.mark.parametrize("kind", sorted(NON_NUMERIC))
def test_non_numeric_arrays_are_refused(tmp_path, capsys, kind):
    value = NON_NUMERIC[kind]
    module = parse_module(make_context(), VEC, "vec.mlir")
    with pytest.raises(RecirError, match="expects a numeric array"):
        run_function(module, "f", [value])
    np.save(tmp_path / "x.npy", value)
    (tmp_path / "vec.mlir").write_text(VEC)
    assert recir_run.main([str(tmp_path / "vec.mlir"), "--entry", "f", "--interpret",
                           "--arg", str(tmp_path / "x.npy")]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "arguments are numeric" in err, err


def test_numeric_arrays_of_any_width_are_converted(tmp_path):
    module = parse_module(make_context(), VEC, "vec.mlir")
    for value in (np.arange(4, dtype=np.int64), np.arange(4, dtype=np.uint8),
                  np.array([True, False, True, True]), np.arange(4, dtype=np.float64)):
        (got,) = run_function(module, "f", [value])
        np.testing.assert_array_equal(got, 2 * value.astype(np.float32))


def test_finite_floats_beyond_float32_are_refused_not_made_infinite():
    """float64 1e300 became an f32 inf silently (a scalar is refused); NaN and
    inf given stay as they are, values that round to float32's largest pass."""
    module = parse_module(make_context(), VEC, "vec.mlir")
    native = compile_module(module, "f")
    paths = {"interpreter": lambda x: run_function(module, "f", [x]), "native": native,
             "native.batch": lambda x: native.batch([(x,)])[0]}
    top = float(np.finfo(np.float32).max)
    for name, call in paths.items():
        for bad, shown in [(1e300, "1e+300"), (-3.5e38, "-3.5e+38")]:
            with pytest.raises(RecirError, match=re.escape(
                    f"argument 0 (tensor<4xf32>) holds {shown}, which is beyond float32's "
                    "range")):
                call(np.array([0.0, bad, np.nan, np.inf]))
        (got,) = call(np.array([top, -top, np.nan, -np.inf]))
        np.testing.assert_array_equal(got, [np.inf, -np.inf, np.nan, -np.inf], err_msg=name)
