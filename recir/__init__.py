"""recir: a compiler for recursive dataflow graphs.

Trace a recursive model once (`recir.trace`, `recir.SubGraph`, `recir.cond`),
get IR in the `invoke` and `tmath` dialects, and run it with the reference
interpreter or compile it to native code (`recir.compile`).
"""

from typing import Any

from xdsl.dialects.builtin import f32, i1, i32

from recir.frontend import SubGraph, TracedModel, cond, matrix, structure, trace, vector

__all__ = ["SubGraph", "TracedModel", "compile", "cond", "f32", "i1", "i32", "matrix",
           "structure", "trace", "vector"]


def compile(model: Any, entry: str | None = None, **options: Any) -> Any:
    """Native code for a traced model (see `recir.pipeline.compile`)."""
    from recir import pipeline

    return pipeline.compile(model, entry, **options)
