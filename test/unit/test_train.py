"""Optimizers against hand-computed updates, SST metrics, the training loop,
checkpoints and the sentiment example on synthetic trees."""

from __future__ import annotations

import json

import numpy as np
import pytest

import recir
from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.models import tree_lstm
from recir.train import SGD, Adagrad, Adam, TrainConfig, evaluate, train
from recir.train.metrics import Accuracy


def test_sgd_adagrad_adam_two_steps() -> None:
    g = {"w": np.array([0.5, -1.0], np.float32)}
    sgd = {"w": np.array([1.0, 2.0], np.float32)}
    SGD(sgd, lr=0.1).step(g)
    SGD(sgd, lr=0.1).step(g, scale=0.5)
    np.testing.assert_allclose(sgd["w"], [1 - 0.05 - 0.025, 2 + 0.1 + 0.05])

    ada = {"w": np.array([1.0, 2.0], np.float32)}
    opt = Adagrad(ada, lr=0.1, eps=0.0)
    opt.step(g)
    opt.step(g)
    # step 1: 0.1 * g / |g|; step 2: 0.1 * g / sqrt(2 g^2)
    np.testing.assert_allclose(ada["w"], [1 - 0.1 - 0.1 / np.sqrt(2), 2 + 0.1 + 0.1 / np.sqrt(2)],
                               rtol=1e-6)

    adam = {"w": np.array([1.0, 2.0], np.float32)}
    opt = Adam(adam, lr=0.1, eps=0.0)
    opt.step(g)
    opt.step(g)  # constant gradient: each bias-corrected step is lr * sign(g)
    np.testing.assert_allclose(adam["w"], [1 - 0.2, 2 + 0.2], rtol=1e-6)


def test_weight_decay_and_untouched_embedding_rows() -> None:
    emb = np.ones((100, 3), np.float32)
    grad = np.zeros_like(emb)
    grad[7] = 1.0
    SGD({"emb": emb}, lr=0.5, weight_decay=0.1).step({"emb": grad})
    assert (emb[np.arange(100) != 7] == 1).all()
    np.testing.assert_allclose(emb[7], 1 - 0.5 * (1 + 0.1))


def test_accuracy_fine_and_binary() -> None:
    acc = Accuracy()
    acc.add(np.array([0.6, 0.1, 0.1, 0.1, 0.1]), 0)  # fine hit, binary hit
    acc.add(np.array([0.1, 0.1, 0.2, 0.3, 0.3]), 1)  # fine miss, binary miss
    acc.add(np.array([0.1, 0.1, 0.6, 0.1, 0.1]), 2)  # fine hit, neutral: no binary
    acc.add(np.array([0.0, 0.1, 0.3, 0.2, 0.4]), 3)  # fine miss (4), binary hit
    assert acc.as_dict("root") == {"root_fine": 0.5, "root_binary": 2 / 3}


def tiny_model(seed: int = 0):
    params = tree_lstm.init_params(np.random.default_rng(seed), hidden=8, embed=8,
                                   vocab=50, classes=5)
    params = {k: (0.3 * v).astype(np.float32) for k, v in params.items()}
    return tree_lstm.trace_model(params)


def test_training_lowers_the_loss_and_resumes(tmp_path) -> None:
    trees = make_treebank(60, vocab_size=50, seed=1)
    model = tiny_model()
    vg = recir.value_and_grad(model)
    before = sum(vg(t.left, t.right, t.word, t.label, t.root)[0][1] for t in trees)
    config = TrainConfig(epochs=3, batch_size=10, checkpoint=tmp_path / "c.npz",
                         metrics=tmp_path / "m.jsonl", progress=False)
    history = train(model, Adagrad(model.params, lr=0.1), trees, trees[:10], config)
    after = sum(vg(t.left, t.right, t.word, t.label, t.root)[0][1] for t in trees)
    assert after < 0.8 * before
    assert [json.loads(line)["epoch"] for line in open(tmp_path / "m.jsonl")] == [1, 2, 3]
    assert history[-1]["loss"] < history[0]["loss"]

    # resuming epochs 3..4 from the epoch-3 checkpoint equals training 4 epochs at once
    resumed = tiny_model()
    train(resumed, Adagrad(resumed.params, lr=0.1), trees, trees[:10],
          TrainConfig(epochs=4, batch_size=10, checkpoint=tmp_path / "c.npz", resume=True,
                      progress=False))
    straight = tiny_model()
    train(straight, Adagrad(straight.params, lr=0.1), trees, trees[:10],
          TrainConfig(epochs=4, batch_size=10, progress=False))
    for name in straight.params:
        np.testing.assert_allclose(resumed.params[name], straight.params[name], rtol=1e-5,
                                   atol=1e-7)


def test_shuffling_is_reproducible() -> None:
    trees = make_treebank(30, vocab_size=50, seed=2)
    results = []
    for _ in range(2):
        model = tiny_model()
        train(model, SGD(model.params, lr=0.1), trees, trees[:5],
              TrainConfig(epochs=1, batch_size=4, seed=5, progress=False))
        results.append(model.params["u"].copy())
    np.testing.assert_array_equal(*results)


def test_evaluate_all_nodes_scores_every_node() -> None:
    model = tiny_model()
    trees = make_treebank(4, vocab_size=50, seed=3)
    scores = evaluate(recir.compile(model), model.params, trees, all_nodes=True)
    assert set(scores) == {"root_fine", "root_binary", "all_fine", "all_binary"}
    assert all(0 <= v <= 1 for v in scores.values())


def test_sentiment_example_runs(tmp_path, capsys) -> None:
    from recir.examples import sentiment

    empty = tmp_path / "no-sst"
    empty.mkdir()
    assert sentiment.main(["--data", str(empty), "--epochs", "1", "--max-train", "100",
                           "--hidden", "8", "--embed", "8", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "synthetic treebank" in out and "dev root binary accuracy" in out


def test_bad_engine_is_an_error() -> None:
    with pytest.raises(RecirError, match="engine"):
        recir.value_and_grad(tiny_model(), engine="gpu")
