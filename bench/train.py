"""`run.py train`: training throughput of recir's native gradients against PyTorch eager.

TreeRNN, RNTN and TreeLSTM; one SGD step per batch of 1, 10 or 25 trees
(forward, backward, update), one thread, identical weights and trees. The
torch models reuse the recir models' own cell functions with torch
operators, so the math is the same; torch gets `embedding(sparse=True)`, its
fast path for large vocabularies. Before timing, recir's gradients for one
tree must equal torch's. Then the peak memory of one batch of 25.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import (
    attempt,
    contest_times,
    fmt,
    machine_info,
    median,
    print_table,
    ratio,
    rss_kb,
    write_json,
)

MODELS = {"tree_rnn": 150, "rntn": 25, "tree_lstm": 150}  # hidden sizes (RNTN: as Socher et al.)
LR = 0.01


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="write all results here")
    parser.add_argument("--quick", action="store_true", help="fewer trees and repeats")
    parser.add_argument("--trees", type=int, help="trees per timed pass (default 100)")
    parser.add_argument("--repeats", type=int, help="timed passes per contestant (default 5)")


def load_trees(n: int) -> tuple[list[Any], int, str]:
    from recir.data import load_sst, make_treebank, sst_path

    path = sst_path("train")
    if path is not None:
        trees, vocab = load_sst(path)
        return trees[:n], len(vocab), f"SST train ({path})"
    return make_treebank(n, vocab_size=5000, seed=0), 5000, "synthetic SST-like trees"


def make_params(name: str, vocab: int) -> dict[str, np.ndarray]:
    """The model's shapes, N(0, 1/fan_in) weights: numerically sane for training."""
    import importlib

    module = importlib.import_module(f"recir.models.{name}")
    rng = np.random.default_rng(0)
    sizes = {"hidden": MODELS[name], "vocab": vocab, "classes": 5}
    if name == "tree_lstm":
        sizes["embed"] = MODELS[name]
    params = module.init_params(rng, **sizes)
    # the RNTN tensor contracts twice: 1/fan_in keeps its output O(1)
    return {k: (rng.standard_normal(v.shape) / (v.shape[-1] if v.ndim == 3 else
                                               np.sqrt(v.shape[-1]))).astype(np.float32)
            for k, v in params.items()}


class TorchTrainer:
    """One SGD step per batch with torch autograd, walking each tree in Python."""

    def __init__(self, name: str, params: dict[str, np.ndarray]):
        import importlib

        import torch

        self.torch = torch
        module = importlib.import_module(f"recir.models.{name}")
        self.p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        t = torch
        if name == "tree_lstm":
            hidden = params["w_out"].shape[1]
            self.leaf, self.combine = module.make_cells(
                hidden, lambda x, o, n: x[o:o + n], t.sigmoid, t.tanh, t.cat)
        elif name == "rntn":
            self.leaf, self.combine = module.make_cells(
                t.tanh, t.cat, lambda v, x, y: t.einsum("i,kij,j->k", x, v, y))
        else:
            self.leaf, self.combine = module.make_cells(t.tanh, t.cat)

    def loss(self, tree: Any) -> Any:
        t, p = self.torch, self.p

        def visit(i: int):
            if tree.left[i] < 0:
                x = t.nn.functional.embedding(t.tensor([int(tree.word[i])]), p["emb"],
                                              sparse=True)[0]
                states, below = self.leaf(p, x), 0.0
            else:
                ls, loss_l = visit(int(tree.left[i]))
                rs, loss_r = visit(int(tree.right[i]))
                states, below = self.combine(p, ls, rs), loss_l + loss_r
            logits = t.mv(p["w_out"], states[0]) + p["b_out"]
            return states, below + t.logsumexp(logits, 0) - logits[int(tree.label[i])]

        return visit(int(tree.root))[1]

    def step(self, batch: list[Any]) -> float:
        total = 0.0
        for tree in batch:
            loss = self.loss(tree)
            loss.backward()
            total += float(loss)
        with self.torch.no_grad():
            for value in self.p.values():
                value.add_(value.grad, alpha=-LR / len(batch))
                value.grad = None
        return total

    def gradients(self, tree: Any) -> dict[str, np.ndarray]:
        self.loss(tree).backward()
        grads = {k: (v.grad.to_dense() if v.grad.is_sparse else v.grad).numpy().copy()
                 for k, v in self.p.items()}
        for v in self.p.values():
            v.grad = None
        return grads


class RecirTrainer:
    """recir.value_and_grad accumulating a batch in place, then SGD on NumPy."""

    def __init__(self, name: str, params: dict[str, np.ndarray]):
        import importlib

        import recir
        from recir.train import SGD
        from recir.train.loop import embedding_rows

        module = importlib.import_module(f"recir.models.{name}")
        self.model = module.trace_model({k: v.copy() for k, v in params.items()})
        self.vg = recir.value_and_grad(self.model)
        self.grads = {k: np.zeros_like(v) for k, v in self.model.params.items()}
        self.sgd = SGD(self.model.params, lr=LR)
        self.rows = embedding_rows
        self.peak_tape = 0

    def step(self, batch: list[Any]) -> float:
        total = 0.0
        for tree in batch:
            (_, loss), _ = self.vg(tree.left, tree.right, tree.word, tree.label, tree.root,
                                   into=self.grads)
            total += float(loss)
            self.peak_tape = max(self.peak_tape, self.vg.last_tape_bytes or 0)
        self.sgd.step(self.grads, 1.0 / len(batch), self.rows(batch, self.grads),
                      zero=True)
        return total

    def gradients(self, tree: Any) -> dict[str, np.ndarray]:
        return self.vg(tree.left, tree.right, tree.word, tree.label, tree.root)[1]


