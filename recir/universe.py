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


def _capture_outer_refs() -> type[ModulePass]:
    from recir.passes.capture_outer_refs import CaptureOuterRefsPass

    return CaptureOuterRefsPass


RECIR_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "invoke": _invoke,
    "tmath": _tmath,
}

RECIR_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "capture-outer-refs": _capture_outer_refs,
}

RECIR_UNIVERSE = Universe(all_dialects=RECIR_DIALECTS, all_passes=RECIR_PASSES)
