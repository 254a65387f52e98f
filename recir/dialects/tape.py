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

from xdsl.dialects import llvm
from xdsl.dialects.builtin import I64, IntegerAttr
from xdsl.ir import Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException


@irdl_attr_definition
class FrameType(ParametrizedAttribute, TypeAttribute):
    """An activation frame: `!tape.frame`."""

    name = "tape.frame"


FRAME = FrameType()


def check_offset(offset: IntegerAttr, frame: SSAValue) -> None:
    if offset.value.data < 0:
        raise VerifyException(f"offset {offset.value.data} is negative")
    size = frame.owner.bytes.value.data if isinstance(frame.owner, NewOp) else None
    if size is not None and offset.value.data >= size:
        raise VerifyException(f"offset {offset.value.data} is outside the frame of {size} bytes")


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
        check_offset(self.offset, self.frame)


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
        check_offset(self.offset, self.frame)


Tape = Dialect("tape", [NewOp, SaveOp, LoadOp], [FrameType])
