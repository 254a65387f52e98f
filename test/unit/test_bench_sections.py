"""bench/run.py sections: recir on the one thread they report, and the
distributed section's batch statistics on a short epoch."""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import distributed, fusion, train  # noqa: E402


def test_train_runs_recir_gradients_on_one_thread(monkeypatch):
    from recir.models import tree_rnn

    monkeypatch.setenv("RECIR_NUM_THREADS", "2")  # what `threads=None` would take
    params = tree_rnn.init_params(np.random.default_rng(0), hidden=4, vocab=20)
    assert train.RecirTrainer("tree_rnn", params).vg.native.threads == 1


def test_fusion_runs_both_tasks_on_one_thread(monkeypatch):
    monkeypatch.setenv("RECIR_NUM_THREADS", "2")
    fns = fusion.contestants(4, 20)
    assert {(name, task): (f.native if task == "train" else f).threads
            for name, tasks in fns.items() for task, f in tasks.items()} == {
        ("fused", "infer"): 1, ("fused", "train"): 1,
        ("unfused", "infer"): 1, ("unfused", "train"): 1}


def test_distributed_batch_stats_of_a_short_epoch(monkeypatch):
    # --max-train 20: one batch, no group of 2, 4 or 8 batches to take a union of
    monkeypatch.setattr(distributed, "sst_folder", lambda: None)
    monkeypatch.setattr(distributed, "optimizer_seconds", lambda vocab, rows: float(rows))
    short = distributed.batch_stats(20)
    assert sorted(short) == [1, 2, 4, 8]
    assert short == distributed.batch_stats(8 * distributed.BATCH)
    assert all(s["optimizer_s"] == int(s["union_rows"]) > 0 for s in short.values())
