"""Integer pass options checked where a pass is made (`recir-opt -p
"pass{option=value}"` or `recir.pipeline`): a value out of range was taken
for another meaning (`max_depth=-1` as no limit, `row_threads=0` as one
thread) or overflowed the constant it becomes (`budget=2**40` as an i32)
where it should have been refused."""

from __future__ import annotations

I32_MAX, U64_MAX = 2**31 - 1, 2**64 - 1


def at_least(options: object, **bounds: int | tuple[int, int]) -> None:
    """Each named option at least its bound (a `(low, high)` pair: within
    it), else a `ValueError` naming it (`recir-opt` adds the pass's name)."""
    for name, bound in bounds.items():
        low, high = bound if isinstance(bound, tuple) else (bound, None)
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"option {name}={value!r} must be an integer of at least "
                             f"{low}")
        if high is not None and value > high:
            raise ValueError(f"option {name}={value!r} must be at most {high}")
