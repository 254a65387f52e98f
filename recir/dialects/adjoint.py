"""The `adjoint` dialect: the math only gradients need.

`synthesize-gradients` emits these next to `tmath` ops: transposed products,
the inverses of slicing and indexing, and in-place accumulation into a
parameter's gradient buffer. Accumulation is the one place recir mutates a
tensor: its target must be an argument of the enclosing function (a buffer
the caller owns), and the sum does not depend on the order of the adds, so
invocations may accumulate concurrently into per-thread buffers. Where an
operand is per invocation an op also takes rows of it (`row_types.py`).

```mlir
%dx = adjoint.vecmat %dy, %w : tensor<5xf32>, tensor<5x3xf32> -> tensor<3xf32>
adjoint.accumulate_outer %dw, %dy, %x : tensor<5x3xf32>, tensor<5xf32>, tensor<3xf32>
adjoint.lock_row %row      // also unlock_row
```
"""

from __future__ import annotations

from collections.abc import Set
from functools import partial

from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import I64, Float32Type, IntegerAttr, IntegerType, TensorType
from xdsl.ir import BlockArgument, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import EffectInstance, MemoryEffect, MemoryEffectKind, Pure
from xdsl.utils.exceptions import VerifyException

from recir.dialects import type_rules
from recir.dialects.op_base import InferredOp, PureOp, named_ops
from recir.dialects.row_types import (
    expect_rank,
    expect_shape,
    expect_type,
    f32_rows_or_static,
    fmt_shape,
    rows_type,
)
from recir.dialects.tmath import ElementwiseBinaryOp


@irdl_op_definition
class VecmatOp(InferredOp):
    """`wᵀ dy`, the gradient of `tmath.matvec` with respect to its vector (which
    may be rows: each row's product): ```mlir
    %dx = adjoint.vecmat %dy, %w : tensor<5xf32>, tensor<5x3xf32> -> tensor<3xf32>
    ```"""

    name = "adjoint.vecmat"
    vector = operand_def(TensorType)
    matrix = operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.vecmat)


@irdl_op_definition
class TransposeOp(InferredOp):
    """```mlir
    %t = adjoint.transpose %a : tensor<2x3xf32> -> tensor<3x2xf32>
    ```"""

    name = "adjoint.transpose"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    infer = staticmethod(type_rules.transpose)


@irdl_op_definition
class PadOp(PureOp):
    """The inverse of `tmath.slice`, zeros except rows [offset, offset + n);
    rows pad each row: ```mlir
    %x = adjoint.pad %dy[4] : tensor<2xf32> -> tensor<10xf32>
    ```"""

    name = "adjoint.pad"
    input = operand_def(TensorType)
    offset = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = "$input `[` $offset `]` attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        batched, x = f32_rows_or_static(self.input, "input")
        result_rows, r = f32_rows_or_static(self.result, "result")
        offset = self.offset.value.data
        if result_rows != batched:
            raise VerifyException("result must be rows exactly when the input is")
        if len(x) == 0 or len(r) != len(x) or r[1:] != x[1:]:
            raise VerifyException(f"input shape {fmt_shape(x)} does not pad to {fmt_shape(r)}")
        if offset < 0 or offset + x[0] > r[0]:
            raise VerifyException(f"rows [{offset}, {offset + x[0]}) are out of bounds "
                                  f"for shape {fmt_shape(r)}")


@irdl_op_definition
class OnehotOp(PureOp):
    """Zeros except `scale` at `index` (checked at run time); rows of indices
    and scales give one vector per row: ```mlir
    %o = adjoint.onehot %k, %s : i32, f32 -> tensor<5xf32>
    ```"""

    name = "adjoint.onehot"
    index = operand_def(IntegerType | TensorType)
    scale = operand_def(Float32Type | TensorType)
    result = result_def(TensorType)

    def verify_(self) -> None:
        batched, shape = f32_rows_or_static(self.result, "result")
        expect_rank(shape, 1, "result")
        type_rules.expect_index(self.index, batched)
        if batched:
            expect_type(self.scale, rows_type(Float32Type()), "scale")
        elif any(isinstance(v.type, TensorType) for v in (self.index, self.scale)):
            raise VerifyException("index and scale must be scalars for a static result")


