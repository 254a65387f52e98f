"""recir: a compiler for recursive dataflow graphs.

Trace a recursive model once (`recir.trace`, `recir.SubGraph`, `recir.cond`),
get IR in the `invoke` and `tmath` dialects, and run it with the reference
interpreter or compile it to native code (`recir.compile`); differentiate its
loss with `recir.value_and_grad`.
"""

from typing import Any

from xdsl.dialects.builtin import ModuleOp, f32, i1, i32

from recir.frontend import SubGraph, TracedModel, cond, matrix, structure, trace, vector

__all__ = ["SubGraph", "TracedModel", "compile", "cond", "configure_runtime", "f32", "grad",
           "i1", "i32", "matrix", "structure", "trace", "tune", "value_and_grad", "vector"]


def compile(model: Any, entry: str | None = None, *, batching: str = "recursive",
            **options: Any) -> Any:
    """Native code for a traced model (see `recir.pipeline.compile`);
    `batching="frontier"` compiles `invoke-to-frontier`'s batched form
    instead, `"auto"` both, picking per call (see `recir.auto`)."""
    from recir import pipeline
    from recir.diagnostics import RecirError

    if not isinstance(model, ModuleOp) and not all(  # (a TracedModel, or one alike)
            hasattr(model, k) for k in ("module", "entry", "params")):
        raise RecirError("error: recir.compile takes a traced model (recir.trace(...).traced) "
                         f"or an IR module, got a {type(model).__name__}")
    traced_entry = getattr(model, "entry", None)  # (a module has none: `entry` names it)
    if entry is not None and traced_entry is not None and entry != traced_entry:
        raise RecirError(f"error: a traced model compiles its own entry @{traced_entry}; "
                         f"entry={entry!r} names another function")
    if batching != "recursive":
        from recir.auto import compile_batched

        return compile_batched(model, batching, **options)
    return pipeline.compile(model, entry, **options)


def value_and_grad(model: Any, loss: int = -1, *, batching: str = "recursive",
                   **options: Any) -> Any:
    """Outputs and d loss / d parameters (see `recir.gradients`);
    `batching="frontier"` through the batched form
    (`recir.frontier_gradients`), `"auto"` by either, per batch."""
    from recir import gradients as api

    if batching != "recursive":
        from recir.auto import value_and_grad_batched

        return value_and_grad_batched(model, loss, batching, **options)
    return api.value_and_grad(model, loss, **options)


def grad(model: Any, loss: int = -1, **options: Any) -> Any:
    """d loss / d parameters (see `recir.gradients`)."""
    from recir import gradients as api

    return api.grad(model, loss, **options)


def configure_runtime(**settings: int) -> Any:
    """Process-wide settings of the native runtime, given to the OpenMP library
    when recir loads it (before the first threaded compile): `worker_stack_bytes`
    (default 1 GiB), `block_time_ms` (default 1). See `recir.backend.settings`."""
    from recir.backend import settings as runtime

    return runtime.configure(**settings)


def tune(cache_dir: Any = None) -> Any:
    """Measures this machine's costs once, ahead of any call (a team start,
    a task, the frontier's fixed costs, L3's slowdown), and keeps them in the
    cache directory, where functions compiled later read them (see
    `recir.backend.policy`, `recir.auto_costs`); returns them."""
    from recir import tuning

    return tuning.tune(cache_dir)
