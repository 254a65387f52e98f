"""The user's source line: where traced ops and tracing errors point.

The first stack frame outside the tracer (recir/frontend) is the user's; its
`file:line` becomes each op's location, so IR, verifier errors and tracing
errors all name the line of the model the user wrote.
"""

from __future__ import annotations

import sys
from pathlib import Path

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr

from recir.diagnostics import RecirError

FRONTEND_DIR = str(Path(__file__).resolve().parent)


def user_frame() -> tuple[str, int]:
    frame = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(FRONTEND_DIR) and not filename.startswith("<frozen"):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


def user_location() -> FileLineColLoc:
    filename, line = user_frame()
    return FileLineColLoc(StringAttr(filename), IntAttr(line), IntAttr(1))


def user_error(msg: str) -> RecirError:
    filename, line = user_frame()
    return RecirError(f"{filename}:{line}:1: error: {msg}")


class MissingAttributeError(RecirError, AttributeError):
    """A traced value's missing attribute (`h.T`): located and with a hint,
    yet an AttributeError still, so `hasattr` and `getattr(x, name, default)`
    answer as before."""


def user_attribute_error(msg: str) -> MissingAttributeError:
    filename, line = user_frame()
    return MissingAttributeError(f"{filename}:{line}:1: error: {msg}")
