"""`run.py static`: static Call/Return against dynamic call expansion (thesis tables).

fib, ack, tak and thesis_primes from `examples/ir/`, each run three ways on
one thread: the **static** graph (`lower-invoke-to-call-return`, tagged
tokens through one graph) and **dynamic** call expansion (a fresh copy of
the callee's matching state per call), both by the same Python token engine
(`recir.dataflow`), so their ratio compares the two execution models like
for like, as the thesis's TensorFlow runs did; and, for reference, the xDSL
reference interpreter and the native invoke path (`recir.compile`). Python
token passing costs ~100 us per call, so sizes stop below the thesis's
largest (fib(30) would take minutes); the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

from bench.common import attempt, fmt, machine_info, median, print_table, write_json

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "ir"
FILES = {"fib": "fib.mlir", "ack": "ackermann.mlir", "tak": "takeuchi.mlir",
         "thesis_primes": "thesis_primes.mlir"}
FULL = [("fib", (20,)), ("fib", (22,)), ("fib", (24,)),
        ("ack", (3, 3)), ("ack", (3, 4)), ("ack", (3, 5)),
        ("tak", (12, 8, 4)), ("tak", (18, 12, 6)),
        ("thesis_primes", (1000,)), ("thesis_primes", (2500,))]
QUICK = [("fib", (15,)), ("fib", (20,)), ("ack", (3, 3)), ("tak", (12, 8, 4)),
         ("thesis_primes", (100,)), ("thesis_primes", (1000,))]
# the static-recursion thesis's seconds (TensorFlow r1.4), static vs dynamic
THESIS = {"fib": ("fib(24)", 0.81, 0.99), "ack": ("ack(3,3)", 0.089, 0.118),
          "tak": ("tak(24,16,8)", 18.9, 16.1),
          "thesis_primes": ("primes(7500)", 13.50, 13.46)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    """Median seconds of `repeats` calls, and the last call's value. The cyclic
    garbage collector is off while timing: its passes over the millions of
    short-lived tokens otherwise land at random in one engine or the other."""
    times, value = [], None
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            value = fn()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return median(times), value


def measure(name: str, args: tuple[int, ...], repeats: int) -> dict[str, Any]:
    import recir
    from recir import dataflow as rd
    from recir.context import make_context
    from recir.examples.programs import CALLS
    from recir.interpreter import run_function
    from recir.parsing import parse_module

    text = (EXAMPLES / FILES[name]).read_text()
    module = parse_module(make_context(), text, FILES[name])
    expected = (CALLS[name][0](*args),)
    graph = rd.compile(module, name)
    row: dict[str, Any] = {"program": name, "args": list(args), "value": expected[0]}
    for engine in rd.ENGINES:
        seconds, (results, stats) = timed(lambda e=engine: rd.run(graph, name, args, e),
                                          repeats)
        assert results == expected, (engine, results, expected)
        row[engine] = {"seconds": seconds, "firings": stats.firings,
                       "tokens": stats.tokens, "activations": stats.activations,
                       "peak_tags": stats.peak_tags}
    row["static_over_dynamic"] = row["static"]["seconds"] / row["dynamic"]["seconds"]
    interp, _ = attempt("interpreter", lambda: timed(
        lambda: check(run_function(module, name, list(args)), expected), 1)[0])
    row["interpreter_seconds"] = interp
    native_fn, _ = attempt("native", lambda: recir.compile(module, name, threads=1))
    if native_fn is not None:
        native_fn(*args)
        row["native_seconds"] = timed(lambda: check(native_fn(*args), expected),
                                      max(repeats, 5))[0]
    return row


def check(results: Any, expected: tuple[int, ...]) -> Any:
    results_tuple = results if isinstance(results, tuple) else (results,)
    values = tuple(int(v) for v in results_tuple)
    assert values == expected, (values, expected)
    return results


def label(row: dict[str, Any]) -> str:
    return f"{row['program']}({','.join(map(str, row['args']))})"


def run(args: argparse.Namespace) -> int:
    cases, repeats = (QUICK, 1) if args.quick else (FULL, 3)
    report: dict[str, Any] = {"machine": machine_info(), "repeats": repeats, "rows": []}
    for name, call_args in cases:
        print(f"  {name}{call_args}", flush=True)
        report["rows"].append(measure(name, call_args, repeats))
    rows = report["rows"]
    print_table(
        "Static (Call/Return tags) vs dynamic (per-call instances), same Python token "
        f"engine, seconds (median of {repeats}); interpreter and native invoke path "
        "for reference",
        ["program", "calls", "static s", "dynamic s", "static/dynamic", "interp s",
         "native ms", "tokens st/dyn", "peak tags st/dyn"],
        [[label(r), str(r["static"]["activations"]), fmt(r["static"]["seconds"], 3),
          fmt(r["dynamic"]["seconds"], 3), fmt(r["static_over_dynamic"], 2),
          fmt(r.get("interpreter_seconds"), 3),
          fmt(1e3 * r["native_seconds"], 3) if "native_seconds" in r else "-",
          f"{r['static']['tokens']}/{r['dynamic']['tokens']}",
          f"{r['static']['peak_tags']}/{r['dynamic']['peak_tags']}"] for r in rows])
    thesis_rows = []
    for program, (call, st, dyn) in THESIS.items():
        ours = [r for r in rows if r["program"] == program]
        largest = ours[-1] if ours else None
        thesis_rows.append([program, call, f"{st} / {dyn}", fmt(st / dyn, 2),
                            label(largest) if largest else "-",
                            fmt(largest["static_over_dynamic"], 2) if largest else "-"])
    print_table("static/dynamic: the thesis (TensorFlow r1.4) beside ours "
                "(largest size run)",
                ["program", "thesis run", "thesis s st/dyn", "thesis ratio", "our run",
                 "our ratio"], thesis_rows)
    report["thesis"] = {k: {"call": c, "static": s, "dynamic": d}
                        for k, (c, s, d) in THESIS.items()}
    if args.json:
        write_json(args.json, report)
        print(f"\nwrote {args.json}")
    return 0
