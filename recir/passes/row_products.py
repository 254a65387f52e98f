"""Products over rows: a bilinear form's V with every row (`bilinear_rows`); a
uniform matrix with every row is `row_matvec.matvec_plus`'s.

Every product over rows is emitted here (`row_gemm`), but for a product
plus its bias, whose tiles start from the bias (`row_matvec`): a call of the
module's generated GEMM kernel (`gemm_kernels.py`, added to the module at
its first use, as tmath.matmul's lowering does). A rows value is a matrix
of `count` rows `stride` elements apart, so the forward's `W x` per row is
X W^T (nt), the backward's `dy W` per row is dY W (nn) and a weight's
gradient, the sum of the rows' outer products, is dY^T X (tn). With
threads (convert-tmath-to-loops{row-threads=T row-team-work=W}), the call is
of the kernel's team form instead (`gemm_teams.team_function`: each thread
a block of C). An elementwise loop over rows
(`each_row_on_team`, for `row_kernels`' elementwise ops and fused chains)
is outlined into `.rows(data, lo, hi)`, one per distinct loop of the
module; the module's one `recir_rows.run` runs it on the same team where
rows x width x ops reaches the same least work (each thread `recir_rows.part`).
A product by a parameter that the function never writes (a forward's nt, a
backward's nn: `packed_weights.mark_static_weights`) looks first for a
table of packed weights in the thread's context (`gemm_cached`: a height
loop's, which packs each weight once for all its heights); each such
product of the module has an entry there (`packed_weights.PACKED_SITES`
counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, func, llvm, math
from xdsl.dialects.builtin import ModuleOp, TensorType, f32, i32, i64
from xdsl.ir import BlockArgument, Operation, SSAValue

from recir.dialects import tmath
from recir.passes import gemm_kernels
from recir.passes.convert_invoke_to_gomp import declare
from recir.passes.convert_recir_to_llvm import expand_math
from recir.passes.gemm_teams import declare_team_in
from recir.passes.llvm_functions import (call, call_pointer, ceil_div, lower_to_llvm,
                                         new_function, outside_teams)
from recir.passes.loop_builder import PTR, Emitter
from recir.passes.packed_weights import with_packed
from recir.passes.rows import Gathered, Lowered, RowEmitter, Rows, RowTeam, row_at
from recir.passes.tmath_kernels import dot, enclosing_module

DECLARATIONS = (("GOMP_parallel", [PTR, PTR, i32, i32], None),
                ("omp_get_thread_num", [], i32), ("omp_get_num_threads", [], i32))


GEMM = Callable[[Emitter, Sequence[SSAValue]], None]  # emits a call with the 10 arguments


def gemm_call(module: ModuleOp, layout: str, team: RowTeam) -> GEMM:
    """The module's call of `recir_gemm_<layout>`, or of its team form."""
    if team.threads < 2:
        name = gemm_kernels.declare_in(module, layout)
        return lambda e, args: e.op(llvm.CallOp(name, *args))
    name = declare_team_in(module, layout)
    return lambda e, args: e.op(llvm.CallOp(name, *args, e.i64(team.threads),
                                            e.i64(team.min_work)))


def row_gemm(b: RowEmitter, op: Operation, layout: str, m: SSAValue | int,
             n: SSAValue | int, k: SSAValue | int, a: tuple[SSAValue, int],
             bm: tuple[SSAValue, int], c: tuple[SSAValue, int], accumulate: bool = False
             ) -> None:
    """C (+)= op(A) op(B) by `recir_gemm_<layout>`, or on the emitter's team
    by `recir_gemm_<layout>.team` (every product over rows but one plus its
    bias: `row_matvec`). `a`, `bm`, `c` are (data, leading dimension)."""
    args = [b.i64(m), b.i64(n), b.i64(k), a[0], b.i64(a[1]), bm[0], b.i64(bm[1]), c[0],
            b.i64(c[1]), b.i64(int(accumulate))]
    module = enclosing_module(op)
    gemm = gemm_call(module, layout, b.team)
    with_packed(b, op, module, layout, args, None, lambda e: gemm(e, args))


def slab_sums(b: RowEmitter, op: Operation, tensor: SSAValue, y: Rows) -> Rows:
    """sums[r, k * rows + i] = V[k, i] . y[r]: every y times all of V's
    depth x rows vectors as one product over rows (Y M^T, M being V's rows;
    V is read once, not once a row): a bilinear form's and its left
    gradient's first step."""
    depth, rows, cols = tmath.shape_of(op.operands[0])
    sums = b.rows(y.count, TensorType(f32, [-1, depth * rows]))
    row_gemm(b, op, "nt", y.count, depth * rows, cols, (y.data, y.stride), (tensor, cols),
             (sums.data, sums.stride))
    return sums


