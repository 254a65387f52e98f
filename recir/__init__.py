"""recir: a compiler for recursive dataflow graphs.

Trace a recursive model once, get IR in the `invoke` and `tmath` dialects,
and run it with the reference interpreter or native code.
"""
