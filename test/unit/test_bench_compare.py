"""bench/compare.py: rows paired by name, medians per side, ratios oriented so
that above 1 is faster after, whatever the unit."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import compare  # noqa: E402


def run(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_times_and_rates_are_oriented_and_medians_taken(tmp_path):
    def result(ms: float, rate: float) -> dict:
        return {"machine": {"nproc": 2}, "rows": [
            {"model": "tree_rnn", "task": "infer", "ms_1": ms, "work": 127},
            {"model": "tree_rnn", "task": "train", "trees_per_s": {"recir": rate}}]}

    before = [run(tmp_path, f"b{i}", result(ms, 100.0)) for i, ms in enumerate((10, 12, 50))]
    after = [run(tmp_path, f"a{i}", result(ms, 200.0)) for i, ms in enumerate((5, 6, 7))]
    rows = {path: (a, b, ratio) for path, a, b, ratio in
            compare.compare(compare.medians(before), compare.medians(after))}
    assert rows == {"rows[model=tree_rnn,task=infer].ms_1": (12.0, 6.0, 2.0),
                    "rows[model=tree_rnn,task=train].trees_per_s.recir": (100.0, 200.0, 2.0)}


def test_items_the_fields_do_not_tell_apart_are_paired_by_position():
    data = {"trees": [{"model": "fib", "ms": 1.0}, {"model": "fib", "ms": 2.0}]}
    assert list(compare.leaves(data)) == [("trees[model=fib].ms", 1.0),
                                         ("trees[model=fib#1].ms", 2.0)]


@pytest.mark.parametrize(("path", "expected"), [
    ("fib35.ms_2", -1), ("compile.seconds", -1), ("rows[x].trees_per_s.torch", 1),
    ("fib35.speedup", 1), ("roof.gflops", 1), ("trees[a].work", 0), ("rows[b].batch", 0),
    ("tree_lstm[x].ms_per_step", -1), ("tree_lstm[x].nodes_per_s", 1), ("compile.cold_ms", -1),
    ("rows[c].speedup_2", 1)])
def test_orientation(path, expected):
    assert compare.orientation(path) == expected


def test_the_summary_counts_slower_rows(tmp_path, capsys):
    before = run(tmp_path, "b", {"a_ms": 10.0, "b_ms": 10.0, "c_ms": 10.0})
    after = run(tmp_path, "a", {"a_ms": 12.0, "b_ms": 10.2, "c_ms": 5.0})
    compare.main(["--before", str(before), "--after", str(after)])
    assert capsys.readouterr().out.splitlines()[-1] == (
        "3 rows: 1 more than 5% slower, 1 more than 5% faster, median speed 0.98")


def test_one_runs_raw_repeats_are_left_to_its_median():
    data = {"fib": {"times_s": [1.0, 2.0, 3.0], "median_s": 2.0}}
    assert list(compare.leaves(data)) == [("fib.median_s", 2.0)]
