"""`recir-opt`: xdsl-opt with recir's dialects and passes, and located errors.

Errors (bad IR text, failed verification, failed passes) print one
`file:line:col: error: ...` line and exit with status 1, not a traceback.
"""

from __future__ import annotations

import sys
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from recir.context import make_context
from recir.parsing import parse_module
from recir.universe import RECIR_DIALECTS, RECIR_PASSES


class RecirOptMain(xDSLOptMain):
    version_format = "recir-opt built on xdsl {xdsl_version}"

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for name, factory in RECIR_DIALECTS.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in RECIR_PASSES.items():
            self.available_passes.setdefault(name, factory)

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        if file_extension != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        text = chunk.read().decode()
        return parse_module(self.ctx, text, self.get_input_name(), start_offset)


def main(argv: list[str] | None = None) -> int:
    try:
        RecirOptMain(description="recir modular optimizer driver", args=argv).run()
    except (DiagnosticException, ParseError) as e:
        print(str(e).removesuffix("\n"), file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
