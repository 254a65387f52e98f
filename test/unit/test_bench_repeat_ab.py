"""bench/repeat_ab.py: the schedule's way drops the repeat before every
call, the repeated way keeps it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import repeat_ab  # noqa: E402


class Function:
    """A frontier function's `again` and `batch`, noting `again` at each call."""

    def __init__(self):
        self.again, self.seen = "kept", []

    def batch(self, items):
        self.seen.append((self.again, items))
        self.again = "kept"  # what a call leaves for the next


def test_each_way_calls_every_batch_in_turn_with_or_without_the_repeat():
    fn = Function()
    assert repeat_ab.timed(fn, ["a", "b"], False, 3) > 0
    assert fn.seen == [(None, "a"), (None, "b"), (None, "a")]
    fn.seen.clear()
    repeat_ab.timed(fn, ["a", "b"], True, 2)
    assert fn.seen == [("kept", "a"), ("kept", "b")]
