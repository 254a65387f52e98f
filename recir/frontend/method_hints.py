"""What to write instead of a NumPy method or attribute on a traced value.

A model written first in NumPy carries `h.T`, `h.sum()` or `h.mean()` into
its traced version; Python's bare AttributeError named neither the recir op
that does the same nor, at times, the user's line.
"""

from __future__ import annotations

# NumPy's method -> the recir op of the same name (`rf.<name>(x)`)
SAME_NAME = ("sum", "max", "argmax", "exp", "log", "tanh")

HINTS = {
    "mean": "use rf.sum(x) / n, with n the vector's length",
    "dot": "use a @ b (or rf.matvec, rf.matmul); a dot product of two vectors is "
           "rf.sum(a * b)",
    "reshape": "recir tensors keep their shape: rf.slice and rf.concat cut and join "
               "vectors",
    "astype": "recir converts no type into another",
    "item": "a traced value has no Python value while tracing: use it in recir ops",
    "tolist": "a traced value has no Python value while tracing: use it in recir ops",
    "size": "use rf.size(x)",
    "ndim": "use len(x.shape)",
}
for alias in ("flatten", "ravel", "squeeze"):
    HINTS[alias] = HINTS["reshape"]
for name in SAME_NAME:
    HINTS[name] = f"use rf.{name}(x)"

TRANSPOSE = {
    0: "a scalar has no transpose",
    1: "a vector has no orientation in recir: `w @ h` multiplies by it as a column, "
       "and a dot product is rf.sum(a * b)",
    2: "recir has no transpose: declare the parameter transposed (m.param(name, w.T)) "
       "and multiply with @",
}


def attribute_hint(name: str, rank: int) -> str:
    """What to use instead of `x.<name>` on a traced value of `rank` dimensions."""
    if name in ("T", "transpose"):
        return TRANSPOSE.get(rank, TRANSPOSE[2])
    if name in HINTS:
        return HINTS[name]
    return ("use recir's ops (recir.frontend: sum, max, argmax, exp, log, tanh, "
            "sigmoid, relu, softmax, concat, slice, matvec, matmul)")


def logical_hint(symbol: str) -> str:
    """What to use instead of `&`/`|` on f32 values (they combine comparisons)."""
    mask = "a * b" if symbol == "&" else "a + b - a * b"
    return (f"compare first, as in (a > 0) {symbol} (b > 0); on 0/1 masks of f32 "
            f"write {mask}")
