"""Where `synthesize-gradients` puts each saved value: which frame, which offset.

A value is saved in the frame of the region that defines it. The function's
body has the frame its `_fwd` returns. Each `scf.if` region that saves
anything gets a frame of its own, allocated only when that branch runs; its
pointer goes into the enclosing frame, at one slot that both branches share
(one of them runs). So an invocation pays for the branch it takes: a tree's
leaves do not carry the slots of its inner nodes, as they would if both
branches were laid out side by side in one frame.
"""

from __future__ import annotations

from xdsl.dialects import scf
from xdsl.ir import Block, Operation, Region, SSAValue

Key = SSAValue | Operation  # a saved value; an invoke (its frame); an scf.if (its branch's)


def region_of(value: SSAValue) -> Region:
    """The region whose frame holds `value` when it is saved."""
    owner = value.owner
    region = owner.parent_region() if isinstance(owner, Operation) else owner.parent
    assert isinstance(region, Region), f"{value} is not in a region"
    return region


class FrameLayouts:
    """Byte layout of every frame of one function, built as slots are asked for."""

    def __init__(self, body: Region):
        self.body = body
        self.sizes: dict[Region, int] = {body: 0}
        self.slots: dict[Key, tuple[Region, int]] = {}

    def slot(self, key: Key, region: Region, size: int, align: int) -> int:
        """The offset of `key` in the frame of `region`, allocated on first use."""
        if key not in self.slots:
            if region is not self.body:
                self.branch_slot(region)
            used = self.sizes.get(region, 0)
            offset = -(-used // align) * align
            self.sizes[region] = offset + size
            self.slots[key] = (region, offset)
        return self.slots[key][1]

    def branch_slot(self, region: Region) -> int:
        """The slot of the enclosing frame that holds `region`'s frame."""
        op = region.parent_op()
        assert isinstance(op, scf.IfOp), f"frames for {op} regions are not supported"
        parent = op.parent_region()
        assert parent is not None
        return self.slot(op, parent, 8, 8)

    def size(self, region: Region) -> int:
        return max(self.sizes.get(region, 0), 8)

    def branch_regions(self, op: scf.IfOp) -> list[Region]:
        """`op`'s regions that have a frame."""
        return [r for r in op.regions if r in self.sizes]


def first_block(region: Region) -> Block:
    block = region.blocks.first
    assert block is not None
    return block
