"""`run.py train`'s memory rows: the peak memory of one training step against
the ideal (parameters + gradients + tape), and tape bytes per tree against
the storage PyTorch's autograd saves."""

from __future__ import annotations

import ctypes
from typing import Any

from bench.common import fmt, print_table, ratio, rss_kb

MEMORY_BATCH = 25


def release_free_memory() -> None:
    """glibc malloc_trim: hand freed heap pages back, so RSS growth is new memory
    rather than whatever earlier batches left cached (torch's graphs above all)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_growth_kb(fn: Any) -> tuple[int, int]:
    """(VmHWM - VmRSS before, VmRSS before) over `fn()`, the peak reset first."""
    release_free_memory()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = rss_kb()
    fn()
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return max(hwm - before, 0), before


def measure_memory(trainers: dict[str, Any], batch: list[Any], param_bytes: int,
                   lr: float) -> dict[str, Any]:
    """Peak memory of one step of `batch` per contestant, against the ideal:
    parameters + gradients + recir's largest tape (trees run one at a time and
    each call's frames are freed when it returns, so the largest is the peak)."""
    out: dict[str, Any] = {"trees": len(batch), "params_kb": param_bytes / 1024,
                           "grads_kb": param_bytes / 1024}
    if "recir" in trainers:
        trainers["recir"].tapes = []
    for who, trainer in trainers.items():
        delta, before = peak_growth_kb(lambda t=trainer: t.step(batch, lr))
        resident = trainer.resident_bytes() / 1024
        out[who] = {"rss_before_kb": before, "delta_kb": delta, "resident_kb": resident,
                    "measured_kb": resident + delta}
    nodes = sum(t.num_nodes for t in batch)
    if "torch" in trainers:
        saved = [trainers["torch"].model.saved_bytes(t) for t in batch]
        out["torch"]["tape_kb"] = max(saved) / 1024
        out["torch"]["tape_bytes_per_tree"] = sum(saved) / len(batch)
        out["torch"]["tape_bytes_per_node"] = sum(saved) / nodes
    tapes = trainers["recir"].tapes if "recir" in trainers else None
    if tapes and None not in tapes:
        out["recir"]["tape_kb"] = max(tapes) / 1024
        out["recir"]["tape_bytes_per_tree"] = sum(tapes) / len(batch)
        out["recir"]["tape_bytes_per_node"] = sum(tapes) / nodes
        out["ideal_kb"] = 2 * param_bytes / 1024 + out["recir"]["tape_kb"]
        for who in trainers:
            out[who]["measured_over_ideal"] = out[who]["measured_kb"] / out["ideal_kb"]
    return out


def print_memory(report: dict[str, Any]) -> None:
    rows = []
    for name, m in report["models"].items():
        mem = m["memory"] or {}
        rec, tor = mem.get("recir", {}), mem.get("torch", {})
        rows.append([name, fmt(mem.get("params_kb"), 0), fmt(rec.get("tape_kb"), 0),
                     fmt(tor.get("tape_kb"), 0), fmt(mem.get("ideal_kb"), 0),
                     fmt(rec.get("delta_kb"), 0), fmt(rec.get("measured_kb"), 0),
                     fmt(rec.get("measured_over_ideal"), 2),
                     fmt(tor.get("delta_kb"), 0), fmt(tor.get("measured_kb"), 0),
                     fmt(tor.get("measured_over_ideal"), 2)])
    print_table(f"peak memory of one batch of {MEMORY_BATCH} trees, KiB "
                "(ideal = params + grads + recir tape; measured = held between steps "
                "+ peak RSS growth)",
                ["model", "params", "recir tape", "torch tape", "ideal", "recir +RSS",
                 "recir", "recir/ideal", "torch +RSS", "torch", "torch/ideal"], rows)
    print_tapes(report)


def print_tapes(report: dict[str, Any]) -> None:
    """Tape bytes per tree: recir's `last_tape_bytes` against the storage torch's
    autograd saves (`saved_tensors_hooks`), both averaged over the memory batch."""
    rows = []
    for name, m in report["models"].items():
        mem = m["memory"] or {}
        rec, tor = mem.get("recir", {}), mem.get("torch", {})
        per_tree = rec.get("tape_bytes_per_tree"), tor.get("tape_bytes_per_tree")
        rows.append([f"{name} h={m['hidden']}", fmt(per_tree[0], 0),
                     fmt(per_tree[1], 0), fmt(ratio(*per_tree), 3),
                     fmt(rec.get("tape_bytes_per_node"), 0),
                     fmt(tor.get("tape_bytes_per_node"), 0)])
    print_table(f"tape bytes per tree, mean of the {MEMORY_BATCH} trees of the memory "
                "batch",
                ["model", "recir", "torch", "recir/torch", "recir per node",
                 "torch per node"], rows)
