"""The optimizers and the training loop against plain NumPy references
written from the textbook formulas: several steps with weight decay, frozen
parameters, sparse embedding rows and a scale; minibatch means over a last
partial minibatch, the seed's order, and accuracies counted one node at a time."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recir.data import Tree, make_treebank
from recir.train import SGD, Adagrad, Adam, TrainConfig, loop, train
from recir.train.metrics import softmax_rows

f32 = np.float32


def textbook(kind: str, params, grads_seq, lr, wd, scale, frozen, eps=1e-8,
             betas=(0.9, 0.999)):
    """float64 updates on each step's nonzero rows (coupled L2 weight decay)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    state: dict[str, np.ndarray] = {}
    for t, grads in enumerate(grads_seq, 1):
        for k in p:
            if k in frozen:
                continue
            g = grads[k].astype(np.float64) * scale
            r = np.flatnonzero(np.any(g != 0, axis=1)) if k == "emb" else slice(None)
            g = g[r] + wd * p[k][r]
            if kind == "sgd":
                p[k][r] -= lr * g
            elif kind == "adagrad":
                s = state.setdefault(k, np.zeros_like(p[k]))
                s[r] += g * g
                p[k][r] -= lr * g / (np.sqrt(s[r]) + eps)
            else:
                m = state.setdefault(k + "/m", np.zeros_like(p[k]))
                v = state.setdefault(k + "/v", np.zeros_like(p[k]))
                m[r] = betas[0] * m[r] + (1 - betas[0]) * g
                v[r] = betas[1] * v[r] + (1 - betas[1]) * g * g
                m_hat, v_hat = m[r] / (1 - betas[0] ** t), v[r] / (1 - betas[1] ** t)
                p[k][r] -= lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


