"""Op base classes that `tmath`, `adjoint` and `frontier` share.

Most of their ops are pure, print their operands and types in one way, and
have a result type that follows from their operands; many differ only in
their name. These bases say each of those things once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self, TypeVar

from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from recir.dialects.row_types import expect_type

OPERANDS_FORMAT = "operands attr-dict `:` type(operands) `->` type(results)"


class PureOp(IRDLOperation):
    """`%r = <op> %a, %b : type(a), type(b) -> type(r)`, without side effects."""

    traits = traits_def(Pure())
    assembly_format = OPERANDS_FORMAT


class InferredOp(PureOp):
    """An op whose one result type follows from its operands (as MLIR's
    InferTypeOpInterface): `infer`, its rule in `type_rules.py`, types the
    op the builder makes and is what the verifier checks."""

    def __init__(self, *operands: SSAValue | Operation):
        values = [SSAValue.get(v) for v in operands]
        super().__init__(operands=values, result_types=[self.result_type(values)])

    @staticmethod
    def infer(*operands: SSAValue) -> Attribute:
        """The result type, or a `VerifyException` naming the bad operand."""
        raise NotImplementedError

    @classmethod
    def result_type(cls, operands: Sequence[SSAValue]) -> Attribute:
        """On bad operands a stand-in: the verifier reports them, located where
        the caller (the tracer) verifies the op."""
        try:
            return cls.infer(*operands)
        except VerifyException:
            return operands[0].type

    def verify_(self) -> None:
        expect_type(self.results[0], self.infer(*self.operands))


class SameShapeOp(InferredOp):
    """`%r = <op> %a[, %b] : T[, T2]`: the type is written once when the
    operands share it, and the result type is inferred."""

    assembly_format = None

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        arity = len(cls.get_irdl_definition().operands)
        names = [parser.parse_unresolved_operand()]
        while len(names) < arity:
            parser.parse_punctuation(",")
            names.append(parser.parse_unresolved_operand())
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types = [parser.parse_type()]
        while len(types) < arity and parser.parse_optional_punctuation(",") is not None:
            types.append(parser.parse_type())
        types += types[-1:] * (arity - len(types))
        operands = zip(names, types, strict=True)
        op = cls(*(parser.resolve_operand(n, t) for n, t in operands))
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        types = self.operand_types
        printer.print_list(types if any(t != types[0] for t in types) else types[:1],
                           printer.print_attribute)


OpT = TypeVar("OpT", bound=IRDLOperation)


def named_ops(base: type[OpT], dialect: str, *mnemonics: str) -> tuple[type[OpT], ...]:
    """One op per mnemonic with `base`'s operands, syntax and verifier
    (`add` -> `AddOp`, `tmath.add`): the ops differ only in what they compute."""
    return tuple(irdl_op_definition(type(
        "".join(w.title() for w in m.split("_")) + "Op", (base,),
        {"name": f"{dialect}.{m}", "__module__": base.__module__,
         "__doc__": f"`{dialect}.{m}`: {base.__doc__}"})) for m in mnemonics)
