"""Products over rows by a weight, through a height loop's table of packed copies.

The products' side of `gemm_cached.py`: a product over rows by a weight
(a forward's `x W^T`, a backward's `dy W`) whose W is a parameter of its
function that no op of it writes (`mark_static_weights`, before the
function is lowered) calls `recir_gemm_nt.cached` (`recir_gemm_nn.cached`)
with its entry of the table a height loop has opened (the context's
`packed`), else the plain kernel as before: a function called height by
height has no table, and on the calling thread of a team's function the
product's own team splits it (`gemm_teams.team_function`). Each such
product of a module has its own entry (`PACKED_SITES` counts them; the
loop's table has that many).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, UnitAttr, i1, i8, i64
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.traits import EffectInstance, MemoryEffectKind, get_effects

from recir.dialects import adjoint, invoke, tmath
from recir.passes import gemm_kernels
from recir.passes.frame_buffers import allocated
from recir.passes.gemm_cached import CACHED, CACHED_INPUTS, ENTRY, cached_name
from recir.passes.llvm_functions import outside_teams
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.native_context import PACKED
from recir.passes.rows import RowEmitter

PACKED_SITES = "recir.packed_sites"  # a module attribute: its products by a weight
STATIC_WEIGHT = "recir.static_weight"  # a product's B is a parameter no op writes


# the products over rows by a matrix (nt: `W x`; nn: a backward's `dy W`;
# a bilinear form's, its tensor's rows a matrix), and which operand it is
WEIGHT_OPERAND: dict[type[Operation], int] = {
    tmath.MatvecOp: 0, tmath.BilinearOp: 0, adjoint.BilinearLhsOp: 0,
    adjoint.VecmatOp: 1, adjoint.BilinearRhsOp: 0}


def mark_static_weights(function: Operation) -> None:
    """Marks each product over rows by a matrix (`WEIGHT_OPERAND`) that is
    an argument of `function` none of its ops writes (every use's effects
    known): a weight the call cannot change, whose packed copy serves all
    its heights."""
    body = function.regions[0].blocks.first
    for op in function.walk():
        at = WEIGHT_OPERAND.get(type(op))
        if at is not None:
            matrix = op.operands[at]
            if isinstance(matrix, BlockArgument) and matrix.owner is body and not any(
                    writes(use.operation, matrix) for use in matrix.uses):
                op.attributes[STATIC_WEIGHT] = UnitAttr()


def writes(op: Operation, value: SSAValue) -> bool:
    """Whether `op` may write `value` (unknown effects: it may)."""
    effects: set[EffectInstance] | None = get_effects(op)  # type: ignore[assignment]
    return effects is None or any(e.kind == MemoryEffectKind.WRITE and e.value in (None, value)
                                  for e in effects)


def packed_sites(module: ModuleOp) -> int:
    """The module's products by a weight (entries of a height loop's table)."""
    found = module.attributes.get(PACKED_SITES)
    return found.value.data if isinstance(found, IntegerAttr) else 0


def with_packed(b: RowEmitter, op: Operation, module: ModuleOp, layout: str,
                args: list[SSAValue], bias: SSAValue | None,
                plain: Callable[[Emitter], None]) -> None:
    """`recir_gemm_<layout>.cached` on this product's entry of the context's
    table where it has one and B is a marked weight (`CACHED` layouts) (and, for a team's
    function, the thread is one of a height loop's team: on the calling
    thread the product's own team splits it), else `plain`."""
    if layout not in CACHED or STATIC_WEIGHT not in op.attributes:
        plain(b)
        return
    site = packed_sites(module)
    module.attributes[PACKED_SITES] = IntegerAttr(site + 1, i64)
    name = gemm_kernels.declare_linked(module, cached_name(layout), CACHED_INPUTS,
                                       gemm_kernels.KERNELS)
    table = b.load(b.offset(b.value(invoke.ContextOp()), PACKED, i8), 0, PTR)
    slot = b.alloca(1, i1)
    b.store(b.const(0, i1), slot, 0)

    def listed(e: Emitter) -> None:
        ok = e.compare("slt", site, e.load(table, 0, i64))
        if b.team.threads >= 2:
            ok = e.value(arith.AndIOp(ok, e.value(arith.XOrIOp(outside_teams(e),
                                                               e.const(1, i1)))))
        e.store(ok, slot, 0)

    b.when(allocated(b, table), listed)
    bias = bias if bias is not None else b.value(llvm.ZeroOp(result_types=[PTR]))
    b.when(b.load(slot, 0, i1), lambda e: e.op(llvm.CallOp(
        name, *args, bias, e.offset(table, 1 + ENTRY * site, i64))), plain)

