"""Functions in the llvm dialect built with the loop builder, for native kernels.

`new_function` gives an `llvm.func` and a `VectorEmitter` at its body's end;
the body is written with `scf.for`/`scf.if` and arith ops as anywhere else in
the lowering, and `lower_to_llvm` then applies xDSL's scf lowerings and
`arith_to_llvm`'s table to it: such a function needs no later pass (the
matrix kernels of `gemm_kernels.py` are built so, and called from code that
convert-recir-to-llvm lowers). `NOALIAS` names the pointer arguments that
the translation to LLVM IR marks `noalias`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, cf, llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from recir.diagnostics import emit_error
from recir.passes.arith_to_llvm import convert_arith
from recir.passes.convert_scf_to_cf import lower_scf
from recir.passes.loop_builder import PTR, Emitter, Index, VectorEmitter
from recir.passes.op_templates import replace


NOALIAS = "recir.noalias"  # an llvm.func's attribute: its noalias arguments' numbers


def new_function(name: str, inputs: Sequence, private: bool = True, inline: bool = True,
                 noalias: bool = False
                 ) -> tuple[llvm.FuncOp, VectorEmitter, tuple[SSAValue, ...]]:
    """An llvm.func returning void and an emitter at its (single) block's end;
    `inline=False` keeps LLVM from inlining it (`noinline`); `noalias`: no
    memory one of its pointer arguments reaches is written in the call and
    reached through another."""
    block = Block(arg_types=inputs)
    linkage = llvm.LinkageAttr("internal" if private else "external")
    function = llvm.FuncOp(name, llvm.LLVMFunctionType(list(inputs)), linkage,
                           body=Region(block))
    if not inline:
        function.attributes["passthrough"] = ArrayAttr([StringAttr("noinline")])
    if noalias:
        function.attributes[NOALIAS] = ArrayAttr([IntegerAttr(k, i64) for k, t
                                                  in enumerate(inputs) if t == PTR])
    emitter = VectorEmitter(InsertPoint.at_end(block), InsertPoint.at_start(block))
    return function, emitter, tuple(block.args)


def noalias_arguments(function: llvm.FuncOp) -> list[int]:
    """The numbers in `function`'s `NOALIAS`, each checked to be a pointer
    argument's (hand-written IR may carry the attribute too)."""
    found = function.attributes.get(NOALIAS)
    if found is None:
        return []
    inputs = function.function_type.inputs.data
    numbers = [n.value.data for n in found.data if isinstance(n, IntegerAttr)] \
        if isinstance(found, ArrayAttr) else []
    if len(numbers) != len(getattr(found, "data", ())) or any(
            not 0 <= n < len(inputs) or inputs[n] != PTR for n in numbers):
        raise emit_error(function, f"'{NOALIAS}' must list pointer arguments' numbers, "
                         f"got {found}")
    return numbers


def ceil_div(b: Emitter, a: Index, d: Index) -> SSAValue:
    return b.value(arith.DivSIOp(b.add(a, b.sub(d, 1)), b.i64(d)))


def at_least_zero(b: Emitter, *values: SSAValue) -> list[SSAValue]:
    """Each of `values` (i64), negatives as 0: loops over them run no time."""
    return [b.value(arith.MaxSIOp(v, b.i64(0))) for v in values]


def call(b: Emitter, name: str, *args: Index) -> None:
    b.op(llvm.CallOp(name, *(b.i64(a) if isinstance(a, int) else a for a in args)))


def call_pointer(b: Emitter, pointer: SSAValue, *args: SSAValue) -> None:
    """A call of the void function at `pointer` (llvm.call's indirect form,
    which xDSL's builder lacks: the callee is the first operand)."""
    operands = [pointer, *args]
    b.op(llvm.CallOp.create(operands=operands, properties={
        "fastmathFlags": llvm.FastMathAttr(None),
        "CConv": llvm.CallingConventionAttr("ccc"),
        "TailCallKind": llvm.TailCallKindAttr(llvm.TailCallKind.NONE),
        "op_bundle_sizes": DenseArrayBase.from_list(i32, ()),
        "operandSegmentSizes": DenseArrayBase.from_list(i32, [len(operands), 0])}))


def accumulating(b: Emitter, accumulate: SSAValue, later: SSAValue) -> SSAValue:
    """1 where C is added to: `accumulate` set, or a later block of k."""
    asked = b.compare("ne", accumulate, 0)
    return b.value(arith.ExtUIOp(b.value(arith.OrIOp(asked, later)), i64))


def dispatch(b: Emitter, count: SSAValue, full: int, emit) -> None:
    """`emit(b, c)` for the c == count among 1..full, the full tile first."""
    def chain(inner: Emitter, c: int) -> None:
        if c == 0:
            return
        inner.when(inner.compare("eq", count, c), lambda t: emit(t, c),
                   (lambda e: chain(e, c - 1)) if c > 1 else None)

    chain(b, full)


def lower_to_llvm(function: llvm.FuncOp, arith_cf: bool = True) -> llvm.FuncOp:
    """The function's scf, arith and cf ops as llvm ops (in place);
    `arith_cf=False` lowers its scf ops alone (`convert_arith_cf` or the
    translation to LLVM IR takes the arith and cf ops)."""
    lower_scf(function)
    if arith_cf:
        convert_arith_cf(function)
    return function


def convert_arith_cf(function: Operation) -> None:
    """Every arith op and cf branch in `function` as llvm ops (in place)."""
    for op in list(function.walk()):
        if isinstance(op, cf.BranchOp):
            Rewriter.replace_op(op, llvm.BrOp(op.successor, *op.arguments))
        elif isinstance(op, cf.ConditionalBranchOp):
            Rewriter.replace_op(op, llvm.CondBrOp(op.cond, op.then_block, op.then_arguments,
                                                  op.else_block, op.else_arguments))
        elif (ops := convert_arith(op)) is not None:
            replace(op, ops)


def outside_teams(b: Emitter) -> SSAValue:
    """Whether the calling thread is alone, not one of a team's (a height
    loop's, `schedule_loops`): a team started there would be nested, which
    the runtime runs on that thread alone, at the cost of a start."""
    alone = b.value(llvm.CallOp("omp_get_num_threads", return_type=i32))
    return b.value(arith.CmpiOp(alone, b.const(1, i32), "eq"))
