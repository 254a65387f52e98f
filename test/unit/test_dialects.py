"""Builders and verifiers of the invoke and tmath dialects, used from Python."""

from __future__ import annotations

import pytest
from xdsl.builder import ImplicitBuilder
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, TensorType, f32, i32
from xdsl.utils.exceptions import VerifyException

from recir.diagnostics import RecirError
from recir.dialects import invoke, tmath
from recir.verification import verify_located


def vec(n: int) -> TensorType:
    return TensorType(f32, [n])


def test_builders_infer_result_types():
    fn = func.FuncOp("f", ([TensorType(f32, [4, 3]), vec(3), TensorType(f32, [2, 3, 3])], []))
    w, x, v = fn.body.block.args
    with ImplicitBuilder(fn.body.block):
        y = tmath.MatvecOp(w, x)
        s = tmath.SigmoidOp(y)
        c = tmath.ConcatOp([y, s])
        sl = tmath.SliceOp(c, 2, 3)
        b = tmath.BilinearOp(v, x, x)
        total = tmath.SumOp(b)
        func.ReturnOp()
    assert y.result.type == vec(4)
    assert s.result.type == vec(4)
    assert c.result.type == vec(8)
    assert sl.result.type == vec(3)
    assert b.result.type == vec(2)
    assert total.result.type == f32
    fn.verify()


def test_elementwise_ops_carry_the_trait():
    for op in tmath.ELEMENTWISE_UNARY + tmath.ELEMENTWISE_BINARY:
        assert op.has_trait(tmath.Elementwise), op.name
    assert not tmath.MatvecOp.has_trait(tmath.Elementwise)


def test_shape_mismatch_names_shapes():
    fn = func.FuncOp("f", ([vec(3), vec(4)], []))
    a, b = fn.body.block.args
    with ImplicitBuilder(fn.body.block):
        bad = tmath.AddOp(a, b)
        func.ReturnOp()
    with pytest.raises(VerifyException, match="lhs 3, rhs 4; expected equal shapes"):
        bad.verify()


def recursive_module(callee_args: int = 1) -> tuple[ModuleOp, invoke.InvokeOp]:
    """`@main` holding a subgraph `@count` that invokes itself."""
    main = func.FuncOp("main", ([i32], [i32]))
    sub = invoke.SubgraphOp("count", ([i32], [i32]))
    with ImplicitBuilder(sub.body.block):
        (k,) = sub.body.block.args
        call = invoke.InvokeOp("count", [k] * callee_args, [i32])
        invoke.ReturnOp(call)
    with ImplicitBuilder(main.body.block):
        main.body.block.add_op(sub)
        r = invoke.InvokeOp("count", [main.body.block.args[0]], [i32])
        func.ReturnOp(r)
    return ModuleOp([main]), call


def test_recursive_subgraph_verifies():
    module, call = recursive_module()
    module.verify()
    assert invoke.lookup_callee(call, "count") is call.parent_op()


def test_arity_error_is_located_at_the_invoke():
    module, _ = recursive_module(callee_args=2)
    with pytest.raises(RecirError, match="'invoke.invoke' op @count expects 1 arguments, got 2"):
        verify_located(module)


def test_missing_callee():
    fn = func.FuncOp("f", ([], []))
    with ImplicitBuilder(fn.body.block):
        invoke.InvokeOp("nowhere", [], [])
        func.ReturnOp()
    with pytest.raises(RecirError, match="callee @nowhere does not exist"):
        verify_located(ModuleOp([fn]))


def test_subgraph_return_types_checked():
    main = func.FuncOp("main", ([], []))
    sub = invoke.SubgraphOp("s", ([], [i32]))
    with ImplicitBuilder(sub.body.block):
        invoke.ReturnOp(arith.ConstantOp(FloatAttr(1.0, f32)))
    main.body.block.add_op(sub)
    with ImplicitBuilder(main.body.block):
        func.ReturnOp()
    with pytest.raises(RecirError, match=r"returns \(f32\) but @s declares results \(i32\)"):
        verify_located(ModuleOp([main]))
