"""Parse IR text and verify it with errors located at `file:line:col`.

xDSL's verifier reports a failing op without its position in the text; recir
records each op's position while parsing and verifies op by op, so every error
is one `file:line:col: error: 'op' op message` line.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from recir.diagnostics import RecirError, format_error


class LocatingParser(Parser):
    """A parser that gives each op without a `loc(...)` its source position."""

    def __init__(self, ctx: Context, text: str, name: str, line_offset: int = 0):
        super().__init__(ctx, text, name)
        self.line_offset = line_offset

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as e:  # a type constraint failed while parsing
            end = self._current_token.span
            raise ParseError(Span(start.start, end.start, start.input), str(e)) from None
        if not isinstance(op.location, FileLineColLoc):
            where = Span(start.start, start.end, start.input, self.line_offset)
            loc = where.get_location()
            op.location = FileLineColLoc(
                StringAttr(loc.file), IntAttr(loc.line), IntAttr(loc.col)
            )
        return op


def format_parse_error(e: ParseError, line_offset: int = 0) -> str:
    """`file:line:col: error: msg`, then the source line with a caret."""
    span = Span(e.span.start, e.span.end, e.span.input, e.span.line_offset + line_offset)
    context = span.print_with_context().split("\n", 1)[1].rstrip("\n")
    return f"{span.get_location()}: error: {e.msg}\n{context}"


def verify_located(module: Operation) -> None:
    """Verify op by op; the first failure becomes a located `RecirError`."""
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as e:
            raise RecirError(format_error(op, str(e.args[0]))) from None


def parse_module(
    ctx: Context, text: str, name: str = "<input>", line_offset: int = 0
) -> ModuleOp:
    """Parse and verify; raises `RecirError` with a located message."""
    try:
        module = LocatingParser(ctx, text, name, line_offset).parse_module()
    except ParseError as e:
        raise RecirError(format_parse_error(e, line_offset)) from None
    verify_located(module)
    return module
