"""Data-parallel training over MPI: N ranks end where one process does (same
global batches), checkpoints move between rank counts, and a rank that dies,
raises or stops takes the job down instead of hanging it."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recir.train import load_checkpoint
from recir.train.distributed import split_by_nodes

pytest.importorskip("mpi4py")
sys.path.insert(0, str(Path(__file__).parent))
import distributed_worker as worker

WORKER = Path(__file__).with_name("distributed_worker.py")
MPIEXEC = Path(sys.executable).with_name("mpiexec")
# float32 sums in another order: a few ulps per step, over ten Adagrad steps.
TOLERANCE = {"rtol": 1e-4, "atol": 2e-5}


def mpiexec(ranks: int, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec beside this Python (pip install 'recir[distributed]')")
    command = [str(MPIEXEC), "-n", str(ranks), sys.executable, str(WORKER), str(out),
               "--distributed", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@functools.cache
def one_process(vocab: int, epochs: int) -> dict[str, np.ndarray]:
    return worker.run(vocab, epochs, distributed=False)


def assert_close(got: Path, want: dict[str, np.ndarray]) -> None:
    with np.load(got) as data:
        for name, value in want.items():
            np.testing.assert_allclose(data[name], value, **TOLERANCE, err_msg=name)


def test_split_balances_nodes_not_trees():
    sizes = [39, 1, 1, 1, 1, 1, 37, 3]
    shares = split_by_nodes(sizes, 2)
    assert sorted(i for share in shares for i in share) == list(range(len(sizes)))
    loads = [sum(sizes[i] for i in share) for share in shares]
    assert loads == [42, 42]  # 39+1+1+1 and 37+3+1+1: 4 trees each, by luck only
    assert split_by_nodes([5, 5, 5], 2) == [[0, 2], [1]]
    assert split_by_nodes([3], 3) == [[0], [], []]


@pytest.mark.parametrize(("ranks", "vocab", "threads"),
                         [(1, 200, 1), (2, 200, 2), (3, 200, 1), (2, 20, 1)])
def test_ranks_match_one_process(tmp_path: Path, ranks: int, vocab: int, threads: int):
    """Vocabulary 20: the touched embedding rows outnumber the table's, so
    it is reduced densely; 200: row by row."""
    want = one_process(vocab, 1)
    out = tmp_path / "params.npz"
    result = mpiexec(ranks, out, "--vocab", str(vocab), "--threads", str(threads))
    assert result.returncode == 0, result.stderr
    assert_close(out, want)


def test_checkpoint_from_two_ranks_resumes_under_three(tmp_path: Path):
    want = one_process(200, 2)
    checkpoint, out = tmp_path / "ck.npz", tmp_path / "params.npz"
    first = mpiexec(2, out, "--epochs", "1", "--checkpoint", str(checkpoint))
    assert first.returncode == 0, first.stderr
    second = mpiexec(3, out, "--epochs", "2", "--checkpoint", str(checkpoint),
                     "--resume")
    assert second.returncode == 0, second.stderr
    assert_close(out, want)


def test_killed_rank_ends_the_job_and_keeps_the_checkpoint(tmp_path: Path):
    """Rank 1 dies at the second step of epoch 2 (5 steps an epoch): mpiexec
    ends the job; the checkpoint rank 0 wrote after epoch 1 is intact."""
    checkpoint, out = tmp_path / "ck.npz", tmp_path / "params.npz"
    result = mpiexec(2, out, "--epochs", "2", "--checkpoint", str(checkpoint),
                     "--fault", "1:7:kill")
    assert result.returncode != 0
    assert not out.exists()
    model, optimizer, _, _ = worker.small_problem(200)
    epoch, _ = load_checkpoint(checkpoint, model.params, optimizer)
    assert epoch == 1
    want = one_process(200, 1)
    for name, value in want.items():
        np.testing.assert_allclose(model.params[name], value, **TOLERANCE)


def test_raising_rank_names_itself_and_ends_the_job(tmp_path: Path):
    result = mpiexec(2, tmp_path / "params.npz", "--fault", "1:2:raise")
    assert result.returncode != 0
    assert "recir: rank 1 of 2 failed: ValueError: injected fault" in result.stderr


def test_stopped_rank_times_out_instead_of_hanging(tmp_path: Path):
    result = mpiexec(2, tmp_path / "params.npz", "--fault", "1:2:stop",
                     "--timeout", "1")
    assert result.returncode != 0
    assert "recir: rank 0 of 2: no answer from the other ranks" in result.stderr


def test_sentiment_cli_trains_on_two_ranks_and_only_rank_0_prints(tmp_path: Path):
    metrics = tmp_path / "metrics.jsonl"
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec beside this Python (pip install 'recir[distributed]')")
    command = [str(MPIEXEC), "-n", "2", sys.executable, "-m",
               "recir.examples.sentiment", "--synthetic", "--hidden", "8",
               "--embed", "8", "--epochs", "1",
               "--max-train", "50", "--no-all-nodes", "--no-progress", "--threads", "1",
               "--metrics", str(metrics), "--distributed"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("epoch 1/1:") == 1
    assert "distributed: 2 ranks" in result.stdout
    record = json.loads(metrics.read_text())
    assert record["bytes_reduced_per_step"] > 0


@pytest.mark.parametrize("other, message", [
    # refused before MPI started: rank 0 waited for rank 1 for ever
    (["--batch-size", "0"], "error: --batch-size must be at least 1, got 0"),
    # each rank trained alike with its own rate: parameters apart, exit status 0
    (["--lr", "0.5"], "the ranks disagree on the training options"),
])
def test_a_rank_that_differs_ends_the_job(tmp_path: Path, other: list[str], message: str):
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec beside this Python (pip install 'recir[distributed]')")
    model = tmp_path / "model.npz"
    model.write_bytes(b"kept")
    rank = [sys.executable, "-m", "recir.examples.sentiment", "--synthetic", "--hidden", "4",
            "--embed", "4", "--epochs", "1", "--max-train", "20", "--no-progress",
            "--threads", "1", "--distributed", "--save-model", str(model)]
    command = [str(MPIEXEC), "-n", "1", *rank, ":", "-n", "1", *rank, *other]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert message in result.stderr
    assert model.read_bytes() == b"kept"  # (a failed job wrote the untrained parameters)