@irdl_op_definition
class ReluGradOp(ElementwiseBinaryOp):
    """`dy` where `y > 0`, else 0 (`y` is relu's result): ```mlir
    %g = adjoint.relu_grad %y, %dy : tensor<4xf32>
    ```"""

    name = "adjoint.relu_grad"


class BilinearGradOp(InferredOp):
    """`%d = adjoint.bilinear_<side> %v, %dr, %other`: the gradient of
    `tmath.bilinear` (r[k] = xᵀ v[k] y) with respect to one side; `scale`
    and `other` may be rows (each row's gradient)."""

    tensor = operand_def(TensorType)
    scale = operand_def(TensorType)
    other = operand_def(TensorType)
    result = result_def(TensorType)


@irdl_op_definition
class BilinearLhsOp(BilinearGradOp):
    """dx[i] = Σ_k dr[k] Σ_j v[k,i,j] y[j]: ```mlir
    %dx = adjoint.bilinear_lhs %v, %dr, %y : tensor<2x3x4xf32>, tensor<2xf32>,
                                             tensor<4xf32> -> tensor<3xf32>
    ```"""

    name = "adjoint.bilinear_lhs"
    infer = staticmethod(partial(type_rules.bilinear_grad, other_axis=2))


@irdl_op_definition
class BilinearRhsOp(BilinearGradOp):
    """dy[j] = Σ_k dr[k] Σ_i v[k,i,j] x[i]: ```mlir
    %dy = adjoint.bilinear_rhs %v, %dr, %x : tensor<2x3x4xf32>, tensor<2xf32>,
                                             tensor<3xf32> -> tensor<4xf32>
    ```"""

    name = "adjoint.bilinear_rhs"
    infer = staticmethod(partial(type_rules.bilinear_grad, other_axis=1))


class WritesAcc(MemoryEffect):
    """Writes `acc`, so dead-code elimination keeps ops without results."""

    @classmethod
    def get_effects(cls, op: Operation) -> Set[EffectInstance]:
        return {EffectInstance(MemoryEffectKind.WRITE, op.operands[0])}


class AccumulateBase(IRDLOperation):
    """Adds into `acc` (each op's first operand), an argument of the enclosing
    function. Subclasses declare `acc` first: IRDL orders operands by the
    subclass's own fields. Row forms (`row_types.py`) add every row's
    contribution; an accumulator of rows (`accumulate_row` into the results
    of a frontier) has shape `(-1, ...)` here."""

    traits = traits_def(WritesAcc())
    assembly_format = "operands attr-dict `:` type(operands)"

    def verify_(self) -> None:
        arg = self.operands[0]
        acc_rows, shape = f32_rows_or_static(arg, "accumulator")
        owner = arg.owner if isinstance(arg, BlockArgument) else None
        parent = owner.parent_op() if owner is not None else None
        if not (isinstance(parent, func.FuncOp) and owner is parent.body.blocks.first):
            raise VerifyException("the accumulator must be an argument of the enclosing "
                                  "func.func (a buffer the caller owns)")
        self.verify_shapes((-1, *shape) if acc_rows else shape)

    def verify_shapes(self, acc: tuple[int, ...]) -> None:
        raise NotImplementedError


@irdl_op_definition
class AccumulateOp(AccumulateBase):
    """A value of rows of the accumulator's shape adds every row: ```mlir
    adjoint.accumulate %db, %dy : tensor<4xf32>, tensor<4xf32>
    ```"""

    name = "adjoint.accumulate"
    acc = operand_def(TensorType)
    value = operand_def(TensorType)

    def verify_shapes(self, acc: tuple[int, ...]) -> None:
        rows, value = f32_rows_or_static(self.value, "value")
        expect_shape((-1, *value) if rows and acc and acc[0] < 0 else value, acc, "value")


