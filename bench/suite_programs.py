"""`run.py all`'s program sections: the top-down TreeLSTM against an
iterative work queue, and the static-recursion thesis programs (recir's
native invoke path; `bench/static.py`'s static Call/Return path)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Skipped, attempt, contest_times, median

BENCH_DIR = Path(__file__).resolve().parent
TD_HIDDEN, TD_MAX_DEPTH = 64, 8
THESIS_CALLS = (("fib", (24,)), ("fib", (30,)), ("ack", (3, 3)), ("ack", (3, 6)),
                ("tak", (24, 16, 8)), ("thesis_primes", (7500,)))
# The thesis's TensorFlow r1.4 timings in seconds, static vs dynamic
# (its Appendix C); ack(3,6) and primes(7500) as printed there.
THESIS_SECONDS = {"fib(24)": (0.81, 0.99), "fib(30)": (13.97, 17.80),
                  "ack(3, 3)": (0.089, 0.118), "ack(3, 6)": (6.17, 8.32),
                  "tak(24, 16, 8)": (18.9, 16.1), "thesis_primes(7500)": (13.50, 13.46)}


# --- top-down TreeLSTM -------------------------------------------------------------

def td_params() -> dict[str, np.ndarray]:
    """init_params with matrices at std 1/sqrt(fan_in): at h=64 and depth 8
    the trees grow to ~220 nodes on average (up to 511)."""
    from recir.models import td_tree_lstm

    p = td_tree_lstm.init_params(np.random.default_rng(0), hidden=TD_HIDDEN,
                                 inputs=TD_HIDDEN)
    return {k: (v / np.sqrt(v.shape[-1]) if v.ndim == 2 else v).astype(np.float32)
            for k, v in p.items()}


def td_tree_lstm(inputs: int, repeats: int) -> dict[str, Any]:
    """Top-down TreeLSTM instances a second, `inputs` random vectors grown
    to depth 8, recir against an iterative work queue, b = 1 and 64."""
    import recir
    from bench import iterative_models
    from recir.models import td_tree_lstm as td

    params = td_params()
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(TD_HIDDEN).astype(np.float32)
          for _ in range(inputs)]
    expected = [td.reference(x, TD_MAX_DEPTH, params) for x in xs]

    def native(threads: int) -> Any:
        fn = recir.compile(td.trace_model(params), threads=threads)
        return lambda step: [fn(x, TD_MAX_DEPTH) for x in step]

    def batched() -> Any:
        fn = recir.compile(td.trace_model(params), batching="frontier", threads=1)
        return lambda step: fn.batch([(x, TD_MAX_DEPTH) for x in step])

    # name -> thunk building `f(inputs) -> [(nodes, sum of h) per input]`
    builders = {
        "recir recursive": lambda: native(1),
        "recir recursive, 2 threads": lambda: native(2),
        "recir batched": batched,
        "iterative (numpy)": lambda: lambda step: [
            iterative_models.td_tree_lstm(x, TD_MAX_DEPTH, params) for x in step],
    }
    fns, status = {}, {}
    for who, build in builders.items():
        fn, why = attempt(f"td_tree_lstm {who}", build)
        if fn is not None:
            _, why = attempt(f"td_tree_lstm {who} check",
                             lambda fn=fn: td_check(fn(xs), expected))
        status[who] = why
        if why is None:
            fns[who] = fn
    rows = []
    for batch in (1, 64):
        steps = [xs[k:k + batch] for k in range(0, len(xs) // batch * batch, batch)]
        timed = contest_times({w: lambda f=f: [f(s) for s in steps]
                               for w, f in fns.items()}, repeats)
        for who, why in status.items():
            ts = timed.get(who)
            rows.append({"batch": batch, "contestant": who, "skipped": why,
                         **({} if ts is None else {
                             "times_s": ts, "median_s": median(ts),
                             "instances_per_s": len(xs) / median(ts)})})
    return {"config": {"hidden": TD_HIDDEN, "max_depth": TD_MAX_DEPTH,
                       "inputs": len(xs),
                       "mean_nodes": float(np.mean([e[0] for e in expected])),
                       "repeats": repeats},
            "rows": rows}


def td_check(got: list[Any], expected: list[tuple[int, float]]) -> None:
    for k, ((got_count, got_total), (count, total)) in enumerate(
            zip(got, expected, strict=True)):
        if int(np.asarray(got_count)) != count or not np.isclose(
                float(np.asarray(got_total)), total, rtol=1e-3, atol=1e-3):
            raise Skipped(f"input {k}: {got_count} nodes, sum {got_total}; "
                          f"reference {count}, {total}")


# --- thesis programs -----------------------------------------------------------------

def thesis(repeats: int, quick: bool) -> dict[str, Any]:
    """recir's native invoke path at the thesis's sizes, and the static
    Call/Return path on its own."""
    import recir
    from recir.context import make_context
    from recir.examples.programs import CALLS
    from recir.parsing import parse_module

    rows = []
    for name, call_args in THESIS_CALLS:
        reference, filename = CALLS[name]
        path = BENCH_DIR.parent / "examples/ir" / filename
        label = f"{name}({', '.join(map(str, call_args))})"
        print(f"  {label}", flush=True)
        row: dict[str, Any] = {"call": label, "expected": reference(*call_args)}
        row["thesis_static_s"], row["thesis_dynamic_s"] = THESIS_SECONDS[label]

        def build(path: Path = path, name: str = name) -> Any:
            module = parse_module(make_context(), path.read_text(), str(path))
            return recir.compile(module, entry=name, threads=1)

        fn, row["dynamic_skipped"] = attempt(f"{label} recir", build)
        if fn is not None and int(fn(*call_args)[0]) != row["expected"]:
            fn, row["dynamic_skipped"] = None, "wrong result"
        if fn is not None:
            ts = contest_times({"dynamic": lambda f=fn, a=call_args: f(*a)},
                               repeats)["dynamic"]
            row.update(dynamic_times_s=ts, dynamic_ms=1e3 * median(ts))
        rows.append(row)
    static, why = attempt("static Call/Return path", lambda: static_rows(quick))
    return {"config": {"repeats": repeats, "threads": 1,
                       "dynamic": "recir.compile on examples/ir (invoke, native)"},
            "rows": rows, "static": static, "static_skipped": why}


def static_rows(quick: bool) -> Any:
    """The static Call/Return path (issue 8): `bench/static.py`'s measurement
    (static and dynamic on one Python token engine, plus the interpreter and
    the native path) on its own sizes, which stop below the thesis's."""
    try:
        static = importlib.import_module("bench.static")
    except ModuleNotFoundError as e:
        raise Skipped("static Call/Return path not available "
                      f"({e.name} missing)") from e
    cases, repeats = (static.QUICK, 1) if quick else (static.FULL, 3)
    return [static.measure(name, call_args, repeats) for name, call_args in cases]
