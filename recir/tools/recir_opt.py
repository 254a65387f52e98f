"""`recir-opt`: xdsl-opt with recir's dialects and passes, and located errors.

Errors (bad IR text, failed verification, failed passes) print one
`file:line:col: error: ...` line and exit with status 1, not a traceback. A
pass run before the passes it depends on (`recir.pass_order`) is reported at
the first op it cannot handle.
"""

from __future__ import annotations

import sys
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from recir.diagnostics import RecirError
from recir.parsing import decode_source, parse_module, read_source
from recir.pass_order import check_prerequisites
from recir.universe import RECIR_DIALECTS, RECIR_PASSES, RECIR_REPLACEMENTS
from recir.verification import verify_located


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
        self.available_passes.update(RECIR_REPLACEMENTS)

    def setup_pipeline(self) -> None:
        """xDSL's pipeline; an option a pass cannot take is named with its
        pass (xDSL says only 'Incompatible types: given ('x',), expected int')."""
        try:
            super().setup_pipeline()
        except ValueError:
            for spec in parse_pipeline(self.args.passes):
                if spec.name in self.available_passes:
                    try:
                        self.available_passes[spec.name]().from_pass_spec(spec)
                    except (ValueError, TypeError) as e:
                        raise ValueError(f"pass '{spec.name}': {one_line(e)}") from None
            raise

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        if file_extension != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        text = decode_source(read_source(chunk, self.get_input_name()), self.get_input_name(),
                             start_offset)
        return parse_module(self.ctx, text, self.get_input_name(), start_offset)

    def apply_passes(self, prog: ModuleOp) -> None:
        """Each pass after a check of its prerequisites; a pass that fails
        without a located error is named in a one-line error."""
        passes, callback = self.pipeline.passes, self.pipeline.callback
        for i, stage in enumerate(passes):
            if i == 0 and callback is not None:
                callback(None, prog, stage)
            try:
                check_prerequisites(stage.name, prog)
                stage.apply(self.ctx, prog)
                if not self.args.disable_verify:
                    verify_located(prog)
            except RecirError as e:
                raise self.in_file(str(e)) from None
            except (DiagnosticException, ValueError, KeyError, TypeError,
                    AssertionError, NotImplementedError) as e:
                raise self.in_file(f"error: pass '{stage.name}' failed: "
                                   f"{one_line(e)}") from None
            if callback is not None:
                callback(stage, prog, passes[i + 1] if i + 1 < len(passes) else None)

    def output_resulting_program(self, prog: ModuleOp) -> str:
        """xDSL's targets other than `mlir` expect their own dialects (riscv,
        x86, llvm's own translation): on recir's IR they raised
        NotImplementedError or an AssertionError holding the whole op."""
        try:
            return super().output_resulting_program(prog)
        except (NotImplementedError, AssertionError, KeyError, TypeError) as e:
            detail = f": {one_line(e, 120)}" if isinstance(e, NotImplementedError) else ""
            raise RecirError(f"error: the '{self.args.target}' target cannot print this "
                             f"IR ({type(e).__name__}{detail}); the 'mlir' target prints "
                             "any IR") from None

    def in_file(self, message: str) -> RecirError:
        """The error located at the input file where no op location is known
        (ops a pass made may have none)."""
        if message.startswith("error:"):
            message = f"{self.get_input_name()}: {message}"
        return RecirError(message)


def one_line(e: BaseException, limit: int = 200) -> str:
    """An exception's message on one line, cut short (xDSL's may hold the
    repr of a whole block)."""
    text = " ".join((str(e.args[0]) if len(e.args) == 1 else str(e)).split())
    text = text or type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    try:
        RecirOptMain(description="recir modular optimizer driver", args=argv).run()
    except (DiagnosticException, ParseError) as e:
        message = str(e).removesuffix("\n")
        print(message if "error:" in message.split("\n", 1)[0] else f"error: {message}",
              file=sys.stderr)
        return 1
    except (OSError, ValueError, ArgSpecParseError) as e:  # (the last: a BaseException)
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 1
    except RecursionError:
        print("error: the IR nests too deeply (more levels than Python's recursion "
              "limit allows)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
