"""`run.py train`: training throughput of recir's gradients against PyTorch eager.

TreeRNN, RNTN and TreeLSTM; one SGD step per batch of 1, 10 or 25 trees
(forward, backward, update), one thread, identical weights and trees, in one
process. Before timing, recir's gradients and loss for one tree must equal
torch's (and torch's loss the float64 NumPy reference); a contestant that
cannot build or fails the check is skipped with its reason. Then the peak
memory of one batch of 25 against the ideal (parameters + gradients + tape).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import Any

import numpy as np

from bench import common
from bench.common import (
    Skipped,
    attempt,
    contest_times,
    fmt,
    machine_info,
    median,
    print_table,
    ratio,
    write_json,
)
from bench.train_memory import MEMORY_BATCH, measure_memory, print_memory

# hidden sizes; RNTN d = 25 as in Socher et al. 2013
HIDDEN = {"tree_rnn": 150, "rntn": 25, "tree_lstm": 150}
BATCHES = (1, 10, 25)
LR = 0.01
RTOL, ATOL, LOSS_RTOL = 1e-3, 1e-5, 1e-4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 25 trees, 2 repeats")
    parser.add_argument("--trees", type=int,
                        help="trees per timed pass (default 100, quick 25; >= 25)")
    parser.add_argument("--repeats", type=int,
                        help="timed passes per contestant (default 5, quick 2)")
    parser.add_argument("--models", nargs="+", choices=list(HIDDEN),
                        default=list(HIDDEN))
    parser.add_argument("--hidden", type=int,
                        help="hidden size of every model run (default: TreeRNN and "
                             "TreeLSTM 150, RNTN 25)")
    parser.add_argument("--memory-only", action="store_true",
                        help="skip the timing: the check, peak memory and tape "
                             "bytes per tree only")


def load_trees(n: int) -> tuple[list[Any], int, str]:
    """The first `n` SST train trees, else synthetic SST-like ones; + vocab size."""
    from recir.data import load_sst, make_treebank, sst_path

    path = sst_path("train")
    if path is not None:
        trees, vocab = load_sst(path)
        return trees[:n], len(vocab), f"SST train, first {n} trees ({path})"
    return (make_treebank(n, vocab_size=5000, seed=0), 5000,
            f"synthetic SST-like trees (no SST found), {n}")


def make_params(name: str, vocab: int) -> dict[str, np.ndarray]:
    """`init_params` (seed 0), matrices rescaled to std 1/sqrt(fan_in), the RNTN
    tensor to 1/fan_in (it contracts twice), embeddings and biases as drawn.

    As in bench/native.py: at init_params' std 0.5 the wide models saturate and
    float32 gradients drift too far for the check; the values do not change
    the work.
    """
    module = importlib.import_module(f"recir.models.{name}")
    sizes = {"hidden": HIDDEN[name], "vocab": vocab, "classes": 5}
    if name == "tree_lstm":
        sizes["embed"] = HIDDEN[name]
    params = module.init_params(np.random.default_rng(0), **sizes)
    for k, v in params.items():
        fan_in = v.shape[-1]
        if v.ndim == 3:
            params[k] = v / v.std() / fan_in
        elif v.ndim == 2 and k != "emb":
            params[k] = v / v.std() / np.sqrt(fan_in)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in params.items()}


def sgd(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], scale: float,
        words: np.ndarray) -> None:
    """p -= scale * g in place (compiled code reads the arrays), then g = 0.

    The embedding is updated on the batch's words only, its other gradient
    rows being zero: a dense vocab x embed update would cost more than a small
    batch, and torch gets a sparse one.
    """
    for name, p in params.items():
        g = grads[name]
        if name == "emb":
            p[words] -= np.float32(scale) * g[words]
            g[words] = 0
            continue
        g *= np.float32(scale)
        p -= g
        g.fill(0)


class RecirTrainer:
    """`recir.value_and_grad` summing a batch into buffers (`into=`), then `sgd`."""

    def __init__(self, name: str, params: dict[str, np.ndarray]):
        import recir

        module = importlib.import_module(f"recir.models.{name}")
        self.vg = recir.value_and_grad(
            module.trace_model({k: v.copy() for k, v in params.items()}), threads=1)
        self.params: dict[str, np.ndarray] = self.vg.params
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.tapes: list[int | None] | None = None  # set to a list to record

    def step(self, batch: list[Any], lr: float) -> float:
        total = 0.0
        for t in batch:
            outputs, _ = self.vg(t.left, t.right, t.word, t.label, t.root,
                                 into=self.grads)
            total += float(outputs[-1])
            if self.tapes is not None:
                self.tapes.append(self.vg.last_tape_bytes)
        words = np.unique(np.concatenate([t.word for t in batch]))
        sgd(self.params, self.grads, lr / len(batch), words[words >= 0])
        return total

    def gradients(self, tree: Any) -> tuple[float, dict[str, np.ndarray]]:
        t = tree
        outputs, grads = self.vg(t.left, t.right, t.word, t.label, t.root)
        return float(outputs[-1]), grads

    def resident_bytes(self) -> int:
        """Held between steps: parameters and the gradient buffers."""
        return sum(v.nbytes for v in (*self.params.values(), *self.grads.values()))


class TorchTrainer:
    """bench/torch_models.py with autograd; gradients live only during a step."""

    def __init__(self, name: str, params: dict[str, np.ndarray]):
        import torch

        from bench.torch_models import MODELS

        torch.set_num_threads(1)
        self.model = MODELS[name](params, train=True)

    def step(self, batch: list[Any], lr: float) -> float:
        return self.model.step(batch, lr)

    def gradients(self, tree: Any) -> tuple[float, dict[str, np.ndarray]]:
        return self.model.gradients(tree)

    def resident_bytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self.model.p.values())


CONTESTANTS = {"recir": RecirTrainer, "torch": TorchTrainer}


# --- correctness ---------------------------------------------------------------

def compare(got: tuple[float, dict[str, np.ndarray]],
            want: tuple[float, dict[str, np.ndarray]], other: str) -> dict[str, Any]:
    """Loss and every parameter's gradient against `other`'s; raise Skipped if off."""
    loss, grads = got
    want_loss, want_grads = want
    if not np.isclose(loss, want_loss, rtol=LOSS_RTOL, atol=0):
        raise Skipped(f"loss {loss:.6g} differs from {other}'s {want_loss:.6g}")
    worst = None if not want_grads else 0.0
    for k, w in want_grads.items():
        g = grads.get(k)
        if g is None or g.shape != w.shape:
            raise Skipped(f"gradient of {k}: {None if g is None else g.shape}, "
                          f"{other} has {w.shape}")
        err = float(np.abs(g - w).max())
        if not np.allclose(g, w, rtol=RTOL, atol=ATOL):
            raise Skipped(f"gradient of {k} differs from {other}'s: max |d| {err:.2e}")
        worst = max(worst or 0.0, err)
    return {"against": other, "loss": loss, "other_loss": want_loss,
            "max_abs_grad_err": worst}


def check(name: str, trainers: dict[str, Any], params: dict[str, np.ndarray],
          tree: Any, status: dict[str, dict[str, Any]]) -> None:
    """torch's loss against the float64 reference, recir's loss and gradients
    against torch's (its loss against the reference when torch is absent).
    A failing contestant leaves `trainers`, its reason in `status`."""
    module = importlib.import_module(f"recir.models.{name}")
    ref_loss = module.reference(tree, int(tree.root), params)[1]
    results = {}
    for who, trainer in trainers.items():
        results[who], status[who]["skipped"] = attempt(
            f"{name} {who} gradients", lambda t=trainer: t.gradients(tree))
    if results.get("torch") is not None:
        status["torch"]["check"], status["torch"]["skipped"] = attempt(
            f"{name} torch check",
            lambda: compare((results["torch"][0], {}), (ref_loss, {}), "the reference"))
    torch_ok = status.get("torch", {}).get("skipped") is None and "torch" in results
    if results.get("recir") is not None:
        want = results["torch"] if torch_ok else (ref_loss, {})
        status["recir"]["check"], status["recir"]["skipped"] = attempt(
            f"{name} recir check", lambda: compare(
                results["recir"], want, "torch" if torch_ok else "the reference"))
        if status["recir"]["skipped"] is None and not torch_ok:
            status["recir"]["check"]["note"] = "loss only: no torch gradients"
    for who, s in status.items():
        if s["skipped"] is not None:
            trainers.pop(who, None)


# --- timing and memory -----------------------------------------------------------

def time_batches(trainers: dict[str, Any], trees: list[Any], batch: int,
                 repeats: int) -> dict[str, dict[str, Any]]:
    """One pass = one SGD step per `batch` trees over the first multiple of it."""
    use = trees[: len(trees) // batch * batch]
    batches = [use[k:k + batch] for k in range(0, len(use), batch)]

    def one_pass(trainer: Any) -> None:
        for b in batches:
            trainer.step(b, LR)

    times = contest_times({who: lambda t=t: one_pass(t) for who, t in trainers.items()},
                          repeats)
    nodes = sum(t.num_nodes for t in use)
    out = {}
    for who, ts in times.items():
        t = median(ts)
        out[who] = {"trees": len(use), "nodes": nodes, "batches": len(batches),
                    "times_s": ts, "median_s": t, "trees_per_s": len(use) / t,
                    "nodes_per_s": nodes / t, "ms_per_batch": 1e3 * t / len(batches)}
    return out


# --- driver -----------------------------------------------------------------------

def build(name: str, params: dict[str, np.ndarray]
          ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """name -> trainer for those that build; name -> {skipped, build_s} for all."""
    trainers, status = {}, {}
    for who, cls in CONTESTANTS.items():
        print(f"  {name}: {who}", flush=True)
        start = time.perf_counter()
        trainer, why = attempt(f"{name} {who}", lambda c=cls: c(name, params))
        status[who] = {"skipped": why, "build_s": time.perf_counter() - start}
        if trainer is not None:
            trainers[who] = trainer
    return trainers, status


def bench_model(name: str, trees: list[Any], vocab: int, repeats: int,
                timing: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    params = make_params(name, vocab)
    param_bytes = sum(v.nbytes for v in params.values())
    trainers, status = build(name, params)
    check(name, trainers, params, trees[0], status)
    rows = []
    for batch in BATCHES if timing else ():
        print(f"  {name}: batch {batch}", flush=True)
        timed = time_batches(trainers, trees, batch, repeats)
        for who in CONTESTANTS:
            rows.append({"model": name, "hidden": HIDDEN[name], "batch": batch,
                         "contestant": who, "skipped": status[who]["skipped"],
                         **timed.get(who, {})})
        last = rows[-len(CONTESTANTS):]
        speed = {r["contestant"]: r.get("trees_per_s") for r in last}
        for r in last:
            r["recir_over_torch"] = ratio(speed.get("recir"), speed.get("torch"))
    memory, why = attempt(f"{name} memory", lambda: measure_memory(
        trainers, trees[:MEMORY_BATCH], param_bytes, LR))
    summary = {"hidden": HIDDEN[name], "param_bytes": param_bytes,
               "params": {k: list(v.shape) for k, v in params.items()},
               "contestants": status, "memory": memory, "memory_skipped": why}
    return summary, rows


def run(args: argparse.Namespace) -> int:
    if args.quick:
        common.WARMUP_S = 0.2
    n = args.trees or (25 if args.quick else 100)
    if args.hidden:
        HIDDEN.update({m: args.hidden for m in args.models})
    if n < max(BATCHES):
        raise SystemExit(f"--trees must be at least {max(BATCHES)}")
    repeats = args.repeats or (2 if args.quick else 5)
    trees, vocab, source = load_trees(n)
    report: dict[str, Any] = {
        "benchmark": "train", "quick": args.quick, "machine": machine_info(),
        "config": {"trees": len(trees), "tree_source": source, "vocab": vocab,
                   "nodes": sum(t.num_nodes for t in trees), "repeats": repeats,
                   "batches": list(BATCHES),
                   "hidden": {m: HIDDEN[m] for m in args.models},
                   "lr": LR, "update": "SGD on the batch mean, one step per batch",
                   "threads": 1, "check": {"rtol": RTOL, "atol": ATOL,
                                           "loss_rtol": LOSS_RTOL},
                   "weights": "init_params(seed 0); matrices std 1/sqrt(fan_in), "
                              "RNTN tensor 1/fan_in"},
        "models": {}, "rows": []}
    print(f"{len(trees)} trees from {source}, {repeats} repeats, lr {LR}, "
          f"cpu {report['machine']['cpu']}", flush=True)
    for name in args.models:
        report["models"][name], rows = bench_model(name, trees, vocab, repeats,
                                                   timing=not args.memory_only)
        report["rows"] += rows
    if "torch" in sys.modules:
        report["config"]["torch_threads"] = sys.modules["torch"].get_num_threads()
    print_report(report)
    if args.json:
        write_json(args.json, report)
        print(f"\nwrote {args.json}")
    return 0


def print_report(report: dict[str, Any]) -> None:
    by_key = {(r["model"], r["batch"], r["contestant"]): r for r in report["rows"]}
    rows = []
    for name, m in report["models"].items():
        for batch in BATCHES if (name, BATCHES[0], "recir") in by_key else ():
            rec, tor = by_key[(name, batch, "recir")], by_key[(name, batch, "torch")]
            rows.append([f"{name} h={m['hidden']}", str(batch),
                         fmt(rec.get("trees_per_s")), fmt(tor.get("trees_per_s")),
                         fmt(rec.get("ms_per_batch"), 2),
                         fmt(tor.get("ms_per_batch"), 2),
                         fmt(rec.get("recir_over_torch"), 2)])
    if rows:
        print_table("training throughput (forward + backward + SGD step), one thread",
                    ["model", "batch", "recir trees/s", "torch trees/s",
                     "recir ms/batch", "torch ms/batch", "recir/torch"], rows)
    print_memory(report)
    for name, m in report["models"].items():
        for who, s in m["contestants"].items():
            if s["skipped"] is not None:
                print(f"  skipped {name} {who}: {s['skipped']}")
            elif s.get("check"):
                c, err = s["check"], s["check"]["max_abs_grad_err"]
                grads = "" if err is None else f", gradients max |d| {err:.1e}"
                print(f"  checked {name} {who} against {c['against']}: loss "
                      f"{c['loss']:.6g} vs {c['other_loss']:.6g}{grads}"
                      + (f" ({c['note']})" if c.get("note") else ""))
