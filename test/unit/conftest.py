"""Hypothesis settings for the property-style fuzz tests (test_fuzz_*.py):
a few dozen examples each in `make test`, $RECIR_FUZZ_EXAMPLES each in
`make fuzz`. No deadline: a first example may compile native code."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "recir",
    max_examples=int(os.environ.get("RECIR_FUZZ_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize="RECIR_FUZZ_EXAMPLES" not in os.environ,  # `make test` is repeatable
)
settings.load_profile("recir")