def check(trainers: dict[str, Any], tree: Any) -> dict[str, Any]:
    """Drops a contestant whose gradients differ from torch's (or recir's)."""
    grads = {}
    for name, trainer in list(trainers.items()):
        got, why = attempt(f"{name} gradients", lambda t=trainer: t.gradients(tree))
        if got is None:
            trainers.pop(name)
        else:
            grads[name] = got
    if len(grads) == 2:
        for k in grads["torch"]:
            if not np.allclose(grads["recir"][k], grads["torch"][k], rtol=1e-3, atol=1e-5):
                print(f"  [skip] recir: gradient of {k} differs from torch's")
                trainers.pop("recir")
                return {"recir": f"gradient of {k} differs from torch's"}
    return {}


def peak_batch_kb(trainer: Any, batch: list[Any]) -> int:
    """Peak RSS growth over one step (VmHWM reset through /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = rss_kb()
    trainer.step(batch)
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return max(hwm - before, 0)


def bench_model(name: str, trees: list[Any], vocab: int, repeats: int) -> dict[str, Any]:
    params = make_params(name, vocab)
    trainers: dict[str, Any] = {}
    for who, cls in (("recir", RecirTrainer), ("torch", TorchTrainer)):
        print(f"  {name}: {who}", flush=True)
        trainer, why = attempt(f"{name} {who}", lambda c=cls: c(name, params))
        if trainer is not None:
            trainers[who] = trainer
    result: dict[str, Any] = {"hidden": MODELS[name], "skipped": check(trainers, trees[0])}
    for batch in (1, 10, 25):
        batches = [trees[i:i + batch] for i in range(0, len(trees), batch)]

        def epoch(t: Any) -> None:
            for b in batches:
                t.step(b)

        times = contest_times({k: lambda t=t: epoch(t) for k, t in trainers.items()}, repeats)
        row = {k: {"times_s": ts, "trees_per_s": len(trees) / median(ts)}
               for k, ts in times.items()}
        row["recir_over_torch"] = ratio(row.get("recir", {}).get("trees_per_s"),
                                        row.get("torch", {}).get("trees_per_s"))
        result[f"batch_{batch}"] = row
    memory = {}
    for who, trainer in trainers.items():
        memory[who] = {"peak_kb": peak_batch_kb(trainer, trees[:25])}
    if "recir" in trainers:
        param_bytes = sum(v.nbytes for v in params.values())
        ideal = 2 * param_bytes + trainers["recir"].peak_tape
        # params and gradient buffers are resident before the step: add them back
        measured = 2 * param_bytes + memory["recir"]["peak_kb"] * 1024
        memory["recir"] |= {"params_plus_grads_kb": 2 * param_bytes // 1024,
                            "peak_tape_kb": trainers["recir"].peak_tape // 1024,
                            "measured_kb": measured // 1024, "ideal_kb": ideal // 1024,
                            "measured_over_ideal": measured / ideal}
    result["memory_batch_25"] = memory
    return result


def run(args: argparse.Namespace) -> int:
    import bench.common as common

    quick = args.quick
    if quick:
        common.WARMUP_S = 0.2
    trees, vocab, source = load_trees(args.trees or (25 if quick else 100))
    repeats = args.repeats or (2 if quick else 5)
    print(f"{len(trees)} trees from {source}, {repeats} repeats, lr {LR}", flush=True)
    report: dict[str, Any] = {"machine": machine_info(), "trees": source,
                              "num_trees": len(trees), "repeats": repeats}
    for name in MODELS:
        report[name] = bench_model(name, trees, vocab, repeats)
    print_report(report)
    if args.json:
        write_json(args.json, report)
        print(f"\nwrote {args.json}")
    return 0


def print_report(report: dict[str, Any]) -> None:
    rows = []
    for name in MODELS:
        r = report[name]
        for batch in (1, 10, 25):
            row = r[f"batch_{batch}"]
            rows.append([f"{name} h={r['hidden']} b={batch}",
                         fmt(row.get("recir", {}).get("trees_per_s")),
                         fmt(row.get("torch", {}).get("trees_per_s")),
                         fmt(row.get("recir_over_torch"), 2)])
    print_table("training throughput, trees/s (forward + backward + SGD), 1 thread",
                ["model", "recir", "torch", "recir/torch"], rows)
    mem = []
    for name in MODELS:
        m = report[name]["memory_batch_25"]
        rec = m.get("recir", {})
        mem.append([name, fmt(rec.get("measured_kb"), 0), fmt(rec.get("ideal_kb"), 0),
                    fmt(rec.get("measured_over_ideal"), 2), fmt(rec.get("peak_tape_kb"), 0),
                    fmt(m.get("torch", {}).get("peak_kb"), 0)])
    print_table("peak memory of one batch of 25 (KiB): recir = params + grads + RSS growth; "
                "ideal = params + grads + largest tape; torch = RSS growth",
                ["model", "recir", "ideal", "recir/ideal", "tape", "torch"],
                mem)
