"""The `tape` dialect: activation frames that carry forward values to the backward.

`synthesize-gradients` gives each invocation of a forward function its own
frame (`tape.new`); the forward saves what the backward needs into it at fixed
byte offsets, including its children's frames, so the frames form a tree that
mirrors the call tree. Each invocation writes only its own frame: no table
keyed by call position and no contention when invocations run concurrently.

```mlir
%f = tape.new 24 : !tape.frame
tape.save %h, %f[0] : tensor<4xf32>
tape.save %child, %f[16] : !tape.frame
%h2 = tape.load %f[0] : tensor<4xf32>
```

Natively a frame is a pointer into a per-call arena (`tape.new` bumps it);
tensors are copied in by `tape.save` and read in place by `tape.load`.
"""

from __future__ import annotations

import math

from xdsl.dialects import llvm
from xdsl.dialects.builtin import I64, IntegerAttr, IntegerType, TensorType
from xdsl.ir import (
    Attribute,
    Dialect,
    Operation,
    ParametrizedAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.irdl.dominance import DominanceInfo
from xdsl.utils.exceptions import VerifyException


@irdl_attr_definition
class FrameType(ParametrizedAttribute, TypeAttribute):
    """An activation frame: `!tape.frame`."""

    name = "tape.frame"


FRAME = FrameType()


def slot_bytes(typ: Attribute) -> int:
    """The bytes a value of `typ` takes in a frame (a dynamic tensor: none,
    which the saving refuses)."""
    if isinstance(typ, TensorType):
        shape = typ.get_shape()
        return 0 if any(d < 0 for d in shape) else 4 * math.prod(shape)
    if isinstance(typ, IntegerType):
        return max(1, typ.width.data // 8)
    return 8 if isinstance(typ, FrameType | llvm.LLVMPointerType) else 4


def check_offset(offset: IntegerAttr, frame: SSAValue, typ: Attribute) -> None:
    """The slot [offset, offset + its bytes) lies inside a frame of known size."""
    start = offset.value.data
    if start < 0:
        raise VerifyException(f"offset {start} is negative")
    size = frame.owner.bytes.value.data if isinstance(frame.owner, NewOp) else None
    end = start + slot_bytes(typ)
    if size is not None and (start >= size or end > size):
        raise VerifyException(f"bytes {start}..{end} of a {typ} are outside the frame of "
                              f"{size} bytes")


# The largest frame: beyond any machine's memory, and small enough that the
# arena's rounding to 64 bytes, its chunk header and its pointer bump
# (`tape_arena.alloc_function`) cannot overflow i64 (2^63 - 1 wrapped to a
# negative size, refused only by luck as out of memory).
MAX_FRAME_BYTES = 1 << 62


@irdl_op_definition
class NewOp(IRDLOperation):
    """A fresh frame of `bytes` bytes for this invocation.

    ```mlir
    %f = tape.new 64 : !tape.frame
    ```
    Lowering to loops retypes the result to `!llvm.ptr`.
    """

    name = "tape.new"
    bytes = prop_def(IntegerAttr[I64])
    frame = result_def(FrameType | llvm.LLVMPointerType)
    assembly_format = "$bytes attr-dict `:` type($frame)"

    def __init__(self, size: int):
        super().__init__(properties={"bytes": IntegerAttr(size, 64)}, result_types=[FRAME])

    def verify_(self) -> None:
        """The frame has room (natively 0 bytes is a null frame) and no more
        than `MAX_FRAME_BYTES`, and the saves into it in one block write slots
        that do not overlap (a later one would overwrite part of another's
        value)."""
        size = self.bytes.value.data
        if size <= 0:
            raise VerifyException(f"needs bytes > 0, got {size}")
        if size > MAX_FRAME_BYTES:
            raise VerifyException(f"needs bytes <= 2^62 ({MAX_FRAME_BYTES}), got {size}: "
                                  "no machine can allocate such a frame")
        saves = [u.operation for u in self.frame.uses
                 if isinstance(u.operation, SaveOp) and u.index == 1]
        for block in {op.parent_block() for op in saves}:
            slots = sorted((op.offset.value.data, op.offset.value.data + slot_bytes(
                op.value.type), op.value.type) for op in saves if op.parent_block() is block)
            for (_, end, first), (start, _, second) in zip(slots, slots[1:]):
                if start < end:
                    raise VerifyException(f"a {second} saved at offset {start} overlaps "
                                          f"the {first} saved before it (to byte {end})")


@irdl_op_definition
class SaveOp(IRDLOperation):
    """Stores a value into a frame at a byte offset.

    ```mlir
    tape.save %x, %f[16] : tensor<4xf32>
    ```
    """

    name = "tape.save"
    value = operand_def()
    frame = operand_def(FrameType)
    offset = prop_def(IntegerAttr[I64])
    assembly_format = "$value `,` $frame `[` $offset `]` attr-dict `:` type($value)"

    def __init__(self, value: SSAValue, frame: SSAValue, offset: int):
        super().__init__(operands=[value, frame], properties={"offset": IntegerAttr(offset, 64)})

    def verify_(self) -> None:
        check_offset(self.offset, self.frame, self.value.type)


@irdl_op_definition
class LoadOp(IRDLOperation):
    """Reads back a value a `tape.save` stored.

    ```mlir
    %x = tape.load %f[16] : tensor<4xf32>
    ```
    """

    name = "tape.load"
    frame = operand_def(FrameType)
    offset = prop_def(IntegerAttr[I64])
    result = result_def()
    assembly_format = "$frame `[` $offset `]` attr-dict `:` type($result)"

    def __init__(self, frame: SSAValue, offset: int, typ):
        super().__init__(operands=[frame], properties={"offset": IntegerAttr(offset, 64)},
                         result_types=[typ])

    def verify_(self) -> None:
        """In a frame this function makes, a slot holds one type (natively a
        load reinterprets the bytes) and a save there dominates the load
        (natively an unsaved slot reads the arena's stale bytes)."""
        check_offset(self.offset, self.frame, self.result.type)
        if not isinstance(self.frame.owner, NewOp):
            return
        offset = self.offset.value.data
        saves = [u.operation for u in self.frame.uses if isinstance(u.operation, SaveOp)
                 and u.index == 1 and u.operation.offset == self.offset]
        if not saves:
            raise VerifyException(
                f"reads offset {offset} of a frame no tape.save writes there")
        for save in saves:
            if save.value.type != self.result.type:
                raise VerifyException(f"reads a {self.result.type} at offset {offset}, "
                                      f"where tape.save writes a {save.value.type}")
        if not any(dominates(save, self) for save in saves):
            raise VerifyException(f"reads offset {offset} of a frame, but no tape.save "
                                  "there dominates it: it may run before any save")


def dominates(first: Operation, second: Operation) -> bool:
    """Whether `first` runs before `second` on every path to it (MLIR's
    `DominanceInfo::properlyDominates` for ops)."""
    region = first.parent_region()
    ancestor: Operation | None = second
    while ancestor is not None and ancestor.parent_region() is not region:
        ancestor = ancestor.parent_op()
    if ancestor is None or region is None:
        return False
    block, other = first.parent_block(), ancestor.parent_block()
    if block is other:
        return first.is_before_in_block(ancestor)
    assert block is not None
    assert other is not None
    return DominanceInfo(region).dominates(block, other)


Tape = Dialect("tape", [NewOp, SaveOp, LoadOp], [FrameType])
