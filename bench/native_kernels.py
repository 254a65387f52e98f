"""`run.py native`'s kernel rows: fib(30) against the same recursion compiled
by cc, and the TreeLSTM node's matvec against `numpy.dot`, one thread."""

from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.common import attempt, contest_times, median, ratio

BENCH_DIR = Path(__file__).resolve().parent
FIB_MLIR = BENCH_DIR.parent / "examples/ir/fib.mlir"


def first(out: Any) -> Any:
    """The first result of a call that may return a tuple or a bare value."""
    return out[0] if isinstance(out, (tuple, list)) else out


# --- fib(30) against C ------------------------------------------------------

def build_c_fib(tmp: str) -> Any:
    """Compile bench/fib.c with the system cc into `tmp`; the ctypes function."""
    fib = common.c_library(BENCH_DIR / "fib.c", tmp).fib
    fib.argtypes, fib.restype = [ctypes.c_int], ctypes.c_int
    return fib


def build_recir_fib() -> Any:
    import recir
    from recir.context import make_context
    from recir.parsing import parse_module

    module = parse_module(make_context(), FIB_MLIR.read_text(), str(FIB_MLIR))
    fn = recir.compile(module, entry="fib", threads=1)
    return lambda n: int(np.asarray(first(fn(n))))


def bench_fib(n: int, repeats: int) -> dict[str, Any]:
    """fib(n) in recir against the same recursion compiled by cc -O2."""
    result: dict[str, Any] = {"n": n}
    with tempfile.TemporaryDirectory(prefix="recir-bench-fib-") as tmp:
        fns: dict[str, Any] = {}
        builders = (("c", lambda: build_c_fib(tmp)), ("recir", build_recir_fib))
        for name, build in builders:
            print(f"  fib({n}): {name}", flush=True)
            fn, why = attempt(f"fib {name}", build)
            if fn is not None and "c" in fns and fn(n) != fns["c"](n):
                fn, why = None, f"wrong result {fn(n)}, C says {fns['c'](n)}"
                print(f"  [skip] fib {name}: {why}")
            result[name] = {"skipped": why}
            if fn is not None:
                fns[name] = fn
                result[name]["value"] = fn(n)
        times = contest_times({k: lambda f=f: f(n) for k, f in fns.items()},
                                  repeats)
    for name, ts in times.items():
        result[name].update(times_s=ts, median_ms=1e3 * median(ts))
    result["recir_over_c_time"] = ratio(result["recir"].get("median_ms"),
                                        result["c"].get("median_ms"))
    return result


# --- one matvec kernel ------------------------------------------------------

def build_recir_matvec_chain(w: np.ndarray, steps: int) -> Any:
    """`steps` (a power of two) dependent matvecs, x <- tanh(W x)[:cols], in
    one native call. step(k, x) = step(k-1, step(k-1, x)): the recursion is
    only log2(steps) deep, so the stack stays in cache as a loop's would."""
    import recir
    from recir import frontend as rf

    rows, cols = w.shape
    with recir.trace("matvec_chain") as m:
        x0 = m.input("x", recir.vector(cols))
        wp = m.param("w", w)
        with recir.SubGraph("step", [recir.i32, recir.vector(cols)],
                            [recir.vector(cols)]) as step:
            k, x = step.inputs
            step.output(recir.cond(
                k <= 0, lambda: rf.slice(rf.tanh(rf.matvec(wp, x)), 0, cols),
                lambda: step(k - 1, step(k - 1, x))))
        m.output(step(steps.bit_length() - 1, x0))
    return recir.compile(m.traced, threads=1)


def numpy_matvec_chain(w: np.ndarray, steps: int) -> Any:
    cols = w.shape[1]

    def chain(x: np.ndarray) -> np.ndarray:
        for _ in range(steps):
            x = np.tanh(np.dot(w, x))[:cols]
        return x

    return chain


def bench_matvec(sizes: list[int], calls: int, repeats: int) -> list[dict[str, Any]]:
    """GFLOP/s of the TreeLSTM node's (5h x 2h) @ 2h matvec: `calls` dependent
    products in one call for recir (the kernel, not the call overhead), a
    Python loop of `numpy.dot` for NumPy; both add a tanh of 5h elements."""
    rows = []
    for h in sizes:
        rng = np.random.default_rng(1)
        w = (rng.standard_normal((5 * h, 2 * h)) / np.sqrt(2 * h)).astype(np.float32)
        x = rng.standard_normal(2 * h).astype(np.float32)
        row: dict[str, Any] = {"h": h, "shape": [5 * h, 2 * h], "calls": calls}
        fns = {}
        for name, build in (("numpy", numpy_matvec_chain),
                            ("recir", build_recir_matvec_chain)):
            print(f"  matvec h={h}: {name}", flush=True)
            check, why = attempt(f"matvec {name} h={h}", lambda b=build: b(w, 4))
            if check is not None and not np.allclose(
                    np.asarray(first(check(x))), numpy_matvec_chain(w, 4)(x),
                    rtol=1e-4, atol=1e-5):
                check, why = None, "wrong result"
                print(f"  [skip] matvec {name} h={h}: {why}")
            row[name] = {"skipped": why}
            if check is not None:
                fns[name] = build(w, calls)

        times = contest_times({k: lambda f=f: f(x) for k, f in fns.items()}, repeats)
        for name, ts in times.items():
            row[name].update(times_s=ts, gflops=2.0 * w.size * calls / median(ts) / 1e9)
        row["recir_over_numpy"] = ratio(row["recir"].get("gflops"),
                                        row["numpy"].get("gflops"))
        rows.append(row)
    return rows
