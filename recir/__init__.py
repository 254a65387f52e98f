"""recir: a compiler for recursive dataflow graphs.

Trace a recursive model once (`recir.trace`, `recir.SubGraph`, `recir.cond`),
get IR in the `invoke` and `tmath` dialects, and run it with the reference
interpreter.
"""

from xdsl.dialects.builtin import f32, i1, i32

from recir.frontend import SubGraph, TracedModel, cond, matrix, structure, trace, vector

__all__ = ["SubGraph", "TracedModel", "cond", "f32", "i1", "i32", "matrix",
           "structure", "trace", "vector"]
