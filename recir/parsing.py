"""Parse IR text and verify it with errors located at `file:line:col`.

xDSL's verifier reports a failing op without its position in the text; recir
records each op's position while parsing and verifies op by op, so every error
is one `file:line:col: error: 'op' op message` line. A type error xDSL finds
while parsing (an operand used with another type than it has, a type or
attribute an op's definition rejects, a literal its type cannot hold) is
reported the same way, at the op, rather than as a caret under a token.
Input xDSL would turn into a traceback (bytes that are not UTF-8, a constant
too large for memory, a float literal beyond its type's range, nesting
deeper than Python's recursion limit) is reported the same way; a decimal
literal xDSL would read as infinity (`1.0e400 : f64`) is such a literal too.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyFloat,
    FileLineColLoc,
    FloatAttr,
    IntAttr,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.parser import Parser, ParserState, UnresolvedOperand
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from recir.diagnostics import RecirError, one_line
from recir.verification import verify_located

# xDSL expands a dense literal, a splat too, to one Python object per element:
# about 24 bytes each to parse and 64 to print (tracemalloc's peaks for 10**6
# f32 elements). A literal is refused where that would take more than a
# quarter of the machine's memory, rather than exhaust it.
DENSE_BYTES_PER_ELEMENT = 24 + 64


@functools.cache
def quarter_of_memory() -> int:
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 8 GiB
        memory = 8 << 30
    return memory // 4


# a decimal number in IR text, not digits of a name (`f32`) or of a
# hexadecimal literal (`0x1e50`: bits, never beyond its type)
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def overflowing(text: str, typ: Any) -> str | None:
    """The first decimal literal in `text` that float type `typ` cannot hold
    as a finite value, as xDSL converts it (an integer by `float(int)`)."""
    for literal in DECIMAL.findall(text):
        try:
            exact = re.search("[.eE]", literal) is None
            value = float(int(literal)) if exact else float(literal)
            typ.pack((value,))
        except OverflowError:
            return literal
        if math.isinf(value):
            return literal
    return None


def dense_element_limit() -> int:
    return quarter_of_memory() // DENSE_BYTES_PER_ELEMENT


def read_source(stream: IO[bytes], name: str) -> bytes:
    """An IR file's bytes, at most a quarter of the machine's memory (a
    device such as /dev/zero, read whole, takes it all)."""
    limit = quarter_of_memory()
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise RecirError(f"{name}: error: more than {limit >> 20} MiB of IR, a quarter of "
                         "this machine's memory")
    return data


class LinearStringLexer(MLIRLexer):
    """xDSL's lexer with a string-literal pattern that cannot backtrack
    exponentially: xDSL's nests `+` inside `*`, so a quote left open before
    a long line took exponential time (a stray `"` hung recir-opt). The
    same language, one character per repetition."""

    _unescaped_characters_regex = re.compile(
        r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"')


@dataclass
class OpParseError(ParseError):
    """A parse error about one op as a whole, printed like a verifier's: one
    line at the op naming it. Still a `ParseError`, so xDSL's backtracking
    treats it as before."""

    op_name: str = ""


class LocatingParser(Parser):
    """A parser that gives each op without a `loc(...)` its source position."""

    def __init__(self, ctx: Context, text: str, name: str, line_offset: int = 0):
        super().__init__(ctx, "", name)
        self._parser_state = ParserState(LinearStringLexer(Input(text, name)))
        self.line_offset = line_offset
        self.first_uses: dict[str, Span] = {}  # forward references, for errors
        self.parsing: list[list[Any]] = []  # [start, op name] of each op being parsed
        self.attribute_depth = 0  # attributes being parsed, nested
        self.after_type = (0, -1)  # (attribute depth, position) after a literal's type
        self.literal_type: Any = None  # the type of the literal being parsed

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        depth = len(self.parsing)
        self.parsing.append([start, None])
        try:
            op = super().parse_operation()
        except VerifyException as e:  # a type constraint failed while parsing
            if self.parsing[depth][1] is None:
                end = self._current_token.span
                raise ParseError(Span(start.start, end.start, start.input),
                                 str(e)) from None
            raise self.op_error(str(e), depth) from None
        except (MemoryError, OverflowError):  # e.g. a dense splat of 10**11 elements
            raise ParseError(start, "a value of this op is too large to hold in "
                             "memory") from None
        finally:
            del self.parsing[depth:]
        if not isinstance(op.location, FileLineColLoc):
            where = Span(start.start, start.end, start.input, self.line_offset)
            loc = where.get_location()
            op.location = FileLineColLoc(
                StringAttr(loc.file), IntAttr(loc.line), IntAttr(loc.col)
            )
        return op

    def _get_op_by_name(self, name: str) -> type[Operation]:
        op_type = super()._get_op_by_name(name)
        self.parsing[-1][1] = op_type.name
        return op_type

    def op_error(self, msg: str, depth: int = -1) -> ParseError:
        """An error at the op being parsed (the innermost, or the one at
        `depth`), naming it; a plain `ParseError` before its name is read."""
        start, name = self.parsing[depth] if self.parsing else (None, None)
        if name is None:
            return ParseError(self._current_token.span, msg)
        return OpParseError(start, one_line(msg), name)

    def _parse_dense_literal_type(self) -> Any:
        start = self._current_token.span
        typ = super()._parse_dense_literal_type()
        count = math.prod(max(d, 0) for d in typ.get_shape())
        if count > dense_element_limit():
            raise ParseError(start, f"a dense literal of {count} elements is too large "
                             f"(at most {dense_element_limit()} on this machine)")
        self.after_type = (self.attribute_depth, self._current_token.span.start)
        self.literal_type = typ.element_type
        return typ

    def _parse_attribute_type(self) -> Attribute:
        typ = super()._parse_attribute_type()
        self.after_type = (self.attribute_depth, self._current_token.span.start)
        self.literal_type = typ
        return typ

    def parse_optional_builtin_int_or_float_attr(self) -> Any:
        """xDSL raises an OverflowError for a float literal beyond its type
        (`1.0e40 : f32`) and reads one beyond f64 as infinity: an error of
        the op, naming the value."""
        start = self._current_token.span
        try:
            attr = super().parse_optional_builtin_int_or_float_attr()
        except OverflowError:
            self.overflow(start, self.literal_type)
            raise
        if isinstance(attr, FloatAttr) and math.isinf(attr.value.data):
            self.overflow(start, attr.type)
        return attr

    def parse_dense_int_or_fp_elements_attr(self, type: Any) -> Any:
        """Each element of a dense literal checked as a scalar literal is."""
        start = self._current_token.span
        try:
            attr = super().parse_dense_int_or_fp_elements_attr(type)
        except OverflowError:
            self.overflow(start, (type.element_type if type is not None
                                  else self.literal_type))
            raise
        element = attr.get_element_type()
        if isinstance(element, AnyFloat) and np.isinf(attr.get_values()).any():
            self.overflow(start, element)
        return attr

    def overflow(self, start: Span, typ: Any) -> None:
        """An error naming the literal from `start` on that `typ` cannot hold
        (none where each holds: an infinity given as its bits)."""
        text = Span(start.start, self._current_token.span.start, start.input).text
        literal = overflowing(text, typ) if typ is not None else None
        if literal is not None:
            raise self.op_error(f"the value {literal} overflows {typ}")

    def parse_optional_attribute(self) -> Attribute | None:
        """xDSL checks a literal against its type once both are read and
        reports a mismatch at the next token, often the next op's line;
        here it is an error of the op holding the literal."""
        self.attribute_depth += 1
        try:
            return super().parse_optional_attribute()
        except OpParseError:
            raise
        except ParseError as e:  # only right after this literal's own type
            here = (self.attribute_depth, self._current_token.span.start)
            if self.after_type != here or e.span.start != here[1]:
                raise
            raise self.op_error(e.msg) from None
        finally:
            self.attribute_depth -= 1

    def resolve_operand(self, operand: UnresolvedOperand, type: Attribute) -> SSAValue:
        name = operand.operand_name
        if name not in self.ssa_values:
            self.first_uses.setdefault(name, operand.span)
        known, text = self.known_type(operand), operand.span.text
        if known is None or known == type:
            value = super().resolve_operand(operand, type)
            if value.name_hint is None and SSAValue.is_valid_name(name):
                value.name_hint = name  # (a forward reference's placeholder: for errors)
            return value
        if name in self.ssa_values:
            raise self.op_error(f"operand {text} has type {known} but is used as "
                                f"{type}")
        raise self.op_error(f"operand {text} is used as {type} here but as {known} at "
                            "an earlier use")

    def resolve_operands(self, args: Any, input_types: Any, error_pos: Any) -> Any:
        """xDSL reports a count mismatch after the op's type, often on the
        next op's line."""
        types = list(input_types)
        if len(args) != len(types) and self.parsing:
            raise self.op_error(f"has {len(args)} operands but its type lists "
                                f"{len(types)}")
        return super().resolve_operands(args, types, error_pos)

    def _register_ssa_definition(self, name: str, values: Any, span: Span) -> None:
        """A result whose type differs from an earlier (forward) use's."""
        for index, value in self.forward_ssa_references.get(name, {}).items():
            if index >= len(values) or value.type == values[index].type:
                continue
            if self.parsing:
                shown = f"%{name}" if len(values) == 1 else f"%{name}#{index}"
                raise self.op_error(f"result {shown} has type {values[index].type} but "
                                    f"an earlier use has it as {value.type}")
        super()._register_ssa_definition(name, values, span)

    def known_type(self, operand: UnresolvedOperand) -> Attribute | None:
        """The type of a defined or already-used value (None where unknown)."""
        values = self.ssa_values.get(operand.operand_name)
        if values is None:
            forward = self.forward_ssa_references.get(operand.operand_name, {})
            value = forward.get(operand.index)
            return value.type if value is not None else None
        return values[operand.index].type if operand.index < len(values) else None

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        """xDSL reports values never defined at the end of the input; this
        points at the first use of the first of them instead. No ops at all
        (an empty file, only comments) is an empty module, as in MLIR."""
        if self._current_token.kind is MLIRTokenKind.EOF:
            return ModuleOp([])
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as e:
            undefined = [n for n in self.forward_ssa_references if n in self.first_uses]
            if not undefined or not e.msg.startswith("values used but not defined"):
                raise
            names = ", ".join(f"%{n}" for n in undefined)
            raise ParseError(self.first_uses[undefined[0]],
                             f"use of undefined value {names}") from None


