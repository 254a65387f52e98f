"""Ops built from a cached template, for the lowerings' most frequent ops.

An IRDL op's `__init__` converts and checks every argument, which costs a
few times what `Operation.create` does; the lowerings build tens of
thousands of GEPs, loads, stores, constants and arithmetic ops per module
(`bench/run.py compile`). `build` makes the first op of each `key` the
regular way, keeps its kind, result types, properties and attributes (all
immutable), and creates the later ones from them. The key must name
everything but the operands that the op depends on, starting with the
kind of op that `make` returns (keys are shared by every caller).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from xdsl.ir import Attribute, Operation, SSAValue

Op = TypeVar("Op", bound=Operation)
Template = tuple[type[Operation], tuple[Attribute, ...], dict[str, Attribute],
                 dict[str, Attribute]]

_templates: dict[Hashable, Template] = {}


def build(key: Hashable, make: Callable[[], Op], operands: Sequence[SSAValue]) -> Op:
    """`make()`, or an op equal to what it would return, on `operands`."""
    template = _templates.get(key)
    if template is None:
        op = make()
        _templates[key] = (type(op), tuple(r.type for r in op.results),
                           dict(op.properties), dict(op.attributes))
        return op
    kind, results, properties, attributes = template
    return kind.create(operands=operands, result_types=results, properties=properties,
                       attributes=attributes)  # type: ignore[return-value]


def replace(op: Operation, new_ops: Sequence[Operation]) -> None:
    """`Rewriter.replace_op(op, new_ops)` for an op whose results the last
    of `new_ops` replaces one for one, without its per-op overheads (it
    gives every erased result an `ErasedSSAValue` to take its uses, which
    are gone by then): the lowerings replace every arith op so."""
    block = op.parent
    assert block is not None
    block.insert_ops_before(new_ops, op)
    for old, new in zip(op.results, new_ops[-1].results, strict=True):
        old.replace_all_uses_with(new)
    block.detach_op(op)
    op.drop_all_references()
