"""RECIR_UNIVERSE: the single registry of recir's dialects and passes.

Factories are lazy so that `recir-opt --help` and `xdsl-opt` start fast: each
imports its module on first use.
"""

import importlib
from collections.abc import Callable
from typing import Any

from xdsl.ir import Dialect
from xdsl.passes import ModulePass
from xdsl.universe import Universe


def lazy(module: str, name: str) -> Callable[[], Any]:
    """A factory returning `name` from `recir.<module>`, imported when called."""
    return lambda: getattr(importlib.import_module(f"recir.{module}"), name)


RECIR_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "invoke": lazy("dialects.invoke", "Invoke"),
    "tmath": lazy("dialects.tmath", "TMath"),
    "frontier": lazy("dialects.frontier", "Frontier"),
    "tape": lazy("dialects.tape", "Tape"),
    "adjoint": lazy("dialects.adjoint", "Adjoint"),
    "dataflow": lazy("dialects.dataflow", "Dataflow"),
}

RECIR_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "capture-outer-refs": lazy("passes.capture_outer_refs", "CaptureOuterRefsPass"),
    "synthesize-gradients": lazy("autodiff.synthesize_gradients",
                                 "SynthesizeGradientsPass"),
    "tmath-fuse-elementwise": lazy("passes.tmath_fuse_elementwise",
                                   "TmathFuseElementwisePass"),
    "invoke-mark-concurrent": lazy("passes.invoke_mark_concurrent",
                                   "InvokeMarkConcurrentPass"),
    "invoke-clone-serial": lazy("passes.invoke_clone_serial", "InvokeCloneSerialPass"),
    "convert-tmath-to-loops": lazy("passes.convert_tmath_to_loops",
                                   "ConvertTmathToLoopsPass"),
    "convert-invoke-to-gomp": lazy("passes.convert_invoke_to_gomp",
                                   "ConvertInvokeToGompPass"),
    "convert-recir-to-llvm": lazy("passes.convert_recir_to_llvm", "ConvertRecirToLlvmPass"),
    "lower-invoke-to-call-return": lazy("passes.lower_invoke_to_call_return",
                                        "LowerInvokeToCallReturnPass"),
    "invoke-to-frontier": lazy("passes.invoke_to_frontier", "InvokeToFrontierPass"),
}

# xDSL's passes that recir's pipeline and recir-opt run in recir's version
# (same lowerings, faster). Not in the universe: xDSL's multiverse refuses a
# name defined twice.
RECIR_REPLACEMENTS: dict[str, Callable[[], type[ModulePass]]] = {
    "convert-scf-to-cf": lazy("passes.convert_scf_to_cf", "ConvertScfToCfPass"),
}

RECIR_UNIVERSE = Universe(all_dialects=RECIR_DIALECTS, all_passes=RECIR_PASSES)
