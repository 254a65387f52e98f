"""What `compile` lowers: only the functions the entry reaches, splats as loops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recir.context import make_context
from recir.gradients import GradFunction
from recir.models import tree_lstm
from recir.parsing import parse_module
from recir.pipeline import compile_module, lower, native_ir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"
# fib (examples/ir/fib.mlir) and a function of splat constants beside it
TWO_ENTRIES = (EXAMPLES / "fib.mlir").read_text() + """
func.func @sums() -> f32 {
  %z = tmath.constant dense<2.5> : tensor<64xf32>
  %k = tmath.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %a = tmath.sum %z : tensor<64xf32> -> f32
  %b = tmath.sum %k : tensor<4xf32> -> f32
  %s = arith.addf %a, %b : f32
  func.return %s : f32
}
"""


def fib(n: int) -> int:
    return 1 if n <= 1 else fib(n - 1) + fib(n - 2)


@pytest.fixture(scope="module")
def module():
    return parse_module(make_context(), TWO_ENTRIES, "two_entries.mlir")


@pytest.mark.parametrize("threads", [1, 2])
def test_each_entry_is_compiled_without_the_other(module, threads, tmp_path):
    fib_ir = native_ir(module, "fib", threads=threads)[0]
    sums_ir = native_ir(module, "sums", threads=threads)[0]
    assert "sums" not in fib_ir and "fib" in fib_ir
    assert "fib" not in sums_ir and "sums" in sums_ir
    assert compile_module(module, "fib", cache_dir=tmp_path, threads=threads)(15) == (fib(15),)
    assert compile_module(module, "sums", cache_dir=tmp_path, threads=threads)() == (64 * 2.5 + 10,)


def test_a_splat_constant_is_one_loop_not_a_store_per_element(module):
    ir_text = native_ir(module, "sums")[0]
    assert ir_text.count("store float") < 16  # the four listed values, one loop's store


def test_the_gradient_module_is_lowered_without_the_models_entry():
    params = tree_lstm.init_params(np.random.default_rng(0), hidden=4, embed=4, vocab=10)
    model = tree_lstm.trace_model(params)
    grad = GradFunction(model, engine="interpret")
    names = {f.sym_name.data for f in grad.module.ops}
    assert model.entry in names  # the gradient's module still holds it
    lowered = lower(grad.module, "invoke-clone-serial", threads=2, entry=grad.entry)
    kept = {f.sym_name.data for f in lowered.ops}
    assert model.entry not in kept
    assert {grad.entry, "node_fwd", "node_bwd"} <= kept
    # a node's matrix products outweigh its budget checks: one body, no clone
    assert not any(name.endswith("_serial") for name in kept)


@pytest.mark.parametrize("batching", ["recursive", "frontier", "auto"])
def test_a_traced_model_refuses_an_entry_other_than_its_own(batching):
    """A traced model's other functions take its parameters as arguments, so
    `entry=` naming one of them is refused, not silently replaced."""
    import recir
    from recir.diagnostics import RecirError

    traced = tree_lstm.trace_model(tree_lstm.init_params(np.random.default_rng(0)))
    with pytest.raises(RecirError, match=f"compiles its own entry @{traced.entry}; "
                                         "entry='sub' names another function"):
        recir.compile(traced, "sub", batching=batching, threads=1)
    assert recir.compile(traced, traced.entry, batching=batching, threads=1).batch([]) == []


@pytest.mark.parametrize("batching", ["recursive", "frontier", "auto"])
@pytest.mark.parametrize("model", [None, "model"])
def test_compile_refuses_what_is_no_model(batching, model):
    """An AttributeError ('NoneType' object has no attribute 'module') in recir."""
    import recir
    from recir.diagnostics import RecirError

    with pytest.raises(RecirError, match=r"^error: recir.compile takes a traced model "
                                         rf"\(recir.trace\(...\).traced\) or an IR module, "
                                         rf"got a {type(model).__name__}$"):
        recir.compile(model, batching=batching, threads=1)
