"""bench/batch_layout.py: both layouts timed, and the module's names put back."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import batch_layout  # noqa: E402
from recir.backend import batch_fields, runtime  # noqa: E402


def test_a_run_times_both_layouts_and_restores_the_runtime(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["batch_layout", "--threads", "2", "--rounds", "1"])
    monkeypatch.setattr(batch_layout, "best_of", lambda fn: (fn(), 1e-6)[1])
    assert batch_layout.main() == 0
    first, second = capsys.readouterr().out.splitlines()[-2:]
    assert "fields by columns 1 us, call by call 1 us" in first
    assert "by columns" in second and "call by call" in second
    assert second.count("outside the team call") == 2
    assert runtime.batch_fields is batch_fields.batch_fields
    assert runtime.run_team.__module__ == "recir.backend.teams"