def slab_rows(b: RowEmitter, op: Operation, tensor: SSAValue, y: Rows, other: Rows,
              per_row: Callable[[Emitter, SSAValue, SSAValue, SSAValue], None]) -> Rows:
    """`slab_sums` of y, then `per_row(e, out_row, its_slabs, other_row)`
    for each row of the result, on the team: a bilinear form's and its left
    gradient's second step."""
    depth, rows, _ = tmath.shape_of(op.operands[0])
    count = b.same_count(op, [other, y])
    sums = slab_sums(b, op, tensor, y)
    out = b.rows(count, op.results[0].type)

    def row(e: Emitter, r: SSAValue, values: Sequence[Lowered]) -> None:
        per_row(e, *(row_at(e, value, r) for value in values))

    each_row_on_team(b, op, count, depth * rows, [out, sums, other], row)
    return out


def bilinear_rows(b: RowEmitter, op: Operation, tensor: SSAValue, x: Rows, y: Rows) -> Rows:
    """out[r, k] = x[r] . (V[k] y[r]) for every row r: `slab_sums`, then
    each row's sums dotted with its x slab by slab."""
    depth, rows, _ = tmath.shape_of(op.operands[0])

    def row(e: Emitter, at: SSAValue, slabs: SSAValue, xr: SSAValue) -> None:
        e.each(depth, lambda ek, k: ek.store(
            dot(ek, ek.offset(slabs, ek.mul(k, rows)), xr, rows), at, k))

    return slab_rows(b, op, tensor, y, x, row)


def bias_adds(function: Operation) -> dict[Operation, tuple[Operation, SSAValue]]:
    """Each `matvec` over rows whose only use is a `tmath.add` of a uniform
    argument (a bias), with that add and the bias: `matvec_plus` lowers the
    two as one."""
    found: dict[Operation, tuple[Operation, SSAValue]] = {}
    for op in function.walk():
        if not isinstance(op, tmath.MatvecOp) or not op.results[0].has_one_use():
            continue
        add = next(iter(op.results[0].uses)).operation
        if not isinstance(add, tmath.AddOp):
            continue
        bias = add.operands[1] if add.operands[0] is op.results[0] else add.operands[0]
        if bias is not op.results[0] and isinstance(bias, BlockArgument) and isinstance(
                bias.type, TensorType) and bias.type.element_type == f32 and (
                tmath.shape_of(bias) == tmath.shape_of(op.results[0])[1:]):
            found[op] = (add, bias)
    return found


ROWS_PART = "recir_rows.part"  # the module's one team part of every `.rows`
ROWS_RUN = "recir_rows.run"  # its one choice of a team or the calling thread


def rows_functions(module: ModuleOp, name: str, values: Sequence[Lowered],
                   body: Callable[[Emitter, SSAValue, Sequence[Lowered]], None]) -> str:
    """`<name>.rows(data, lo, hi)`: `body` on rows [lo, hi) of the operands
    whose data pointers (or scalars) are `data`'s fields 2.. (field 0 is the
    row count, field 1 the address of the `.rows` to run), then the row
    numbers of those `Gathered` (a take read in place), in order; returns the name
    to call, that of an identical `.rows` the module has already (the same
    elementwise loop over rows of the same widths, as a `_bwd` rebuilds its
    `_fwd`'s), where it has one: LLVM then compiles that loop once. Each
    thread of a team runs `ROWS_PART` (`rows_part`), its own block of the rows,
    the same code on every row whatever the team."""
    # not inlined: its callers (the part and the serial path) call it once per
    # block of rows, and LLVM would otherwise optimize its loops once per caller
    function, b, (data, lo, hi) = new_function(f"{name}.rows", [PTR, i64, i64], inline=False)
    loaded: list[Lowered] = []
    numbers = iter(range(len(values) + 2, 2 * len(values) + 2))  # the gathered's fields
    for i, value in enumerate(values, start=2):
        field = b.offset(data, i, i64)
        if isinstance(value, Gathered):
            index = b.load(b.offset(data, next(numbers), i64), 0, PTR)
            loaded.append(Gathered(value.count, b.load(field, 0, PTR), value.width,
                                   value.stride, value.elem, index))
        elif isinstance(value, Rows):
            loaded.append(Rows(value.count, b.load(field, 0, PTR), value.width, value.stride,
                               value.elem))
        else:
            loaded.append(b.load(field, 0, value.type))
    b.each(b.sub(hi, lo), lambda inner, i: body(inner, inner.add(lo, i), loaded))
    b.op(llvm.ReturnOp())
    for op in list(function.walk()):
        if isinstance(op, (math.ExpOp, math.TanhOp, math.LogOp)):
            expand_math(op)
    lower_to_llvm(function, arith_cf=False)
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, llvm.FuncOp)}
    for existing in functions.values():
        if existing.sym_name.data.endswith(".rows") and existing.body.is_structurally_equivalent(
                function.body):
            return existing.sym_name.data
    made: list[Operation] = [declare(*d) for d in DECLARATIONS if d[0] not in functions]
    if ROWS_PART not in functions:
        made += [rows_part(), rows_run()]
    # their arith and cf ops stay for convert-recir-to-llvm (or the translation)
    module.body.blocks[0].add_ops([*made, function])
    return function.sym_name.data


