"""Integer pass options checked where a pass is made (`recir-opt -p
"pass{option=value}"` or `recir.pipeline`): a value out of range was taken
for another meaning (`max_depth=-1` as no limit, `row_threads=0` as one
thread) where it should have been refused."""

from __future__ import annotations


def at_least(options: object, **bounds: int) -> None:
    """Each named option at least its bound, else a `ValueError` naming it
    (`recir-opt` adds the pass's name)."""
    for name, bound in bounds.items():
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < bound:
            raise ValueError(f"option {name}={value!r} must be an integer of at least "
                             f"{bound}")
