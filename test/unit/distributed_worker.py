"""A small TreeLSTM trained by `recir.train`, alone or under `mpiexec` (the
distributed tests run it): rank 0 saves the parameters to an .npz file, after
every rank checked that all hold the same bits. `--fault RANK:STEP:KIND`
makes that rank kill itself, raise or stop at its STEP-th gradient reduction.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
from pathlib import Path

import numpy as np

from recir.data import make_treebank
from recir.models import tree_lstm
from recir.train import Adagrad, TrainConfig, train

TREES, DEV, HIDDEN, BATCH = 48, 4, 8, 10


def small_problem(vocab: int):
    """(model, optimizer, train trees, dev trees), the same on every rank."""
    trees = make_treebank(TREES + DEV, vocab_size=vocab, seed=1)
    params = tree_lstm.init_params(np.random.default_rng(2), hidden=HIDDEN,
                                   embed=HIDDEN, vocab=vocab)
    params = {k: (0.3 * v).astype(np.float32) for k, v in params.items()}
    model = tree_lstm.trace_model(params)
    return model, Adagrad(model.params, lr=0.05, weight_decay=1e-4), trees[:TREES], \
        trees[TREES:]


def run(vocab: int, epochs: int, distributed: bool, threads: int = 1,
        checkpoint: Path | None = None, resume: bool = False,
        timeout: float = 60.0) -> dict[str, np.ndarray]:
    model, optimizer, trees, dev = small_problem(vocab)
    config = TrainConfig(epochs=epochs, batch_size=BATCH, threads=threads,
                         progress=False, checkpoint=checkpoint, resume=resume,
                         distributed=distributed, collective_timeout=timeout)
    train(model, optimizer, trees, dev, config)
    return model.params


def inject(fault: str) -> None:
    """Patches the reducer so that rank RANK misbehaves at step STEP."""
    from mpi4py import MPI

    from recir.train.distributed import MPIReducer

    rank, step, kind = fault.split(":")
    if MPI.COMM_WORLD.Get_rank() != int(rank):
        return
    reduce, calls = MPIReducer.reduce, iter(range(1, 1 << 30))

    def faulty(self, grads, loss, batch):
        if next(calls) == int(step):
            if kind == "raise":
                raise ValueError("injected fault")
            os.kill(os.getpid(), signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        return reduce(self, grads, loss, batch)

    MPIReducer.reduce = faulty


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--vocab", type=int, default=200)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--distributed", action="store_true")
    p.add_argument("--checkpoint", type=Path)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--fault")
    args = p.parse_args()
    if args.fault:
        inject(args.fault)
    params = run(args.vocab, args.epochs, args.distributed, args.threads,
                 args.checkpoint, args.resume, args.timeout)
    rank = 0
    if args.distributed:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        digest = hashlib.sha256(b"".join(v.tobytes() for v in params.values()))
        digests = comm.allgather(digest.hexdigest())
        if len(set(digests)) != 1:
            print(f"ranks hold different parameters: {digests}", file=sys.stderr)
            return 3
    if rank == 0:
        np.savez(args.out, **params)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
