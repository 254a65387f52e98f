"""bench/blocks_ab.py: a team's heights whole against in L2 blocks, the same results."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import blocks_ab  # noqa: E402
from recir.backend import native_schedule  # noqa: E402


def test_whole_heights_give_the_blocks_results_and_the_blocks_come_back(monkeypatch):
    asked = []
    blocks = native_schedule.block_rows

    def spy(threads, per_row):  # a block of 8 rows: complete-32's heights are cut
        asked.append(threads)
        return 8 * threads if threads > 1 else blocks(threads, per_row)

    monkeypatch.setattr(native_schedule, "block_rows", spy)
    found = {}

    def outputs(forms, batch, calls, waited, spent):
        found.update({form: [np.asarray(o) for o in run(batch)] for form, run in forms.items()})
        return {"medians": {}, "kept": {}, "dropped": 0}

    monkeypatch.setattr(blocks_ab, "timed", outputs)
    blocks_ab.measure("infer", 8, "complete-32", 3, threads=2, calls=1)
    assert native_schedule.block_rows is spy  # put back
    assert asked.count(2) == 1  # the blocks form asked for a team's block; whole: none
    assert set(found) == set(blocks_ab.FORMS)
    for form in ("blocks", "whole"):
        assert len(found[form]) == 3
        for got, want in zip(found[form], found["1 thread"], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
