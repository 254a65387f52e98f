"""`python -m recir.examples.demo`: run the example programs end to end.

Each thesis program in `examples/ir/` is parsed, verified and run by the
reference interpreter, and its result checked against plain Python.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from recir.context import make_context
from recir.interpreter import run_function
from recir.parsing import parse_module
from recir.examples.programs import CALLS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ir"
DEMO_ARGS = {"fib": (20,), "ack": (2, 3), "tak": (12, 8, 4), "thesis_primes": (60,)}


def main() -> int:
    failures = 0
    for name, args in DEMO_ARGS.items():
        reference, filename = CALLS[name]
        module = parse_module(make_context(), (EXAMPLES / filename).read_text(), filename)
        start = time.perf_counter()
        (got,) = run_function(module, name, list(args))
        seconds = time.perf_counter() - start
        expected = reference(*args)
        status = "ok" if got == expected else f"MISMATCH (python says {expected})"
        failures += got != expected
        call = f"{name}({', '.join(map(str, args))})"
        print(f"{call:22} = {got:<8} interpreter {seconds:6.2f} s  {status}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
