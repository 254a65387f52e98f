"""Synchronous data-parallel training over MPI (`mpiexec -n N ... --distributed`).

Every rank holds the whole treebank and the parameters. Each global
minibatch is split across ranks so their node counts, not their tree counts,
balance (`split_by_nodes`); a rank adds its trees' gradients with its own
threads, then one `Allreduce` sums the dense gradients (and the loss) in a
single contiguous float32 buffer that the gradient arrays are views of, so
nothing is packed or unpacked. The embedding table's rows are summed sparsely:
every rank knows every rank's share of the batch, hence which rows each one
touched, so only the rows travel (`Allgatherv`), added in rank order; where
they would outweigh the table, the table joins the dense buffer instead.
Every rank then holds the same sums and takes the same optimizer step.

Faults: an exception on a rank prints one line naming the rank and calls
`MPI_Abort`, which takes the job down; a rank killed outright is caught by
the launcher (MPICH's hydra ends the job and names the process). A rank whose
peers stop answering gives up after `collective_timeout` seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from recir.backend.policy import balanced_groups

Arrays = dict[str, np.ndarray]
RowsOf = Callable[[Sequence[Any], Arrays], dict[str, np.ndarray]]
PHASES = ("compute", "allreduce", "optimizer")
# A step collective waits for the slowest rank's share of one minibatch: well
# under a second per tree even for SST's longest sentences at h=300 on one
# core, so minutes of silence mean a stuck peer. Rank 0's evaluation and
# checkpoint run outside the timed collectives.
COLLECTIVE_TIMEOUT_S = 300.0
ABORT_GRACE_S = 0.2  # a failing rank's message reaches the launcher before its abort


def split_by_nodes(sizes: Sequence[int], ranks: int) -> list[list[int]]:
    """Indices of `sizes` per rank, node counts balanced
    (`policy.balanced_groups`: the largest tree first, each to the rank with
    the fewest nodes so far); every rank computes the same split. Indices
    stay in batch order."""
    shares: list[list[int]] = [[] for _ in range(ranks)]
    for i, rank in enumerate(balanced_groups(sizes, ranks)):
        shares[rank].append(i)
    return shares


class LocalReducer:
    """One process: the whole batch is this rank's, sums need no exchange."""

    rank, size = 0, 1

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.bytes_reduced = 0  # per rank, summed over steps
        self.steps = 0

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def gradient_buffers(self, params: Arrays) -> Arrays:
        return {k: np.zeros_like(v, dtype=np.float32) for k, v in params.items()}

    def shard(self, batch: Sequence[Any]) -> Sequence[Any]:
        return batch

    def reduce(self, grads: Arrays, loss: float, batch: Sequence[Any]) -> float:
        """Sums `grads` and `loss` over ranks, in place; returns the loss."""
        self.steps += 1
        return loss

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        self.seconds[name] += time.perf_counter() - began

    @contextmanager
    def fail_fast(self) -> Iterator[None]:
        yield

    def check_same(self, what: str, value: Any) -> None:
        """Raises unless every rank passes the same `value`."""

    def from_root(self, record: dict[str, Any]) -> dict[str, Any]:
        """Rank 0's epoch record on every rank (the others wait, untimed,
        while it evaluates and checkpoints)."""
        return record

    def report(self) -> dict[str, float]:
        """Time split and traffic since the last report (then restarts)."""
        out = {f"{k}_seconds": v for k, v in self.seconds.items()}
        out["bytes_reduced_per_step"] = self.bytes_reduced / max(self.steps, 1)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.bytes_reduced = self.steps = 0
        return out


