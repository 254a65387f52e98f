"""Elementwise loops over rows as calls of functions with `noalias` pointer
arguments (`row_kernels.apart`): each row's loop gets them, identical loops
share one function, LLVM vectorizes them with no run-time overlap checks,
and the results stay the interpreter's and the recursive function's, on one
thread and on a team, gradients too."""

from __future__ import annotations

import re

import llvmlite.binding as llvm_binding
import numpy as np
import pytest
from test_bilinear_code import compiled_ir
from test_invoke_to_frontier import trees
from test_per_row import assert_recursive_gradients
from xdsl.dialects import func, llvm

import recir
import recir.frontier_compile as frontier_compile
from recir.backend.engine import optimize, target_machine
from recir.context import make_context
from recir.frontier_compile import compile_rows
from recir.models import tree_lstm
from recir.parsing import parse_module
from recir.passes.llvm_functions import NOALIAS
from recir.passes.gemm_target import host_target
from recir.passes.row_kernels import APART
from recir.pipeline import FUSE, run_passes

# two chains of the same ops on different rows: two fused loops, one function
GATES = """
func.func @gates(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %a = tmath.sigmoid %x : tensor<?x8xf32>
  %b = tmath.tanh %a : tensor<?x8xf32>
  %c = tmath.mul %a, %b : tensor<?x8xf32>
  %d = tmath.sigmoid %y : tensor<?x8xf32>
  %e = tmath.tanh %d : tensor<?x8xf32>
  %f = tmath.mul %d, %e : tensor<?x8xf32>
  func.return %c, %f : tensor<?x8xf32>, tensor<?x8xf32>
}
"""


@pytest.mark.parametrize(("threads", "calls"), [(1, 2), (2, 1)])
def test_identical_row_loops_call_one_function_of_noalias_pointers(threads, calls):
    """On a team both loops are one outlined `.rows` (`row_products`), which
    makes the one call."""
    module = parse_module(make_context(), GATES)
    lowering = f"convert-tmath-to-loops{{row-threads={threads} row-team-work=0}}"
    run_passes(module, f"{FUSE},{lowering}")
    apart = [op for op in module.ops if isinstance(op, llvm.FuncOp)
             and op.sym_name.data.startswith(APART)]
    assert len(apart) == 1
    # the row's input and its output, both pointers: both noalias
    assert [n.value.data for n in apart[0].attributes[NOALIAS].data] == [0, 1]
    name = apart[0].sym_name.data
    made = [op for op in module.walk() if isinstance(op, llvm.CallOp)
            and op.callee is not None and op.callee.string_value() == name]
    assert len(made) == calls


# tanh on rows of 8 and of 16, on rows of scalars (a value, not a pointer),
# sigmoid on rows of 8, and tanh on rows of 8 again: four loops, five calls
LOOPS = """
func.func @loops(%x: tensor<?x8xf32>, %y: tensor<?x16xf32>, %s: tensor<?xf32>)
    -> (tensor<?x8xf32>, tensor<?x16xf32>, tensor<?xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
  %a = tmath.tanh %x : tensor<?x8xf32>
  %b = tmath.tanh %y : tensor<?x16xf32>
  %c = tmath.tanh %s : tensor<?xf32>
  %d = tmath.sigmoid %x : tensor<?x8xf32>
  %e = tmath.tanh %d : tensor<?x8xf32>
  func.return %a, %b, %c, %d, %e
      : tensor<?x8xf32>, tensor<?x16xf32>, tensor<?xf32>, tensor<?x8xf32>, tensor<?x8xf32>
}
"""