def rows_part() -> llvm.FuncOp:
    """`ROWS_PART(data)`, run by each thread of a team: the `.rows` whose
    address is `data`'s field 1 on the thread's block of the rows."""
    part, e, (record,) = new_function(ROWS_PART, [PTR])
    count, rows = e.load(record, 0, i64), e.load(record, 1, PTR)
    thread = e.to_i64(e.value(llvm.CallOp("omp_get_thread_num", return_type=i32)))
    team = e.to_i64(e.value(llvm.CallOp("omp_get_num_threads", return_type=i32)))
    per = ceil_div(e, count, team)
    start = e.min(e.mul(thread, per), count)
    call_pointer(e, rows, record, start, e.min(e.add(start, per), count))
    e.op(llvm.ReturnOp())
    return lower_to_llvm(part, arith_cf=False)


def rows_run() -> llvm.FuncOp:
    """`ROWS_RUN(data, work_per_row, threads, min_work)`: the `.rows` at
    `data`'s field 1 on its rows (field 0): on a team of `threads` where rows
    x `work_per_row` reaches `min_work`, there are two rows or more and the
    thread is not a team's already, else alone; compiled once (`noinline`)."""
    function, b, (record, per_row, threads, min_work) = new_function(
        ROWS_RUN, [PTR, i64, i64, i64], inline=False)
    count, rows = b.load(record, 0, i64), b.load(record, 1, PTR)
    team, work = b.min(threads, count), b.mul(count, per_row)
    pays = b.value(arith.AndIOp(b.compare("sge", team, 2), b.compare("sge", work, min_work)))
    pays = b.value(arith.AndIOp(pays, outside_teams(b)))

    def on_team(e: Emitter) -> None:
        part = e.value(llvm.AddressOfOp(ROWS_PART, PTR))
        e.op(llvm.CallOp("GOMP_parallel", part, record, e.value(arith.TruncIOp(threads, i32)),
                         e.const(0, i32)))

    b.when(pays, on_team, lambda e: call_pointer(e, rows, record, e.i64(0), count))
    b.op(llvm.ReturnOp())
    return lower_to_llvm(function, arith_cf=False)


def fresh_name(module: ModuleOp, op: Operation) -> str:
    """`<function>.rows<n>`, the first n not yet taken in `module`."""
    owner = op.parent_op()
    while owner is not None and not isinstance(owner, func.FuncOp):
        owner = owner.parent_op()
    base = owner.sym_name.data if owner is not None else "recir"
    names = {o.sym_name.data for o in module.ops if isinstance(o, llvm.FuncOp)}
    n = 0
    while f"{base}.rows{n}.rows" in names:
        n += 1
    return f"{base}.rows{n}"


def each_row_on_team(b: RowEmitter, op: Operation, count: SSAValue, work_per_row: int,
                     values: Sequence[Lowered],
                     body: Callable[[Emitter, SSAValue, Sequence[Lowered]], None]) -> None:
    """`body(e, r, values)` for every row r: here, or, with a team, by
    `ROWS_RUN` on an outlined `.rows` (`count * work_per_row` against
    `RowTeam.min_work`): the same code, so the same bits, on any team."""
    if b.team.threads < 2:
        b.each(count, lambda inner, r: body(inner, r, values))
        return
    module = enclosing_module(op)
    name = rows_functions(module, fresh_name(module, op), values, body)
    gathered = [v.index for v in values if isinstance(v, Gathered)]
    record = b.alloca(len(values) + 2 + len(gathered), i64)
    b.store(count, record, 0)
    b.store(b.value(llvm.AddressOfOp(name, PTR)), record, 1)
    for i, value in enumerate([*(v.data if isinstance(v, Rows) else v for v in values),
                               *gathered], start=2):
        b.store(value, b.offset(record, i, i64), 0)
    call(b, ROWS_RUN, record, work_per_row, b.team.threads, b.team.min_work)