@irdl_op_definition
class AccumulateOuterOp(AccumulateBase):
    """acc[i, j] += a[i] * b[j], a matvec's matrix gradient, never materialised;
    rows of `a` and `b` add every row's outer product (`aᵀ b`): ```mlir
    adjoint.accumulate_outer %dw, %dy, %x : tensor<5x3xf32>, tensor<5xf32>, tensor<3xf32>
    ```"""

    name = "adjoint.accumulate_outer"
    acc = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)

    def verify_shapes(self, acc: tuple[int, ...]) -> None:
        expect_rank(acc, 2, "accumulator")
        lhs_rows, lhs = f32_rows_or_static(self.lhs, "lhs")
        rhs_rows, rhs = f32_rows_or_static(self.rhs, "rhs")
        if lhs_rows != rhs_rows:
            raise VerifyException("lhs and rhs must be both rows or both vectors")
        expect_shape(lhs, (acc[0],), "lhs")
        expect_shape(rhs, (acc[1],), "rhs")


@irdl_op_definition
class AccumulateRowOp(AccumulateBase):
    """acc[index, :] += value (checked at run time), an embedding's gradient;
    rows of indices and values add each row at its index (a scatter-add):
    ```mlir
    adjoint.accumulate_row %demb[%w], %dx : tensor<100x8xf32>, i32, tensor<8xf32>
    ```"""

    name = "adjoint.accumulate_row"
    acc = operand_def(TensorType)
    index = operand_def(IntegerType | TensorType)
    value = operand_def(TensorType)
    assembly_format = "$acc `[` $index `]` `,` $value attr-dict `:` type(operands)"

    def verify_shapes(self, acc: tuple[int, ...]) -> None:
        if not (acc and acc[0] < 0):  # rows of scalars are a table too
            expect_rank(acc, 2, "accumulator")
        rows, value = f32_rows_or_static(self.value, "value")
        type_rules.expect_index(self.index, rows)
        if not rows and isinstance(self.index.type, TensorType):
            raise VerifyException("value must be rows for rows of indices")
        expect_shape(value, acc[1:], "value")


@irdl_op_definition
class AccumulateBilinearOp(AccumulateBase):
    """acc[k, i, j] += dr[k] x[i] y[j], the RNTN tensor's gradient; rows of all
    three add every row's product: ```mlir
    adjoint.accumulate_bilinear %dv, %dr, %x, %y : tensor<2x3x4xf32>, tensor<2xf32>,
                                                   tensor<3xf32>, tensor<4xf32>
    ```"""

    name = "adjoint.accumulate_bilinear"
    acc = operand_def(TensorType)
    scale = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)

    def verify_shapes(self, acc: tuple[int, ...]) -> None:
        expect_rank(acc, 3, "accumulator")
        names = ("scale", "lhs", "rhs")
        forms = [f32_rows_or_static(v, what) for v, what in zip(self.operands[1:], names, strict=True)]
        if len({rows for rows, _ in forms}) != 1:
            raise VerifyException("scale, lhs and rhs must be all rows or all vectors")
        for (_, shape), axis, what in zip(forms, range(3), names, strict=True):
            expect_shape(shape, (acc[axis],), what)


@irdl_op_definition
class ThreadCopyOp(IRDLOperation):
    """The running thread's copy of a gradient buffer, in parallel native code.

    Calls that accumulate may run on several threads at once; each thread
    adds dense gradients into its own copy of the buffer (`elements` f32s),
    and the team sums the copies at its end. `slot` is the entry function's
    argument that `buffer` was passed down from: the thread's context holds a
    table of its copies indexed by it (thread 0's are the caller's buffers).
    Made by `convert-tmath-to-loops` in code with concurrent invokes, lowered
    by `convert-recir-to-llvm`.

    ```mlir
    %mine = adjoint.thread_copy %acc slot 5 elements 1200
    ```
    """

    name = "adjoint.thread_copy"
    buffer = operand_def(llvm.LLVMPointerType())
    slot = prop_def(IntegerAttr[I64])
    elements = prop_def(IntegerAttr[I64])
    result = result_def(llvm.LLVMPointerType())
    traits = traits_def(Pure())
    assembly_format = "$buffer `slot` $slot `elements` $elements attr-dict"

    def __init__(self, buffer: SSAValue, slot: int, elements: int):
        super().__init__(operands=[buffer], properties={"slot": IntegerAttr(slot, 64),
                                                        "elements": IntegerAttr(elements, 64)},
                         result_types=[llvm.LLVMPointerType()])