def test_row_loops_that_differ_get_functions_of_their_own(tmp_path):
    """Only identical loops share a function: another width, a scalar row or
    another op makes one of its own; the values stay NumPy's."""
    module = parse_module(make_context(), LOOPS)
    run_passes(module, "convert-tmath-to-loops")
    calls = [op.callee.string_value() for op in module.walk() if isinstance(op, llvm.CallOp)
             and op.callee is not None and op.callee.string_value().startswith(APART)]
    assert len(calls) == 5 and len(set(calls)) == 4 and calls[0] == calls[4]
    function = next(op for op in parse_module(make_context(), LOOPS).ops
                    if isinstance(op, func.FuncOp))
    native = compile_rows([([function], None)], tmp_path).functions["loops"]
    rng = np.random.default_rng(4)
    x, y, s = (rng.standard_normal(shape).astype(np.float32) for shape in ((5, 8), (5, 16), 5))
    a, b, c, d, e = native([x, y, s])
    sigmoid = 1 / (1 + np.exp(-x))
    for got, want in zip((a, b, c, d, e), (np.tanh(x), np.tanh(y), np.tanh(s), sigmoid,
                                           np.tanh(sigmoid)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def inputs(tree):
    return (tree.left, tree.right, tree.word, tree.label, tree.root)


def test_tree_lstm_row_loops_have_no_run_time_overlap_checks(tmp_path, monkeypatch):
    """The batched TreeLSTM's gate loops: `noalias` in the LLVM IR, vector
    code and no `memcheck`/`diff.check` blocks once optimized; the outputs
    the interpreter's, on trees whose heights mix leaves and inner nodes
    and on complete trees (every height one kind)."""
    modules = compiled_ir(monkeypatch, frontier_compile)
    params = tree_lstm.init_params(np.random.default_rng(1), hidden=16, vocab=100)
    traced = tree_lstm.trace_model(params)
    batched = recir.compile(traced, batching="frontier", cache_dir=tmp_path, threads=1)
    complete = recir.data.make_treebank(3, "balanced", num_leaves=8, seed=5)
    for group in (trees(), complete):
        batch = [inputs(t) for t in group]
        for item, (h, loss) in zip(batch, batched.batch(batch), strict=True):
            h_ref, loss_ref = traced.run(*item)
            np.testing.assert_allclose(h, h_ref, rtol=1e-4, atol=1e-5)
            assert loss == pytest.approx(loss_ref, rel=1e-4)
    post = [text for text in modules if f'@"{APART}' in text]
    assert post
    machine = target_machine()
    for text in post:
        assert "ptr noalias" in text
        module = llvm_binding.parse_assembly(text)
        optimize(module, machine, unrolling=False, slp=False)
        for function in module.functions:
            if function.name.startswith(APART) and not function.is_declaration:
                code = str(function)
                assert re.search(r"<\d+ x float>", code)  # vector code, looped or not
                assert "memcheck" not in code
                assert "diff.check" not in code


@pytest.mark.parametrize("threads", [1, 2])
def test_tree_lstm_frontier_gradients_stay_the_recursive_ones(tmp_path, threads):
    params = tree_lstm.init_params(np.random.default_rng(2), hidden=8, vocab=100)
    traced = tree_lstm.trace_model(params)
    assert_recursive_gradients(
        recir.value_and_grad(traced, batching="frontier", cache_dir=tmp_path, threads=threads),
        recir.value_and_grad(traced, batching="recursive", cache_dir=tmp_path),
        [inputs(t) for t in trees()], params)


# a chain that reads rows in place through a take (`row_lowering.in_place_takes`)
GATE = """
func.func @gate(%x: tensor<?x4xf32>, %i: tensor<?xi32>) -> tensor<?x4xf32> {
  %a = frontier.take %x[%i] : tensor<?x4xf32>, tensor<?xi32>
  %t = tmath.tanh %a : tensor<?x4xf32>
  %u = tmath.mul %t, %a : tensor<?x4xf32>
  func.return %u : tensor<?x4xf32>
}
"""
ROWS = np.arange(24, dtype=np.float32).reshape(6, 4) / 10
NUMBERS = np.array([1, 2, 0, 5, 3, 4], np.int32)  # row r reads row NUMBERS[r]


@pytest.mark.parametrize("over_the_input", [False, True])
def test_a_room_is_written_only_apart_from_the_rows_read_in_place(tmp_path, over_the_input):
    """A caller's room for the result (as a height loop hands one: rows of a
    table) gets the rows where no row the chain reads lies in it; over the
    input table itself (row 0's result would replace row 0, which row 2
    reads later, and the function's pointers would not be apart) the
    results go to the scratch and the table is left as it was."""
    module = parse_module(make_context(), GATE)
    function = next(op for op in module.ops if isinstance(op, func.FuncOp))
    native = compile_rows([([function], None)], tmp_path).functions["gate"]
    table = ROWS.copy()
    room = table if over_the_input else np.zeros_like(ROWS)
    call = native.function

    def with_room(*args):  # after the call resets the result's slot: a room there
        native.descriptors[0].length, native.descriptors[0].data = len(room), room.ctypes.data
        call(*args)

    native.function = with_room
    (out,) = native([table, NUMBERS])
    expected = np.tanh(ROWS[NUMBERS]) * ROWS[NUMBERS]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_array_equal(table, ROWS)
    assert (native.descriptors[0].data == room.ctypes.data) is not over_the_input
    if not over_the_input:
        np.testing.assert_allclose(room, expected, rtol=1e-6)


def chain(width: int) -> str:
    return f"""
func.func @gates(%x: tensor<?x{width}xf32>) -> tensor<?x{width}xf32> {{
  %a = tmath.sigmoid %x : tensor<?x{width}xf32>
  %b = tmath.tanh %x : tensor<?x{width}xf32>
  %c = tmath.mul %a, %b : tensor<?x{width}xf32>
  func.return %c : tensor<?x{width}xf32>
}}
"""


SCALAR_MATH = re.compile(r"= f(add|sub|mul|div) [a-z ]*float ")


@pytest.mark.parametrize("width", [5, 17, 150])
def test_row_loops_past_whole_vectors_have_no_scalar_remainder(tmp_path, monkeypatch, width):
    """A row wider than a vector but not a whole number of them (h=150):
    its last columns are a vector again, overlapping the whole vectors,
    instead of LLVM's scalar remainder loop; the values stay NumPy's. A row
    narrower than a vector keeps its one loop."""
    modules = compiled_ir(monkeypatch, frontier_compile)
    function = next(op for op in parse_module(make_context(), chain(width)).ops
                    if isinstance(op, func.FuncOp))
    native = compile_rows([([function], None)], tmp_path).functions["gates"]
    x = np.random.default_rng(5).standard_normal((3, width)).astype(np.float32) * 4
    (out,) = native([x])
    np.testing.assert_allclose(out, np.tanh(x) / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
    if width <= host_target().lanes:
        return
    module = llvm_binding.parse_assembly(next(t for t in modules if f'@"{APART}' in t))
    optimize(module, target_machine(), unrolling=False, slp=False)
    code = "".join(str(f) for f in module.functions if not f.is_declaration)
    assert re.search(r"<\d+ x float>", code)
    assert SCALAR_MATH.search(code) is None  # (the row's loop is inlined there)
