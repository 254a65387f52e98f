"""`recir-run` on the thesis programs: each scalar result on its own line, the
native code (the default, or --jit) and the interpreter agreeing with the
published values. In-process (`main`), so no interpreter start-up per case."""

from pathlib import Path

import pytest

from recir.tools.recir_run import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"
# (file, entry, arguments, result, the native run's flag: --jit or the default)
CASES = [
    ("fib.mlir", "fib", ["20"], "10946", ["--jit"]),
    ("ackermann.mlir", "ack", ["2", "3"], "9", []),
    ("takeuchi.mlir", "tak", ["12", "8", "4"], "5", []),
    ("thesis_primes.mlir", "thesis_primes", ["60"], "233", []),
]


@pytest.mark.parametrize("interpret", [True, False], ids=["interpret", "native"])
@pytest.mark.parametrize(("file", "entry", "args", "expected", "native"), CASES,
                         ids=[c[1] for c in CASES])
def test_recir_run_prints_the_published_value(file, entry, args, expected, native,
                                              interpret, capsys):
    argv = [str(EXAMPLES / file), "--entry", entry,
            *(a for v in args for a in ("--arg", v))]
    assert main(argv + (["--interpret"] if interpret else native)) == 0
    assert capsys.readouterr().out.splitlines() == [expected]