class WritesMemory(MemoryEffect):
    """Writes or orders memory (a lock, a log), so no pass removes or moves it."""

    @classmethod
    def get_effects(cls, op: Operation) -> Set[EffectInstance]:
        return {EffectInstance(MemoryEffectKind.WRITE)}


class RowLockBase(IRDLOperation):
    """`adjoint.lock_row %row` takes the lock of a table row (i64), in parallel
    native code (acquire); `adjoint.unlock_row %row` releases it (release).

    Embedding rows stay shared between threads (a per-thread copy of a whole table
    would cost more to sum than the few rows one tree touches), so a row is added
    between `lock_row` and `unlock_row` with plain vector arithmetic: one lock per row,
    not an atomic add (on x86 a CAS loop) per element. Locks are striped by row."""

    row = operand_def(I64)
    traits = traits_def(WritesMemory())
    assembly_format = "$row attr-dict"

    def __init__(self, row: SSAValue):
        super().__init__(operands=[row])

    def verify_(self) -> None:
        """An unlock_row of the row follows in the block, no lock_row or call
        between: locks are striped, so a second one could wait for itself."""
        if not isinstance(self, LockRowOp) or (block := self.parent_block()) is None:
            return
        at = self.next_op
        while at is not None and not (isinstance(at, UnlockRowOp) and at.row == self.row):
            taken = [o.name for o in at.walk() if o.name in TAKES_LOCKS]
            if taken:
                raise VerifyException(f"'{taken[0]}' runs before the row's unlock_row")
            at = at.next_op
        end = block.last_op  # (a branch to other blocks: lowered loops, not followed)
        if at is None and (end is None or not end.successors):
            raise VerifyException("the row is not unlocked before the block ends")


LockRowOp, UnlockRowOp = named_ops(RowLockBase, "adjoint", "lock_row", "unlock_row")
TAKES_LOCKS = ("adjoint.lock_row", "func.call", "invoke.invoke")  # (a callee may lock)


@irdl_op_definition
class LogReserveOp(IRDLOperation):
    """Room for one deferred outer product in the running thread's log.

    Native gradient code defers `adjoint.accumulate_outer` into a gradient
    buffer passed down from the entry: each thread appends `dy` and `x` to
    its log for that buffer (`slot`: the entry's argument), and the runtime
    adds `DY^T X` with one matrix product after the call instead of a pass
    over the whole buffer per invocation. `bytes` is one record's size. Made by
    `convert-tmath-to-loops` (option `defer-outer`), lowered by
    `convert-recir-to-llvm` to a call of `recir_log_reserve`.

    ```mlir
    %room = adjoint.log_reserve slot 5 bytes 4200
    ```
    """

    name = "adjoint.log_reserve"
    slot = prop_def(IntegerAttr[I64])
    bytes = prop_def(IntegerAttr[I64])
    result = result_def(llvm.LLVMPointerType())
    traits = traits_def(WritesMemory())
    assembly_format = "`slot` $slot `bytes` $bytes attr-dict"

    def __init__(self, slot: int, size: int):
        super().__init__(properties={"slot": IntegerAttr(slot, 64),
                                     "bytes": IntegerAttr(size, 64)},
                         result_types=[llvm.LLVMPointerType()])

    def verify_(self) -> None:
        if self.slot.value.data < 0 or self.bytes.value.data <= 0:
            raise VerifyException(f"'{self.name}' op needs a slot >= 0 and a record size "
                                  f"> 0, got slot {self.slot.value.data} and "
                                  f"{self.bytes.value.data} bytes")


Adjoint = Dialect("adjoint", [
    VecmatOp, TransposeOp, PadOp, OnehotOp, ReluGradOp, BilinearLhsOp, BilinearRhsOp,
    AccumulateOp, AccumulateOuterOp, AccumulateRowOp, AccumulateBilinearOp,
    ThreadCopyOp, LockRowOp, UnlockRowOp, LogReserveOp,
])