class MPIReducer(LocalReducer):
    """Sums over `MPI.COMM_WORLD`; see the module docstring."""

    def __init__(self, rows_of: RowsOf, timeout: float = COLLECTIVE_TIMEOUT_S,
                 tables: Sequence[str] = ("emb",)):
        super().__init__()
        self.tables = tuple(tables)  # parameters indexed by word id
        mpi = import_mpi()
        self.MPI, self.comm = mpi, mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.rows_of, self.timeout = rows_of, timeout
        self.flat = np.zeros(0, np.float32)
        self.dense_end = 0  # flat[:dense_end]: the dense gradients, then the loss
        self.sparse: list[str] = []
        self.shares: list[list[Any]] = [[]]

    def gradient_buffers(self, params: Arrays) -> Arrays:
        """Views of one flat buffer: the dense gradients, the loss, then the
        embedding tables (reduced sparsely, or densely with the rest)."""
        self.sparse = [k for k in params if k in self.tables and params[k].ndim == 2]
        dense = [k for k in params if k not in self.sparse]
        self.dense_end = sum(params[k].size for k in dense) + 1
        self.flat = np.zeros(self.dense_end + sum(params[k].size for k in self.sparse),
                             np.float32)
        views = {}
        for names, at in ((dense, 0), (self.sparse, self.dense_end)):
            for name in names:
                size = params[name].size
                views[name] = self.flat[at:at + size].reshape(params[name].shape)
                at += size
        return {k: views[k] for k in params}

    def shard(self, batch: Sequence[Any]) -> Sequence[Any]:
        shares = split_by_nodes([t.num_nodes for t in batch], self.size)
        self.shares = [[batch[i] for i in share] for share in shares]
        return self.shares[self.rank]

    def reduce(self, grads: Arrays, loss: float, batch: Sequence[Any]) -> float:
        with self.phase("allreduce"), self.timed("the gradient allreduce"):
            rows = [self.rows_of(share, grads) if share else
                    {k: np.zeros(0, np.int64) for k in self.sparse}
                    for share in self.shares]
            gathered = {k: sum(len(r[k]) for r in rows) for k in self.sparse}
            dense = [k for k in self.sparse if gathered[k] >= len(grads[k])]
            end = len(self.flat) if dense else self.dense_end
            self.flat[self.dense_end - 1] = loss
            self.comm.Allreduce(self.MPI.IN_PLACE, self.flat[:end])
            self.bytes_reduced += 4 * end
            for name in self.sparse:
                if name not in dense:
                    self.bytes_reduced += self.gather_rows(grads[name], rows, name)
            total = float(self.flat[self.dense_end - 1])
            self.flat[self.dense_end - 1] = 0
        self.steps += 1
        return total

    def gather_rows(self, table: np.ndarray, rows: list[dict[str, np.ndarray]],
                    name: str) -> int:
        """Every rank's touched rows of `table`, added in rank order (the same
        order everywhere, so every rank gets the same bits); returns bytes."""
        ids = [r[name] for r in rows]
        width = int(np.prod(table.shape[1:]))
        counts = [len(i) * width for i in ids]
        send = np.ascontiguousarray(table[ids[self.rank]]).reshape(-1)
        recv = np.empty(sum(counts), np.float32)
        self.comm.Allgatherv(send, [recv, counts])
        table[ids[self.rank]] = 0
        at = 0
        for share_ids, count in zip(ids, counts, strict=True):
            table[share_ids] += recv[at:at + count].reshape(-1, *table.shape[1:])
            at += count
        return 4 * sum(counts)

    @contextmanager
    def timed(self, what: str) -> Iterator[None]:
        """Ends this process if `what` outlasts the timeout: MPI has no
        timeout of its own, and the launcher then takes the other ranks
        down. A timer thread a collective costs tens of microseconds, beside
        a step."""
        timer = threading.Timer(self.timeout, self.give_up, (what,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def give_up(self, what: str) -> None:
        sys.stderr.write(f"recir: rank {self.rank} of {self.size}: no answer from the "
                         f"other ranks in {what} for {self.timeout:g} s (a rank is stuck "
                         "or gone); ending the job\n")
        sys.stderr.flush()
        os._exit(1)

    @contextmanager
    def fail_fast(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            sys.stderr.write(f"recir: rank {self.rank} of {self.size} failed: "
                             f"{type(error).__name__}: {error}\n")
            end_job(self.comm, 1)

    def check_same(self, what: str, value: Any) -> None:
        with self.timed(f"comparing {what}"):
            values = self.comm.allgather(value)
        if any(v != values[0] for v in values):
            shown = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise ValueError(f"the ranks disagree on {what} ({shown}); every rank "
                             "must load the same data and parameters and train alike")

    def from_root(self, record: dict[str, Any]) -> dict[str, Any]:
        return self.comm.bcast(record, root=0)


def import_mpi() -> Any:
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as error:  # (RuntimeError: mpi4py, no libmpi)
        lines = str(error).splitlines() or [type(error).__name__]
        why = "" if isinstance(error, ImportError) else f" ({lines[0]})"
        raise RuntimeError("distributed training needs mpi4py and an MPI library: "
                           f"pip install 'recir[distributed]'{why}") from error
    return MPI


def world() -> tuple[int, int, int, list[str]]:
    """(rank, ranks, ranks on this host, each rank's host:pid) of the MPI
    job: the launcher names a rank that dies by its process id."""
    mpi = import_mpi()
    comm = mpi.COMM_WORLD
    local = comm.Split_type(mpi.COMM_TYPE_SHARED)
    where = comm.allgather(f"{mpi.Get_processor_name()}:{os.getpid()}")
    return comm.Get_rank(), comm.Get_size(), local.Get_size(), where


def quiet_unless_root(rank: int) -> None:
    """Only rank 0 prints to stdout; errors still reach stderr everywhere."""
    if rank != 0:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")


def join_job(distributed: bool) -> tuple[int, int]:
    """(threads per rank: the host's cores shared by its ranks, this rank);
    with `distributed`, only rank 0 prints. RuntimeError: no MPI."""
    cores = os.cpu_count() or 1
    if not distributed:
        return cores, 0
    rank, ranks, here, where = world()
    quiet_unless_root(rank)
    print(f"distributed: {ranks} ranks ({', '.join(where)}), {here} on this host")
    return max(1, cores // here), rank


def abort_job(code: int) -> None:
    """Ends every rank of the MPI job, from a rank that failed before or
    outside training (whose own failures abort it: `MPIReducer.fail_fast`)."""
    try:
        mpi = import_mpi()
    except RuntimeError:
        return  # (no MPI: no job to end)
    end_job(mpi.COMM_WORLD, code)


def end_job(comm: Any, code: int) -> None:
    """`MPI_Abort`, which takes every rank down, and this process's end
    (an abort that returns: nothing after a failure may run). The launcher
    may not read what is still in this rank's pipe once it aborts: that
    gets a moment first."""
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)
    comm.Abort(code)
    os._exit(code)
