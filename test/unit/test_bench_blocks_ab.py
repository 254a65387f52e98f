"""bench/blocks_ab.py: a team's heights in pieces, evenly split blocks and
whole give the same results, each form as it says."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import blocks_ab  # noqa: E402
from test_frontier_threads import free_teams  # noqa: E402
from recir.backend import native_schedule  # noqa: E402
from recir.backend.native_loops import HeightLoop  # noqa: E402


def test_the_forms_give_the_one_threads_results_each_as_it_says(monkeypatch, tmp_path):
    monkeypatch.setenv("RECIR_CACHE_DIR", free_teams(tmp_path))  # a team pays from one row
    policy = native_schedule.NativeSchedule.policy
    small = lambda threads, per_row: 8 * threads  # noqa: E731  (complete-32's heights cut)
    monkeypatch.setattr(native_schedule, "block_rows", small)
    monkeypatch.setattr(native_schedule, "BY_GROUPS", False)  # every height by rows
    seen, call = [], HeightLoop.__call__

    def noted(self, bounds, *args):
        seen.append((len(bounds) - 1, args[9] is not None, args[3]))  # heights, pieces, team
        return call(self, bounds, *args)

    monkeypatch.setattr(HeightLoop, "__call__", noted)
    found, layout = {}, {}

    def outputs(forms, turns, calls, waited, spent):
        for form, run in forms.items():
            seen.clear()
            found[form] = [np.asarray(o) for o in run(turns[-1])]
            layout[form] = seen[-1]
        return {"medians": {}, "kept": {}, "dropped": 0}

    monkeypatch.setattr(blocks_ab, "timed", outputs)
    blocks_ab.measure("infer", 8, "complete-32", 3, threads=2, calls=1)
    assert native_schedule.block_rows is small  # put back
    assert native_schedule.NativeSchedule.policy is policy
    assert set(found) == set(blocks_ab.FORMS)
    for form in found:
        for got, want in zip(found[form], found["1 thread"], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    heights = {form: h for form, (h, _, _) in layout.items()}
    assert heights["pieces"] == heights["even"] > heights["whole"]  # cut, cut, whole
    assert layout["pieces"][1:] == (True, 2) and layout["even"][1:] == (False, 2)


def test_a_real_timing_calls_every_form_on_the_batch():
    # `native_scaling.timed` takes a list of batches; one chunk a form here
    found = blocks_ab.measure("infer", 4, "complete-8", 2, threads=2, calls=1)
    assert set(found["medians"]) == set(blocks_ab.FORMS)
    assert sum(found["kept"].values()) + found["dropped"] == len(blocks_ab.FORMS)
