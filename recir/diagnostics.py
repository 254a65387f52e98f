"""Errors that point at a location: the user's Python line or the IR text.

Messages follow the LLVM convention: lowercase, no trailing period, printed
as `file:line:col: error: message`.
"""

from __future__ import annotations

from xdsl.dialects.builtin import FileLineColLoc
from xdsl.ir import Operation
from xdsl.utils.exceptions import DiagnosticException


class RecirError(DiagnosticException):
    """An error a user caused (bad IR, bad model, bad input) and can fix."""


def location_prefix(op: Operation) -> str:
    """`file:line:col: ` for an op with a file location, else the empty string."""
    loc = op.location
    if not isinstance(loc, FileLineColLoc):
        return ""
    return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}: "


def one_line(text: str) -> str:
    """A message's lines joined (xDSL's constraint errors put what failed on
    a second line)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def format_error(op: Operation | None, msg: str) -> str:
    msg = one_line(msg)
    if op is None:
        return f"error: {msg}"
    return f"{location_prefix(op)}error: '{op.name}' op {msg}"


def emit_error(op: Operation | None, msg: str) -> RecirError:
    """Build (for `raise`) an error located at `op`."""
    return RecirError(format_error(op, msg))
