"""The `llvm` dialect to llvmlite IR: xDSL's converter plus our fixes for 0.74.

xDSL's `convert_op` covers most of the dialect; `FIXES` takes precedence for
what it gets wrong or lacks, so no xDSL code is patched:

- `llvm.getelementptr`: xDSL bitcasts the base to a typed pointer, so a GEP
  into a struct field yields a typed pointer that a later store rejects; we
  emit the GEP on the opaque pointer with an explicit source element type.
- `llvm.load` / `llvm.store` with an atomic ordering: xDSL drops the ordering
  and emits a plain access; we emit `load atomic` / `store atomic`.
- `llvm.alloca` results and globals are made opaque too (llvmlite types them).
- `llvm.call` through a function pointer (its indirect form): xDSL does not convert it.
- `llvm.func` linkage, `passthrough` and `noalias` arguments (`NOALIAS`): xDSL has none.
- `adjoint.lock_row` / `adjoint.unlock_row` (survive to this stage) become a
  spin lock (`llvm_row_locks`), which xDSL's llvm dialect cannot express.

xDSL's llvm dialect has no fptosi/fptoui/uitofp ops at all;
convert-recir-to-llvm lowers fptosi and fptoui to the saturating
`llvm.fpto[su]i.sat` intrinsics, and leaves arith.uitofp, and an arith.cmpf
whose predicate is a constant (which llvmlite cannot name), to `ARITH` here.

`ARITH` takes arith ops as they are, and `BRANCHES` cf's branches (the
frontier's lowering leaves them: `convert-recir-to-llvm{arith-cf=false}`),
each to the instructions its llvm replacement would give: building and
replacing those llvm ops first costs more than the rest of the translation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import llvmlite.binding
import llvmlite.ir as ir
from xdsl.backend.llvm.convert import _convert_global, _declare_func
from xdsl.backend.llvm.convert_op import (
    _CAST_OP_NAMES,
    _FCMP_CMP_MAP,
    _ICMP_PRED_MAP,
    CastInstrWithFlags,
    _convert_br,
    _convert_call,
    _convert_condbr,
    create_constant,
)
from xdsl.backend.llvm.convert_op import convert_op as xdsl_convert_op
from xdsl.backend.llvm.convert_type import convert_type
from xdsl.dialects import arith, cf, llvm
from xdsl.dialects.builtin import (ArrayAttr, DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr,
                                   ModuleOp, StringAttr, VectorType)
from xdsl.dialects.utils.fast_math import FastMathFlag
from xdsl.ir import Block, Operation, SSAValue

from recir.backend.llvm_row_locks import lock_row, unlock_row
from recir.diagnostics import emit_error
from recir.dialects import adjoint
from recir.passes.arith_to_llvm import (_CASTS, _FLOAT_BINARY, _INT_BINARY, _MIN_MAX,
                                        FLOAT_MIN_MAX, float_min_max_intrinsic,
                                        float_to_int_intrinsic)
from recir.passes.llvm_functions import noalias_arguments

ValueMap = dict[SSAValue, ir.Value]
Fix = Callable[[Any, ir.IRBuilder, ValueMap], None]

ORDERINGS = {1: "unordered", 2: "monotonic", 4: "acquire", 5: "release",
             6: "acq_rel", 7: "seq_cst"}


def _opaque(value: ir.Value) -> ir.Value:
    """llvmlite still types some pointers (allocas); LLVM itself has only `ptr`."""
    if isinstance(value.type, ir.PointerType) and not value.type.is_opaque:
        value.type = ir.PointerType()
    return value


def _alloca(op: llvm.AllocaOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    instr = builder.alloca(convert_type(op.elem_type), size=values[op.size])
    if op.alignment is not None:
        instr.align = op.alignment.value.data
    values[op.res] = _opaque(instr)


def _gep(op: llvm.GEPOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    ssa = iter(op.ssa_indices)
    indices = [values[next(ssa)] if i == llvm.GEP_USE_SSA_VAL else ir.Constant(ir.IntType(32), i)
               for i in op.rawConstantIndices.iter_values()]
    values[op.result] = builder.gep(values[op.ptr], indices, inbounds=op.inbounds is not None,
                                    source_etype=convert_type(op.elem_type))


def _constant(op: llvm.ConstantOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    value = op.value
    # shared where equal values give the same bits: a float unless a NaN (NaNs
    # compare equal whatever their bits), a vector always (it compares its bytes)
    shared = (isinstance(value, IntegerAttr)
              or (isinstance(value, FloatAttr) and value.value.data == value.value.data)
              or (isinstance(value, DenseIntOrFPElementsAttr)
                  and isinstance(op.result.type, VectorType)))
    values[op.result] = (_scalar_constant if shared else create_constant)(op.result.type, value)


# One llvmlite constant per type and value (llvmlite prints a constant
# where it is used, so one object serves every use; a vector's elements are
# wrapped one by one, the matrix kernels' splats a few thousand times).
_scalar_constant = functools.lru_cache(maxsize=4096)(create_constant)


def _alignment(op: llvm.LoadOp | llvm.StoreOp, typ: ir.Type) -> int:
    """Atomic accesses need an explicit alignment: the op's, else the natural one."""
    if op.alignment is not None:
        return op.alignment.value.data
    if isinstance(typ, ir.IntType):
        return max(1, typ.width // 8)
    return 4 if isinstance(typ, ir.FloatType) else 8


def _load(op: llvm.LoadOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    typ = convert_type(op.dereferenced_value.type)
    ordering = op.ordering.value.data
    if ordering == 0:
        instr = builder.load(values[op.ptr], typ=typ)
        if op.alignment is not None:
            instr.align = op.alignment.value.data
    else:
        instr = builder.load_atomic(values[op.ptr], ORDERINGS[ordering], _alignment(op, typ),
                                    typ=typ)
    values[op.dereferenced_value] = instr


def _store(op: llvm.StoreOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    value = values[op.value]
    ordering = op.ordering.value.data if op.ordering is not None else 0
    if ordering == 0:
        instr = builder.store(value, values[op.ptr])
        if op.alignment is not None:
            instr.align = op.alignment.value.data
        return
    # IRBuilder.store_atomic reads the pointee type, which opaque pointers lack
    builder._insert(ir.instructions.StoreAtomicInstr(
        builder.block, value, values[op.ptr], ORDERINGS[ordering], _alignment(op, value.type)))


def _call(op: llvm.CallOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    """xDSL's call, and its indirect form, which xDSL does not convert: the
    callee is the first operand, viewed as a pointer to the function's type
    (llvmlite reads a call's signature from its callee's pointer type)."""
    if op.callee is not None:
        _convert_call(op, builder, values)
        return
    pointer, *args = op.args
    result = convert_type(op.returned.type) if op.returned is not None else ir.VoidType()
    signature = ir.FunctionType(result, [convert_type(arg.type) for arg in args])
    # (`builder.bitcast` would return the opaque pointer itself, equal to any pointer type)
    callee = ir.instructions.CastInstr(builder.block, "bitcast", values[pointer],
                                       signature.as_pointer())
    builder._insert(callee)
    instr = builder.call(callee, [values[arg] for arg in args], cconv=op.CConv.cconv_name,
                         tail=op.TailCallKind.data != "none")
    if op.returned is not None:
        values[op.returned] = instr


FIXES: dict[type[Operation], Fix] = {
    llvm.ConstantOp: _constant,  # xDSL's converter tries it last
    adjoint.LockRowOp: lock_row,
    adjoint.UnlockRowOp: unlock_row,
    llvm.AllocaOp: _alloca,
    llvm.CallOp: _call,
    llvm.GEPOp: _gep,
    llvm.LoadOp: _load,
    llvm.StoreOp: _store,
}


def _binary(method: str, flags: Callable[[Any], list[str]] | None = None) -> Fix:
    def convert(op: Any, builder: ir.IRBuilder, values: ValueMap) -> None:
        lhs, rhs = op.operands
        emit = getattr(builder, method)
        values[op.results[0]] = (emit(values[lhs], values[rhs]) if flags is None
                                 else emit(values[lhs], values[rhs], flags=flags(op)))
    return convert


@functools.lru_cache(maxsize=64)
def _float_flags(flags: frozenset[FastMathFlag]) -> list[str]:
    """The fast-math flags of the llvm op `arith_to_llvm` makes (`_fastmath`),
    in `FastMathFlag`'s order (a set's order varies from process to process)."""
    made = llvm.FastMathAttr(list(flags) or None).data
    return [f.value for f in FastMathFlag if f in made]


def _cast_to(name: str, value: ir.Value, typ: ir.Type, builder: ir.IRBuilder) -> ir.Value:
    instr = CastInstrWithFlags(builder.block, name, value, typ, flags=[])
    builder._insert(instr)
    return instr


def _cast(op: Any, builder: ir.IRBuilder, values: ValueMap) -> None:
    values[op.results[0]] = _cast_to(_CAST_OP_NAMES[_CASTS[type(op)]], values[op.operands[0]],
                                     convert_type(op.results[0].type), builder)


def _icmp_as(predicate: str, lhs: ir.Value, rhs: ir.Value, builder: ir.IRBuilder) -> ir.Value:
    symbol, signed = _ICMP_PRED_MAP[predicate]
    return (builder.icmp_signed if signed else builder.icmp_unsigned)(symbol, lhs, rhs)


def _min_max(op: Any, builder: ir.IRBuilder, values: ValueMap) -> None:
    lhs, rhs = values[op.operands[0]], values[op.operands[1]]
    compare = _icmp_as(_MIN_MAX[type(op)], lhs, rhs, builder)
    values[op.results[0]] = builder.select(compare, lhs, rhs)


def _cmpi(op: arith.CmpiOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    predicate = llvm.ICmpPredicateFlag.from_int(op.predicate.value.data).value
    values[op.result] = _icmp_as(predicate, values[op.lhs], values[op.rhs], builder)


def _cmpf(op: arith.CmpfOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    predicate = llvm.FCmpPredicateFlag.from_int(op.predicate.value.data).value
    if predicate in ("_false", "_true"):  # (llvmlite has no fcmp for them): ord with uno
        a = values[op.lhs]
        pair = builder.fcmp_ordered("ord", a, a), builder.fcmp_unordered("uno", a, a)
        values[op.result] = (builder.or_ if predicate == "_true" else builder.and_)(*pair)
        return
    emit = builder.fcmp_ordered if predicate[0] == "o" else builder.fcmp_unordered
    values[op.result] = emit(_FCMP_CMP_MAP.get(predicate[1:], predicate), values[op.lhs],
                             values[op.rhs])


def _select(op: arith.SelectOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    values[op.result] = builder.select(*(values[v] for v in op.operands))


def _negf(op: arith.NegfOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    values[op.result] = builder.fneg(values[op.operands[0]], flags=[])


def _call_intrinsic(name: str, op: Operation, builder: ir.IRBuilder, values: ValueMap) -> None:
    """`op`'s result as a call of intrinsic `name` on its operands."""
    args = [values[v] for v in op.operands]
    intrinsic = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(
        convert_type(op.results[0].type), [a.type for a in args]), name=name)
    values[op.results[0]] = builder.call(intrinsic, args)


def _float_to_int(op: arith.FPToSIOp | arith.FPToUIOp, builder: ir.IRBuilder,
                  values: ValueMap) -> None:
    """The saturating intrinsic (`arith_to_llvm._float_to_int`)."""
    _call_intrinsic(float_to_int_intrinsic(op), op, builder, values)


def _float_min_max(op: Operation, builder: ir.IRBuilder, values: ValueMap) -> None:
    """`llvm.maximum`, `llvm.maximumnum`, ... (`arith_to_llvm.FLOAT_MIN_MAX`)."""
    _call_intrinsic(float_min_max_intrinsic(op), op, builder, values)


def _uitofp(op: arith.UIToFPOp, builder: ir.IRBuilder, values: ValueMap) -> None:
    values[op.result] = _cast_to("uitofp", values[op.input], convert_type(op.result.type),
                                 builder)


_INT_METHODS = {arith.AddiOp: "add", arith.SubiOp: "sub", arith.MuliOp: "mul",
                arith.AndIOp: "and_", arith.OrIOp: "or_", arith.XOrIOp: "xor",
                arith.ShLIOp: "shl", arith.ShRSIOp: "ashr", arith.ShRUIOp: "lshr",
                arith.DivSIOp: "sdiv", arith.DivUIOp: "udiv", arith.RemSIOp: "srem",
                arith.RemUIOp: "urem"}
_FLOAT_METHODS = {arith.AddfOp: "fadd", arith.SubfOp: "fsub", arith.MulfOp: "fmul",
                  arith.DivfOp: "fdiv"}
assert set(_INT_METHODS) == set(_INT_BINARY) and set(_FLOAT_METHODS) == set(_FLOAT_BINARY)

ARITH: dict[type[Operation], Fix] = {
    **{kind: _binary(method) for kind, method in _INT_METHODS.items()},
    **{kind: _binary(method, lambda op: _float_flags(frozenset(op.fastmath.data)))
       for kind, method in _FLOAT_METHODS.items()},
    **{kind: _cast for kind in _CASTS},
    **{kind: _min_max for kind in _MIN_MAX},
    **{kind: _float_min_max for kind in FLOAT_MIN_MAX},
    arith.ConstantOp: _constant,  # as the llvm.mlir.constant it would become
    arith.CmpiOp: _cmpi,
    arith.CmpfOp: _cmpf,
    arith.SelectOp: _select,
    arith.NegfOp: _negf,
    arith.FPToSIOp: _float_to_int,
    arith.FPToUIOp: _float_to_int,
    arith.UIToFPOp: _uitofp,
}
FIXES.update(ARITH)


BRANCHES: dict[type[Operation], Callable[..., None]] = {  # cf's branches read alike
    llvm.BrOp: _convert_br, llvm.CondBrOp: _convert_condbr,
    cf.BranchOp: _convert_br, cf.ConditionalBranchOp: _convert_condbr}


def convert_op(op: Operation, builder: ir.IRBuilder, values: ValueMap,
               blocks: dict[Block, ir.Block]) -> None:
    fix = FIXES.get(type(op))
    if fix is not None:
        fix(op, builder, values)
        return
    branch = BRANCHES.get(type(op))  # the most frequent ops after FIXES' (xDSL's
    if branch is not None:  # converter tries its other cases first)
        branch(op, builder, values, blocks)
        return
    try:
        xdsl_convert_op(op, builder, values, blocks)
    except NotImplementedError:  # an op no pass lowers (arith.ceildivui): a user error
        raise emit_error(op, "is not supported by the native backend") from None


def declare_function(op: llvm.FuncOp, module: ir.Module) -> None:
    _declare_func(op, module)
    function = module.get_global(op.sym_name.data)
    linkage = op.linkage.linkage.data
    if linkage != "external":
        function.linkage = linkage
    for number in noalias_arguments(op):
        function.args[number].add_attribute("noalias")
    passthrough = op.properties.get("passthrough") or op.attributes.get("passthrough")
    if isinstance(passthrough, ArrayAttr):
        for attribute in passthrough.data:
            if isinstance(attribute, StringAttr):
                function.attributes.add(attribute.data)


def define_function(op: llvm.FuncOp, module: ir.Module) -> None:
    """As xDSL's `_convert_func`, with our `convert_op`."""
    function = module.get_global(op.sym_name.data)
    blocks = {b: function.append_basic_block(b.name_hint or "") for b in op.body.blocks}
    values: ValueMap = dict(zip(op.body.blocks[0].args, function.args))
    for block in list(op.body.blocks)[1:]:
        builder = ir.IRBuilder(blocks[block])
        for arg in block.args:
            values[arg] = builder.phi(convert_type(arg.type))
    for block in op.body.blocks:
        builder = ir.IRBuilder(blocks[block])
        if blocks[block].instructions:
            builder.position_after(blocks[block].instructions[-1])
        for inner in block.ops:
            convert_op(inner, builder, values, blocks)


# asked once: llvmlite's one lock is held through `engine.llvm_thread`'s compiles
host_triple = functools.cache(llvmlite.binding.get_default_triple)


def convert_module(module: ModuleOp) -> ir.Module:
    result = ir.Module()
    result.triple = host_triple()
    functions = []
    for op in module.ops:
        if isinstance(op, llvm.GlobalOp):
            _convert_global(op, result)
            _opaque(result.get_global(op.sym_name.data))
        elif isinstance(op, llvm.FuncOp):
            functions.append(op)
        else:
            raise emit_error(op, "is not supported by the native backend at module level")
    for op in functions:
        declare_function(op, result)
    for op in (f for f in functions if f.body.blocks):
        define_function(op, result)
    return result


def to_llvm_ir(module: ModuleOp) -> str:
    return str(convert_module(module))
