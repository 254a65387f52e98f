"""A parameter matrix with every row, plus a bias: X W^T (+ b) over rows.

The forward product of every cell (`tmath.matvec` by a weight, and the add
of a bias after it: `row_lowering`'s `bias_adds`), lowered as one GEMM call
(`recir_gemm_nt_bias`, or the packed copy's kernel, `packed_weights`) whose
tiles start from the bias.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import llvm
from xdsl.ir import Operation, SSAValue

from recir.dialects import tmath
from recir.passes import gemm_kernels
from recir.passes.loop_builder import Emitter
from recir.passes.packed_weights import with_packed
from recir.passes.row_products import each_row_on_team, gemm_call, row_gemm
from recir.passes.rows import Lowered, RowEmitter, Rows, row_at
from recir.passes.tmath_kernels import enclosing_module


def matvec_plus(b: RowEmitter, op: Operation, args: Sequence[Lowered],
                bias: SSAValue | None = None) -> Rows:
    """out[r] = matrix . x[r] for every row r (X W^T), + `bias` if given:
    C's tiles start from the bias itself (`recir_gemm_nt_bias`, or the
    packed copy's kernel on a thread of a height loop's team), so the sum
    takes no pass of its own. A product on its own team (the calling thread
    of a function built for one) adds into a copy of the bias rows."""
    matrix, x = args
    assert isinstance(x, Rows), "a per-row matrix has no row form"
    rows, cols = tmath.shape_of(op.operands[0])
    out = b.rows(x.count, op.results[0].type)
    if bias is None:
        row_gemm(b, op, "nt", x.count, rows, cols, (x.data, x.stride), (matrix, cols),
                 (out.data, out.stride))
        return out
    module = enclosing_module(op)
    args = [b.i64(x.count), b.i64(rows), b.i64(cols), x.data, b.i64(x.stride), matrix,
            b.i64(cols), out.data, b.i64(out.stride)]
    if b.team.threads < 2:
        name = gemm_kernels.declare_bias_in(module)
        with_packed(b, op, module, "nt", [*args, b.i64(0)], bias,
                    lambda e: e.op(llvm.CallOp(name, *args, bias)))
        return out
    gemm = gemm_call(module, "nt", b.team)

    def added_to_copy(e: Emitter) -> None:
        team = RowEmitter(e.point, e.allocas, b.scratch, b.team)
        each_row_on_team(team, op, x.count, rows, [out, bias], lambda inner, r, v: inner.move(
            row_at(inner, v[0], r), v[1], rows))
        gemm(team, [*args, team.i64(1)])

    with_packed(b, op, module, "nt", [*args, b.i64(0)], bias, added_to_copy)
    return out
