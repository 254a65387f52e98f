"""RECIR_UNIVERSE: the single registry of recir's dialects and passes.

Factories are lazy so that `recir-opt --help` and `xdsl-opt` start fast.
"""

from collections.abc import Callable

from xdsl.ir import Dialect
from xdsl.passes import ModulePass
from xdsl.universe import Universe


def _invoke() -> Dialect:
    from recir.dialects.invoke import Invoke

    return Invoke


def _tmath() -> Dialect:
    from recir.dialects.tmath import TMath

    return TMath


def _frontier() -> Dialect:
    from recir.dialects.frontier import Frontier

    return Frontier


def _adjoint() -> Dialect:
    from recir.dialects.adjoint import Adjoint

    return Adjoint


def _tape() -> Dialect:
    from recir.dialects.tape import Tape

    return Tape


def _dataflow() -> Dialect:
    from recir.dialects.dataflow import Dataflow

    return Dataflow


def _synthesize_gradients() -> type[ModulePass]:
    from recir.autodiff.synthesize_gradients import SynthesizeGradientsPass

    return SynthesizeGradientsPass


def _capture_outer_refs() -> type[ModulePass]:
    from recir.passes.capture_outer_refs import CaptureOuterRefsPass

    return CaptureOuterRefsPass


def _tmath_fuse_elementwise() -> type[ModulePass]:
    from recir.passes.tmath_fuse_elementwise import TmathFuseElementwisePass

    return TmathFuseElementwisePass


def _invoke_mark_concurrent() -> type[ModulePass]:
    from recir.passes.invoke_mark_concurrent import InvokeMarkConcurrentPass

    return InvokeMarkConcurrentPass


def _invoke_clone_serial() -> type[ModulePass]:
    from recir.passes.invoke_clone_serial import InvokeCloneSerialPass

    return InvokeCloneSerialPass


def _convert_tmath_to_loops() -> type[ModulePass]:
    from recir.passes.convert_tmath_to_loops import ConvertTmathToLoopsPass

    return ConvertTmathToLoopsPass


def _convert_scf_to_cf() -> type[ModulePass]:
    from recir.passes.convert_scf_to_cf import ConvertScfToCfPass

    return ConvertScfToCfPass


def _lower_invoke_to_call_return() -> type[ModulePass]:
    from recir.passes.lower_invoke_to_call_return import LowerInvokeToCallReturnPass

    return LowerInvokeToCallReturnPass


def _invoke_to_frontier() -> type[ModulePass]:
    from recir.passes.invoke_to_frontier import InvokeToFrontierPass

    return InvokeToFrontierPass


def _convert_invoke_to_gomp() -> type[ModulePass]:
    from recir.passes.convert_invoke_to_gomp import ConvertInvokeToGompPass

    return ConvertInvokeToGompPass


def _convert_recir_to_llvm() -> type[ModulePass]:
    from recir.passes.convert_recir_to_llvm import ConvertRecirToLlvmPass

    return ConvertRecirToLlvmPass


RECIR_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "invoke": _invoke,
    "tmath": _tmath,
    "frontier": _frontier,
    "tape": _tape,
    "adjoint": _adjoint,
    "dataflow": _dataflow,
}

RECIR_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "capture-outer-refs": _capture_outer_refs,
    "synthesize-gradients": _synthesize_gradients,
    "tmath-fuse-elementwise": _tmath_fuse_elementwise,
    "invoke-mark-concurrent": _invoke_mark_concurrent,
    "invoke-clone-serial": _invoke_clone_serial,
    "convert-tmath-to-loops": _convert_tmath_to_loops,
    "convert-invoke-to-gomp": _convert_invoke_to_gomp,
    "convert-recir-to-llvm": _convert_recir_to_llvm,
    "lower-invoke-to-call-return": _lower_invoke_to_call_return,
    "invoke-to-frontier": _invoke_to_frontier,
}

# xDSL's passes that recir's pipeline and recir-opt run in recir's version
# (same lowerings, faster). Not in the universe: xDSL's multiverse refuses a
# name defined twice.
RECIR_REPLACEMENTS: dict[str, Callable[[], type[ModulePass]]] = {
    "convert-scf-to-cf": _convert_scf_to_cf,
}

RECIR_UNIVERSE = Universe(all_dialects=RECIR_DIALECTS, all_passes=RECIR_PASSES)