@pytest.mark.parametrize("cls", [SGD, Adagrad, Adam])
@pytest.mark.parametrize("native", [True, False])
def test_three_steps_follow_the_textbook(cls, native) -> None:
    rng = np.random.default_rng(1)
    params = {"emb": rng.standard_normal((100, 3)).astype(f32),
              "w": rng.standard_normal((4, 6)).astype(f32),
              "b": rng.standard_normal(4).astype(f32)}
    start = {k: v.copy() for k, v in params.items()}
    grads_seq = []
    for _ in range(3):
        g = {k: rng.standard_normal(v.shape).astype(f32) for k, v in params.items()}
        g["emb"][:] = 0
        g["emb"][rng.choice(100, 7)] = rng.standard_normal((7, 3))
        grads_seq.append(g)
    lr = 0.01 if cls is Adam else 0.1
    opt = cls(params, lr=lr, weight_decay=0.05)
    opt.frozen = frozenset({"w"})
    if not native:
        opt.FUSED = None  # the NumPy step
    for g in grads_seq:
        buffers = {k: v.copy() for k, v in g.items()}
        rows = {"emb": np.flatnonzero(np.any(g["emb"] != 0, axis=1))[::-1].copy()}
        opt.step(buffers, 0.25, rows, zero=True)
        assert not any(v.any() for v in buffers.values())
    want = textbook(cls.__name__.lower(), start, grads_seq, lr, 0.05, 0.25, {"w"})
    np.testing.assert_array_equal(params["w"], start["w"])
    for k in params:
        np.testing.assert_allclose(params[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


class BagOfWords:
    """`value_and_grad`'s contract in NumPy: softmax regression on the mean
    embedding of the words under `root`, loss the root label's cross-entropy."""

    def __init__(self, vocab: int = 80, dim: int = 3):
        rng = np.random.default_rng(0)
        self.params = {"emb": (0.5 * rng.standard_normal((vocab, dim))).astype(f32),
                       "w_out": (0.5 * rng.standard_normal((5, dim))).astype(f32),
                       "b_out": np.zeros(5, f32)}

    def forward(self, left, right, word, label, root, params=None):
        p = params or self.params
        tree, stack, words = Tree(left, right, word, label), [int(root)], []
        while stack:
            i = stack.pop()
            if tree.left[i] < 0:
                words.append(int(tree.word[i]))
            else:
                stack += [int(tree.left[i]), int(tree.right[i])]
        h = p["emb"][words].mean(axis=0)
        probs = softmax_rows(p["w_out"] @ h + p["b_out"])
        return (h, f32(-np.log(probs[label[root]]))), (words, probs)

    def __call__(self, *inputs, into=None, params=None):
        p = params or self.params
        out, (words, probs) = self.forward(*inputs, params=p)
        grads = into if into is not None else {k: np.zeros_like(v) for k, v in p.items()}
        d = probs.astype(f32)
        d[inputs[3][inputs[4]]] -= 1
        grads["w_out"] += np.outer(d, out[0])
        grads["b_out"] += d
        np.add.at(grads["emb"], words, p["w_out"].T @ d / len(words))
        return out, grads

    def batch(self, batch, into=None, threads=1):
        outputs = []
        for inputs in batch:
            out, into = self(*inputs, into=into)
            outputs.append(out)
        return outputs, into


def counted(model: BagOfWords, params, trees) -> dict[str, float]:
    """Accuracies by a plain count over each node's prediction."""
    hits = dict.fromkeys(("root_fine", "root_binary", "all_fine", "all_binary"), 0)
    totals = dict.fromkeys(hits, 0)
    for t in trees:
        for i in range(t.num_nodes):
            _, (_, probs) = model.forward(t.left, t.right, t.word, t.label, i, params)
            gold = int(t.label[i])
            for where in ("root", "all") if i == t.root else ("all",):
                hits[f"{where}_fine"] += int(np.argmax(probs)) == gold
                totals[f"{where}_fine"] += 1
                if gold != 2:
                    hits[f"{where}_binary"] += (probs[3:].sum() > probs[:2].sum()) == (gold > 2)
                    totals[f"{where}_binary"] += 1
    return {k: hits[k] / max(totals[k], 1) for k in hits}


def test_loop_matches_a_plain_minibatch_loop(monkeypatch, tmp_path) -> None:
    """7 trees in minibatches of 3 (the last has 1), 3 epochs: the loss, the
    parameters, the dev accuracies, the best epoch and the metrics file."""
    model = BagOfWords()
    monkeypatch.setattr(loop.recir, "value_and_grad", lambda m, **_: m)
    monkeypatch.setattr(loop.recir, "compile",
                        lambda m, **_: lambda *inputs: m.forward(*inputs)[0])
    trees, dev = make_treebank(7, vocab_size=80, seed=3), make_treebank(9, vocab_size=80, seed=4)
    p = {k: v.copy() for k, v in model.params.items()}
    printed: list[dict] = []
    history = train(model, SGD(model.params, lr=0.7), trees, dev,
                    TrainConfig(epochs=3, batch_size=3, seed=11, progress=False,
                                all_nodes=True, metrics=tmp_path / "m.jsonl",
                                on_epoch=lambda r: printed.append(dict(r))))
    rng, best = np.random.default_rng(11), (-1.0, 0)
    for epoch, record in enumerate(history, 1):
        order, loss = rng.permutation(len(trees)), 0.0
        for first in range(0, len(trees), 3):
            picked = [trees[i] for i in order[first:first + 3]]
            grads = {k: np.zeros_like(v) for k, v in p.items()}
            for t in picked:
                out, grads = model(t.left, t.right, t.word, t.label, t.root, into=grads,
                                   params=p)
                loss += float(out[1])
            for k in p:
                p[k] -= f32(0.7) * (grads[k] / f32(len(picked)))
        want = counted(model, p, dev)
        assert record["loss"] == pytest.approx(loss / len(trees), rel=1e-6)
        assert {k: record[k] for k in want} == pytest.approx(want)
        best = max(best, (want["root_fine"], -epoch))
        assert record["best_epoch"] == -best[1]
    for k in p:
        np.testing.assert_allclose(model.params[k], p[k], rtol=1e-5, atol=1e-6)
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert lines == json.loads(json.dumps(history)) == json.loads(json.dumps(printed))


def test_the_root_is_scored_at_its_own_row_in_a_table_of_every_node():
    """`evaluate` read a table's last row as the root's: right for a `Tree`
    (post-order), wrong for a tree given root first."""
    from types import SimpleNamespace

    from recir.train import evaluate

    tree = SimpleNamespace(left=np.array([1, -1, -1]), right=np.array([2, -1, -1]),
                           word=np.array([-1, 0, 1]), label=np.array([3, 0, 1]), root=0,
                           num_nodes=3)
    table = np.full((3, 5), -5.0, np.float32)
    table[[0, 1, 2], [3, 0, 1]] = 5.0  # each node predicts its own label
    scores = evaluate(lambda trees: [table for _ in trees], [tree], all_nodes=True)
    assert scores["root_fine"] == 1.0 and scores["all_fine"] == 1.0