def format_parse_error(e: ParseError, line_offset: int = 0) -> str:
    """`file:line:col: error: msg`, then the source line with a caret (one
    line naming the op for an error about an op)."""
    span = Span(e.span.start, e.span.end, e.span.input, e.span.line_offset + line_offset)
    if isinstance(e, OpParseError):
        return f"{span.get_location()}: error: '{e.op_name}' op {e.msg}"
    context = span.print_with_context().split("\n", 1)[1].rstrip("\n")
    return f"{span.get_location()}: error: {e.msg}\n{context}"


def decode_source(data: bytes, name: str, line_offset: int = 0) -> str:
    """The UTF-8 text of an IR file; a bad byte is a located error."""
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1 + line_offset
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise RecirError(f"{name}:{line}:{col}: error: byte 0x{data[e.start]:02x} is "
                         "not valid UTF-8 (IR files are UTF-8 text)") from None


def parse_module(
    ctx: Context, text: str, name: str = "<input>", line_offset: int = 0
) -> ModuleOp:
    """Parse and verify; raises `RecirError` with a located message."""
    try:
        module = LocatingParser(ctx, text, name, line_offset).parse_module()
    except ParseError as e:
        raise RecirError(format_parse_error(e, line_offset)) from None
    except RecursionError:
        raise RecirError(f"{name}: error: the IR nests too deeply to parse (more "
                         "levels than Python's recursion limit allows)") from None
    verify_located(module)
    return module
