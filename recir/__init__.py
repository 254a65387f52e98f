"""recir: a compiler for recursive dataflow graphs.

Trace a recursive model once (`recir.trace`, `recir.SubGraph`, `recir.cond`),
get IR in the `invoke` and `tmath` dialects, and run it with the reference
interpreter or compile it to native code (`recir.compile`); differentiate its
loss with `recir.value_and_grad`.
"""

from typing import Any

from xdsl.dialects.builtin import f32, i1, i32

from recir.frontend import SubGraph, TracedModel, cond, matrix, structure, trace, vector

__all__ = ["SubGraph", "TracedModel", "compile", "cond", "f32", "grad", "i1", "i32",
           "matrix", "structure", "trace", "tune", "value_and_grad", "vector"]


def compile(model: Any, entry: str | None = None, *, batching: str = "recursive",
            **options: Any) -> Any:
    """Native code for a traced model (see `recir.pipeline.compile`);
    `batching="frontier"` runs it by the frontier scheduler instead, `"auto"`
    picks per call (see `recir.batching.api`)."""
    from recir import pipeline

    if batching != "recursive":
        from recir.batching.api import compile_batched

        return compile_batched(model, batching, **options)
    return pipeline.compile(model, entry, **options)


def value_and_grad(model: Any, loss: int = -1, *, batching: str = "recursive",
                   **options: Any) -> Any:
    """Outputs and d loss / d parameters (see `recir.autodiff.api`);
    `batching="frontier"` by the frontier scheduler (`recir.batching.api`),
    `"auto"` by either, per batch."""
    from recir.autodiff import api

    if batching != "recursive":
        from recir.batching.api import value_and_grad_batched

        return value_and_grad_batched(model, loss, batching, **options)
    return api.value_and_grad(model, loss, **options)


def grad(model: Any, loss: int = -1, **options: Any) -> Any:
    """d loss / d parameters (see `recir.autodiff.api`)."""
    from recir.autodiff import api

    return api.grad(model, loss, **options)


def tune(cache_dir: Any = None) -> Any:
    """Measures this machine's cost of a team start and of a task once, ahead
    of any call, and keeps them in the cache directory, where functions
    compiled later read them (see `recir.backend.policy`); returns them."""
    from recir.backend import policy

    return policy.tune(cache_dir)
