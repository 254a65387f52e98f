"""Optimizers against hand-computed updates, SST metrics, the training loop,
checkpoints and the sentiment example on synthetic trees.

The loop is tested twice: against `SoftmaxRegressionDouble`, a NumPy test
double with `recir.value_and_grad`'s call contract (fast, and independent of
the compiler), and end to end on a tiny compiled TreeLSTM.
"""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

import recir
from recir.data import Tree, make_treebank
from recir.diagnostics import RecirError
from recir.models import tree_lstm
from recir.train import (
    SGD,
    Adagrad,
    Adam,
    CheckpointError,
    NodeScorer,
    TrainConfig,
    TrainConfigError,
    evaluate,
    load_checkpoint,
    loop,
    save_checkpoint,
    train,
)
from recir.train.metrics import Accuracy, softmax_rows


def test_sgd_adagrad_adam_two_steps() -> None:
    g = {"w": np.array([0.5, -1.0], np.float32)}
    sgd = {"w": np.array([1.0, 2.0], np.float32)}
    SGD(sgd, lr=0.1).step(g)
    SGD(sgd, lr=0.1).step(g, scale=0.5)
    np.testing.assert_allclose(sgd["w"], [1 - 0.05 - 0.025, 2 + 0.1 + 0.05])

    eps, gw = 0.01, np.array([0.5, -1.0])  # (an eps large enough to show)
    ada = {"w": np.array([1.0, 2.0], np.float32)}
    opt = Adagrad(ada, lr=0.1, eps=eps)
    opt.step(g)
    opt.step(g)
    # step 1: 0.1 * g / (|g| + eps); step 2: 0.1 * g / (sqrt(2 g^2) + eps)
    steps = 0.1 * gw / (abs(gw) + eps) + 0.1 * gw / (np.sqrt(2) * abs(gw) + eps)
    np.testing.assert_allclose(ada["w"], [1, 2] - steps, rtol=1e-6)

    adam = {"w": np.array([1.0, 2.0], np.float32)}
    opt = Adam(adam, lr=0.1, eps=eps)
    opt.step(g)
    opt.step(g)  # constant gradient: each bias-corrected step is lr * g / (|g| + eps)
    np.testing.assert_allclose(adam["w"], [1, 2] - 2 * 0.1 * gw / (abs(gw) + eps),
                               rtol=1e-6)


@pytest.mark.parametrize("optimizer", [SGD, Adagrad, Adam])
def test_a_gradient_of_another_shape_is_refused_before_any_update(optimizer) -> None:
    """A (1,) gradient for a (2,) parameter was broadcast (SGD, Adam): every
    entry silently took the one value."""
    params = {"b": np.array([1.0, 2.0], np.float32), "w": np.ones((2, 2), np.float32)}
    opt = optimizer(params, lr=0.1)
    for grads, shape in [({"b": np.ones(1, np.float32), "w": np.ones((2, 2), np.float32)},
                          r"\(1,\)"),
                         ({"w": np.ones((2, 2), np.float32)}, "None")]:
        with pytest.raises(ValueError, match=f"the gradient of 'b' has shape {shape}, the "
                                             r"parameter's is \(2,\)"):
            opt.step(grads)
    assert opt.steps == 0 and params["b"].tolist() == [1.0, 2.0] and (params["w"] == 1).all()


@pytest.mark.parametrize("optimizer", [SGD, Adagrad, Adam])
def test_a_read_only_parameter_is_named_before_any_update(optimizer, tmp_path) -> None:
    """A memory-mapped parameter gave NumPy's 'assignment destination is
    read-only', without its name, after the parameters before it were updated."""
    np.save(tmp_path / "w.npy", np.ones((2, 2), np.float32))
    params = {"b": np.array([1.0, 2.0], np.float32),
              "w": np.load(tmp_path / "w.npy", mmap_mode="r")}
    opt = optimizer(params, lr=0.1)
    grads = {"b": np.ones(2, np.float32), "w": np.ones((2, 2), np.float32)}
    with pytest.raises(ValueError, match=r"^parameter 'w' is read-only \(a memory map "):
        opt.step(grads)
    assert opt.steps == 0 and params["b"].tolist() == [1.0, 2.0]
    opt.frozen = frozenset({"w"})  # a frozen parameter is never written
    opt.step(grads)
    assert params["b"].tolist() != [1.0, 2.0] and (params["w"] == 1).all()


@pytest.mark.parametrize("optimizer", [SGD, Adagrad, Adam])
@pytest.mark.parametrize(("rates", "message"), [
    ({"lr": float("nan")}, "learning rate .* got nan"),
    ({"lr": -0.1}, "learning rate .* got -0.1"),
    ({"lr": "0.1"}, "learning rate .* got '0.1'"),  # (a ctypes error at the first step)
    ({"lr": True}, "learning rate .* got True"),
    ({"lr": 0.1, "weight_decay": -1e-4}, "weight decay .* got -0.0001"),
    ({"lr": 0.1, "weight_decay": float("inf")}, "weight decay .* got inf"),
])
def test_an_optimizer_used_alone_refuses_bad_rates(optimizer, rates, message) -> None:
    """Outside `train`, a NaN or negative rate stepped silently."""
    with pytest.raises(TrainConfigError, match=f"^the {message}$"):
        optimizer({"w": np.ones(2, np.float32)}, **rates)


@pytest.mark.parametrize(("optimizer", "options", "message"), [
    (Adagrad, {"eps": 0.0}, "eps must be a number above 0, within float32's range, got 0.0"),
    (Adagrad, {"eps": -1e-8}, "eps .* got -1e-08"),
    (Adam, {"eps": float("inf")}, "eps .* got inf"),
    (Adam, {"eps": "1e-8"}, "eps .* got '1e-8'"),
    (Adam, {"betas": (0.9, 1.0)}, r"betas must be two numbers in \[0, 1\), got \(0.9, 1.0\)"),
    (Adam, {"betas": (-0.1, 0.999)}, r"betas .* got \(-0.1, 0.999\)"),
    (Adam, {"betas": (0.9,)}, r"betas .* got \(0.9,\)"),
])
def test_an_optimizer_used_alone_refuses_bad_eps_and_betas(optimizer, options,
                                                           message) -> None:
    """Outside `train`, eps 0 or a beta of 1 made NaN steps, and a negative
    eps stepped uphill, silently."""
    with pytest.raises(TrainConfigError, match=f"^the optimizer's {message}$"):
        optimizer({"w": np.ones(2, np.float32)}, lr=0.1, **options)


def test_train_checks_eps_and_betas_as_set_since() -> None:
    opt = Adam({"w": np.ones(2, np.float32)})
    opt.betas = (0.9, 1.0)
    with pytest.raises(TrainConfigError, match=r"^the optimizer's betas .* got \(0.9, 1.0\)$"):
        loop.check_rates(TrainConfig(), opt)
    opt.betas, opt.eps = (0.9, 0.999), 0
    with pytest.raises(TrainConfigError, match="^the optimizer's eps .* got 0$"):
        loop.check_rates(TrainConfig(), opt)


def test_weight_decay_and_untouched_embedding_rows() -> None:
    emb = np.ones((100, 3), np.float32)
    grad = np.zeros_like(emb)
    grad[7] = 1.0
    SGD({"emb": emb}, lr=0.5, weight_decay=0.1).step({"emb": grad})
    assert (emb[np.arange(100) != 7] == 1).all()
    np.testing.assert_allclose(emb[7], 1 - 0.5 * (1 + 0.1))


def test_accuracy_fine_and_binary() -> None:
    acc = Accuracy()
    acc.add_many(np.array([[0.6, 0.1, 0.1, 0.1, 0.1],  # fine hit, binary hit
                           [0.1, 0.1, 0.2, 0.3, 0.3],  # fine miss, binary miss
                           [0.1, 0.1, 0.6, 0.1, 0.1],  # fine hit, neutral: no binary
                           [0.0, 0.1, 0.3, 0.2, 0.4]]),  # fine miss (4), binary hit
                 np.array([0, 1, 2, 3]))
    assert acc.as_dict("root") == {"root_fine": 0.5, "root_binary": 2 / 3}


needs_grad = pytest.mark.skipif(not hasattr(recir, "value_and_grad"),
                                reason="recir.value_and_grad is not built yet")


def tiny_model(seed: int = 0):
    params = tree_lstm.init_params(np.random.default_rng(seed), hidden=8, embed=8,
                                   vocab=50, classes=5)
    params = {k: (0.3 * v).astype(np.float32) for k, v in params.items()}
    return tree_lstm.trace_model(params)


@needs_grad
def test_training_lowers_the_loss_and_resumes(tmp_path) -> None:
    trees = make_treebank(60, vocab_size=50, seed=1)
    model = tiny_model()
    vg = recir.value_and_grad(model, threads=1)  # train's own code: compiled once
    before = sum(vg(t.left, t.right, t.word, t.label, t.root)[0][1] for t in trees)
    config = TrainConfig(epochs=3, batch_size=10, checkpoint=tmp_path / "c.npz",
                         metrics=tmp_path / "m.jsonl", progress=False)
    history = train(model, Adagrad(model.params, lr=0.1), trees, trees[:10], config)
    after = sum(vg(t.left, t.right, t.word, t.label, t.root)[0][1] for t in trees)
    assert after < 0.8 * before
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]
    assert history[-1]["loss"] < history[0]["loss"]

    # resuming epochs 3..4 from the epoch-3 checkpoint equals training 4 epochs at once
    resumed = tiny_model()
    train(resumed, Adagrad(resumed.params, lr=0.1), trees, trees[:10],
          TrainConfig(epochs=4, batch_size=10, checkpoint=tmp_path / "c.npz",
                      resume=True, progress=False))
    straight = tiny_model()
    train(straight, Adagrad(straight.params, lr=0.1), trees, trees[:10],
          TrainConfig(epochs=4, batch_size=10, progress=False))
    for name in straight.params:
        np.testing.assert_allclose(resumed.params[name], straight.params[name],
                                   rtol=1e-5, atol=1e-7)


@needs_grad
def test_every_batching_trains_to_the_same_parameters() -> None:
    """The loop's minibatch gradients by the frontier's batched form, by the
    recursive code and by `auto`'s choice: the same steps (the recursive
    code is the reference; sums in another order differ in the last bits)."""
    trees = make_treebank(24, vocab_size=50, seed=7)
    trained = {}
    for batching in ("recursive", "frontier", "auto"):
        model = tiny_model()
        train(model, Adagrad(model.params, lr=0.1), trees, trees[:4],
              TrainConfig(epochs=2, batch_size=6, batching=batching, progress=False))
        trained[batching] = model.params
    start = tiny_model().params
    for batching in ("frontier", "auto"):
        for name, value in trained["recursive"].items():
            assert not np.allclose(value, start[name]), name  # it trained
            np.testing.assert_allclose(trained[batching][name], value, rtol=1e-4,
                                       atol=1e-5, err_msg=f"{batching}: {name}")
    with pytest.raises(TrainConfigError, match="batching"):
        train(tiny_model(), SGD(tiny_model().params, lr=0.1), trees, trees[:4],
              TrainConfig(batching="levels", progress=False))


@needs_grad
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
    scores = evaluate(NodeScorer(model), trees, all_nodes=True)
    assert set(scores) == {"root_fine", "root_binary", "all_fine", "all_binary"}
    assert all(0 <= v <= 1 for v in scores.values())


@needs_grad
def test_sentiment_example_runs(tmp_path, capsys) -> None:
    from recir.examples import sentiment

    empty = tmp_path / "no-sst"
    empty.mkdir()
    metrics = tmp_path / "m.jsonl"
    assert sentiment.main(["--synthetic", "--epochs", "1", "--max-train", "100",
                           "--hidden", "8", "--embed", "8", "--no-progress",
                           "--metrics", str(metrics)]) == 0
    out = capsys.readouterr().out
    assert "synthetic treebank (--synthetic)" in out
    for text in ("epoch 1/1:", "all nodes fine", "trees/s", "compile"):
        assert text in out
    assert set(json.loads(metrics.read_text())) >= {
        "root_fine", "root_binary", "all_fine", "all_binary", "trees_per_s",
        "compile_seconds"}
    for bad in (["--data", str(empty)], ["--resume"]):
        with pytest.raises(sentiment.UsageError):
            sentiment.parse_args(bad)


@needs_grad
def test_bad_engine_is_an_error() -> None:
    with pytest.raises(RecirError, match="engine"):
        recir.value_and_grad(tiny_model(), engine="gpu")


# --- the loop against a test double --------------------------------------------


def subtree_words(tree: Tree, root: int) -> np.ndarray:
    stack, words = [root], []
    while stack:
        i = stack.pop()
        if tree.left[i] < 0:
            words.append(tree.word[i])
        else:
            stack += [tree.left[i], tree.right[i]]
    return np.array(words)


class SoftmaxRegressionDouble:
    """Test double for a traced model and its `value_and_grad`: h is the mean
    embedding of the words under `root`, loss the cross-entropy of the root's
    label. Records every tree it is called on (for the shuffling tests)."""

    def __init__(self, vocab: int = 80, dim: int = 4, seed: int = 0):
        rng = np.random.default_rng(seed)
        emb = rng.uniform(-0.05, 0.05, (vocab, dim))
        w_out = 0.1 * rng.standard_normal((5, dim))
        self.params = {"emb": emb.astype(np.float32), "w_out": w_out.astype(np.float32),
                       "b_out": np.zeros(5, np.float32)}
        self.seen: list[int] = []

    def forward(self, left, right, word, label, root):
        tree = Tree(left, right, word, label)
        words = subtree_words(tree, int(root))
        h = self.params["emb"][words].mean(axis=0)
        p = softmax_rows(self.params["w_out"] @ h + self.params["b_out"])
        return (h, np.float32(-np.log(p[label[root]]))), (words, p)

    def __call__(self, *inputs, into=None):
        self.seen.append(id(inputs[2]))
        outputs, (words, p) = self.forward(*inputs)
        grads = into if into is not None else {
            k: np.zeros_like(v) for k, v in self.params.items()}
        d_logits = p.astype(np.float32)
        d_logits[inputs[3][inputs[4]]] -= 1
        grads["w_out"] += np.outer(d_logits, outputs[0])
        grads["b_out"] += d_logits
        np.add.at(grads["emb"], words, self.params["w_out"].T @ d_logits / len(words))
        return outputs, grads

    def batch(self, batch, into=None, threads=1):
        grads = into
        outputs = []
        for inputs in batch:
            out, grads = self(*inputs, into=grads)
            outputs.append(out)
        return outputs, grads


@pytest.fixture
def double(monkeypatch):
    """`recir.value_and_grad` and `recir.compile`, as the loop sees them,
    replaced by the double (the loop calls them on the model it is given)."""
    model = SoftmaxRegressionDouble()
    monkeypatch.setattr(loop.recir, "value_and_grad", lambda m, **_: m)
    monkeypatch.setattr(loop.recir, "compile",
                        lambda m, **_: lambda *inputs: m.forward(*inputs)[0])
    return model


def test_double_gradient_matches_finite_differences(double) -> None:
    tree = make_treebank(1, vocab_size=80, seed=4)[0]
    inputs = (tree.left, tree.right, tree.word, tree.label, tree.root)
    _, grads = double(*inputs)
    for name, value in double.params.items():
        index = np.unravel_index(np.argmax(np.abs(grads[name])), value.shape)
        old = value[index]
        value[index] = old + 1e-2
        plus = float(double.forward(*inputs)[0][1])
        value[index] = old - 1e-2
        minus = float(double.forward(*inputs)[0][1])
        value[index] = old
        assert grads[name][index] == pytest.approx((plus - minus) / 2e-2, rel=2e-2)


def test_loop_lowers_the_loss_of_the_double(double, tmp_path) -> None:
    trees = make_treebank(200, vocab_size=80, seed=5)
    history = train(double, Adagrad(double.params, lr=0.2), trees, trees[:50],
                    TrainConfig(epochs=4, batch_size=10, progress=False,
                                metrics=tmp_path / "m.jsonl"))
    losses = [r["loss"] for r in history]
    assert losses[-1] < 0.8 * losses[0]
    assert history[-1]["root_fine"] > history[0]["root_fine"] - 1e-9
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 4


def test_minibatch_gradients_are_averaged(double) -> None:
    tree = make_treebank(1, vocab_size=80, seed=6)[0]
    start = {k: v.copy() for k, v in double.params.items()}
    train(double, SGD(double.params, lr=0.5), [tree, tree], [],
          TrainConfig(batch_size=2, progress=False))
    twice = {k: v.copy() for k, v in double.params.items()}
    for k in double.params:
        double.params[k][...] = start[k]
    train(double, SGD(double.params, lr=0.5), [tree], [],
          TrainConfig(batch_size=1, progress=False))
    for k in double.params:
        np.testing.assert_allclose(twice[k], double.params[k], rtol=1e-6, atol=1e-8)


def visit_order(double, trees, seed: int, epochs: int = 2) -> list[int]:
    double.seen.clear()
    train(double, SGD(double.params, lr=0.0), trees, [],
          TrainConfig(epochs=epochs, batch_size=3, seed=seed, progress=False))
    index = {id(t.word): i for i, t in enumerate(trees)}
    return [index[key] for key in double.seen]


def test_shuffling_follows_the_seed(double) -> None:
    trees = make_treebank(20, vocab_size=80, seed=7)
    first = visit_order(double, trees, seed=1)
    assert first == visit_order(double, trees, seed=1)
    assert first != visit_order(double, trees, seed=2)
    assert sorted(first[:20]) == sorted(first[20:]) == list(range(20))
    assert first[:20] != first[20:]  # a new permutation every epoch


def test_checkpoint_round_trip(double, tmp_path) -> None:
    trees = make_treebank(30, vocab_size=80, seed=8)
    opt = Adam(double.params, lr=0.01)
    train(double, opt, trees, [], TrainConfig(batch_size=7, progress=False))
    rng = np.random.default_rng(3)
    rng.random(5)
    save_checkpoint(tmp_path / "c.npz", double.params, opt, 1, rng)

    fresh = SoftmaxRegressionDouble(seed=9)
    fresh_opt = Adam(fresh.params, lr=0.01)
    params_before = {k: id(v) for k, v in fresh.params.items()}
    epoch, restored = load_checkpoint(tmp_path / "c.npz", fresh.params, fresh_opt)
    assert epoch == 1
    assert fresh_opt.steps == opt.steps == 5
    assert {k: id(v) for k, v in fresh.params.items()} == params_before  # in place
    for k in double.params:
        np.testing.assert_array_equal(fresh.params[k], double.params[k])
    assert fresh_opt.state_dict().keys() == opt.state_dict().keys()
    for k, v in opt.state_dict().items():
        np.testing.assert_array_equal(fresh_opt.state_dict()[k], v)
    assert restored.random() == rng.random()


def test_resume_continues_like_an_uninterrupted_run(double, tmp_path) -> None:
    trees = make_treebank(30, vocab_size=80, seed=10)
    start = {k: v.copy() for k, v in double.params.items()}

    def run(epochs: int, **kw) -> dict[str, np.ndarray]:
        for k in double.params:
            double.params[k][...] = start[k]
        train(double, Adagrad(double.params, lr=0.1), trees, [],
              TrainConfig(epochs=epochs, batch_size=4, seed=3, progress=False, **kw))
        return {k: v.copy() for k, v in double.params.items()}

    straight = run(3)
    run(1, checkpoint=str(tmp_path / "c.npz"))  # a str as a Path (it failed to save)
    history = []
    for k in double.params:  # resume must restore params, not keep these
        double.params[k][...] = 0
    train(double, Adagrad(double.params, lr=0.1), trees, [],
          TrainConfig(epochs=3, batch_size=4, seed=3, progress=False, history=history,
                      checkpoint=str(tmp_path / "c.npz"), resume=True))
    assert [r["epoch"] for r in history] == [2, 3]
    for k in straight:
        np.testing.assert_allclose(double.params[k], straight[k], rtol=1e-6, atol=1e-8)


def checkpoint_with(path, source, members: dict[str, bytes], compress: bool = False):
    """`source`'s members with some replaced by raw `.npy` bytes."""
    import zipfile

    how = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(path, "w", how) as new:
        for name in old.namelist():
            key = name.removesuffix(".npy")
            new.writestr(name, members.get(key, old.read(name)))
    return path


def npy_bytes(shape, data: bytes = b"") -> bytes:
    import io

    import numpy.lib.format as npy

    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return out.getvalue() + data


def test_a_checkpoint_member_is_checked_before_it_is_inflated(double, tmp_path,
                                                              monkeypatch) -> None:
    """Every array of an .npz was decompressed (or allocated at the size its
    header claims) before any was checked against the model."""
    opt = SGD(double.params, lr=0.1)
    source = tmp_path / "c.npz"
    save_checkpoint(source, double.params, opt, 1, np.random.default_rng(0))
    # a header claiming 4 TiB with 16 bytes behind it: was a MemoryError
    claims = checkpoint_with(tmp_path / "claims.npz", source,
                             {"param/w_out": npy_bytes((2**40,), bytes(16))})
    with pytest.raises(CheckpointError, match=r"'param/w_out' of shape \(1099511627776,\) "
                                              r"float32 needs more than its 16 bytes"):
        load_checkpoint(claims, double.params, opt)
    # 16 MB of zeros compressed to a few KB, of another shape: refused unread
    big = checkpoint_with(tmp_path / "big.npz", source, {
        "param/emb": npy_bytes((4000, 1000), bytes(16_000_000))}, compress=True)
    assert big.stat().st_size < 100_000
    inflated = []
    read_array = np.lib.format.read_array

    def spy(f, **kwargs):
        array = read_array(f, **kwargs)
        inflated.append(array.shape)
        return array

    monkeypatch.setattr(np.lib.format, "read_array", spy)
    before = {k: v.copy() for k, v in double.params.items()}
    with pytest.raises(CheckpointError, match=r"parameter 'emb' has shape \(4000, 1000\), "
                                              r"this model's is \(80, 4\)"):
        load_checkpoint(big, double.params, opt)
    assert (4000, 1000) not in inflated
    assert all((double.params[k] == before[k]).all() for k in before)
    epoch, _ = load_checkpoint(source, double.params, opt)  # the file as written loads
    assert epoch == 1 and (80, 4) in inflated  # (read through the spy)


# --- metrics on hand-made logits ---------------------------------------------


def test_binary_accuracy_without_polar_labels_is_none() -> None:
    """Only neutral gold labels: 0 hits of 0 read as a binary accuracy of 0."""
    acc = Accuracy()
    acc.add_many(np.array([[0.1, 0.1, 0.6, 0.1, 0.1], [0.6, 0.1, 0.1, 0.1, 0.1]]),
                 np.array([2, 2]))
    assert acc.as_dict("all") == {"all_fine": 0.5, "all_binary": None}
    assert json.dumps(acc.as_dict("all")) == '{"all_fine": 0.5, "all_binary": null}'


def test_an_accuracy_with_nothing_scored_is_none_not_zero() -> None:
    """No rows, or only unknown (-1) labels: the fine accuracy read as 0 of
    1 (0.0, a model that never hits) while the binary one was None."""
    nothing = Accuracy()
    assert nothing.as_dict("root") == {"root_fine": None, "root_binary": None}
    unknown = Accuracy()
    unknown.add_many(np.array([[0.6, 0.1, 0.1, 0.1, 0.1]] * 2), np.array([-1, -1]))
    assert (unknown.fine_total, unknown.binary_total) == (0, 0)
    assert json.dumps(unknown.as_dict("all")) == '{"all_fine": null, "all_binary": null}'

    def scorer(trees):
        return [np.tile(np.float32([0, 0, 0, 0, 9]), (t.num_nodes, 1)) for t in trees]

    assert evaluate(scorer, [], all_nodes=True) == dict.fromkeys(
        ("root_fine", "root_binary", "all_fine", "all_binary"))
    tree = Tree([-1, -1, 0], [-1, -1, 1], [0, 1, -1], [4, 2, -1])  # the root unlabelled
    assert evaluate(scorer, [tree], all_nodes=True) == {
        "root_fine": None, "root_binary": None, "all_fine": 0.5, "all_binary": 1.0}


def test_training_without_a_scored_dev_set_reports_no_dev_accuracy(double) -> None:
    """No dev trees (or none with a labelled root): each epoch's dev
    accuracy read 0.0, and the test line's "dev root fine" was the picked
    epoch's index (2.000 for epoch 3)."""
    from recir.examples import sentiment

    trees = make_treebank(12, vocab_size=80, seed=3)
    unlabelled = [Tree(t.left, t.right, t.word, np.where(np.arange(t.num_nodes) == t.root,
                                                         -1, t.label)) for t in trees[:4]]
    for dev in ([], unlabelled):
        config = TrainConfig(epochs=3, batch_size=4, progress=False)
        history = train(double, SGD(double.params, lr=0.1), trees, dev, config,
                        test=trees[:5])
        assert [r["root_fine"] for r in history] == [None, None, None]
        assert [r["best_epoch"] for r in history] == [1, 2, 3]  # the latest kept
        tested = config.test_scores
        assert (tested["picked_epoch"], tested["dev_root_fine"]) == (3, None)
        assert 0 <= tested["root_fine"] <= 1
        assert sentiment.test_line(tested).startswith(
            "test (epoch 3, dev root fine n/a): root fine ")
    assert sentiment.accuracies({"root_fine": None, "root_binary": None,
                                 "all_fine": None, "all_binary": None}) == (
        "root fine n/a binary n/a, all nodes fine n/a binary n/a")


def test_binary_prediction_sums_class_probabilities() -> None:
    # argmax is class 4 (positive), but negative mass 0.6 beats positive 0.4;
    # gold labels 0 (negative) for the first two, 4 (positive) for the third
    acc = Accuracy()
    acc.add_many(np.array([[0.3, 0.3, 0.0, 0.0, 0.4], [0.0, 0.45, 0.1, 0.2, 0.25],
                           [0.0, 0.4, 0.1, 0.2, 0.3]]), np.array([0, 0, 4]))
    assert acc.binary == 3 and acc.binary_total == 3


def test_evaluate_from_logits_root_and_all_nodes() -> None:
    # one tree: leaves 0, 1 and root 2, scored by hand-made logits
    tree = Tree([-1, -1, 0], [-1, -1, 1], [0, 1, -1], [4, 2, 1])
    logits = {0: [0, 0, 0, 1, 5],   # gold 4: fine hit; binary positive, hit
              1: [0, 0, 1, 9, 0],   # gold 2: fine miss (3); neutral, no binary
              2: [3, 0, 0, 0, 4]}   # gold 1: fine miss (4); e^3 + 1 < 1 + e^4: miss

    def scorer(trees):
        return [np.array([logits[i] for i in range(t.num_nodes)], np.float32)
                for t in trees]

    assert evaluate(scorer, [tree]) == {"root_fine": 0.0, "root_binary": 0.0}
    assert evaluate(scorer, [tree], all_nodes=True) == pytest.approx(
        {"root_fine": 0.0, "root_binary": 0.0, "all_fine": 1 / 3, "all_binary": 1 / 2})


@pytest.mark.parametrize(("options", "message"), [
    ({"batch_size": 0}, "batch size must be at least 1, got 0"),
    ({"epochs": -2}, "epochs must be at least 1"),
    ({"threads": 0}, "threads must be at least 1"),
    # a bool is an Integral: `epochs=True` ran one epoch
    ({"epochs": True}, "epochs must be an integer, got True"),
    ({"batch_size": 2.0}, "batch size must be an integer, got 2.0"),
    # NumPy's errors, naming no option ('expected non-negative integer')
    ({"seed": -1}, "seed must be an integer, 0 or more, got -1"),
    ({"seed": 1.5}, "seed must be an integer, 0 or more, got 1.5"),
    ({"seed": None}, "seed .* got None"),
    ({"metrics": "missing/m.jsonl"}, "does not exist"),
    ({"checkpoint": "."}, "is a folder"),
    ({"checkpoint": 5}, "checkpoint must be a path, got 5"),
    # a Timer's: 0 and -1 ended every rank at the first step, inf killed the watchdog
    ({"collective_timeout": 0}, "collective timeout must be a number of seconds above 0"),
    ({"collective_timeout": float("inf")}, "collective timeout .* got inf"),
    ({"collective_timeout": None}, "collective timeout .* got None"),  # (no timeout at all)
])
def test_train_refuses_bad_options_before_compiling(double, monkeypatch, tmp_path,
                                                    options, message) -> None:
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled before the options were checked")

    monkeypatch.setattr(loop.recir, "value_and_grad", no_compile)
    options = {k: tmp_path / v if isinstance(v, str) else v for k, v in options.items()}
    with pytest.raises(TrainConfigError, match=message):
        train(double, SGD(double.params, lr=0.1), make_treebank(3, vocab_size=80), [],
              TrainConfig(progress=False, **options))


@pytest.mark.parametrize(("optimizer", "message"), [
    (lambda p: SGD(p, lr=float("nan")), "learning rate .* got nan"),
    (lambda p: SGD(p, lr=1e40), "learning rate .* got 1e[+]?40"),  # (a NaN loss at step 1)
    (lambda p: SGD(p, lr="0.1"), "learning rate .* got '0.1'"),  # (these were TypeErrors
    (lambda p: SGD(p, lr=None), "learning rate .* got None"),  # and a ValueError from
    (lambda p: SGD(p, lr=np.array([0.1, 0.2])), "learning rate .* got array"),  # NumPy)
    (lambda p: Adam(p, weight_decay="0"), "weight decay .* got '0'"),
    # a negative eps stepped uphill where sqrt(sum) < 1, silently; eps 0 and
    # a beta of 1 made NaN steps, reported after the epoch as a NaN gradient
    (lambda p: Adagrad(p, eps=-1.0), "optimizer's eps must be a number above 0.* got -1.0"),
    (lambda p: Adagrad(p, eps=0.0), "optimizer's eps .* got 0.0"),
    (lambda p: Adam(p, eps=float("nan")), "optimizer's eps .* got nan"),
    (lambda p: Adam(p, betas=(1.0, 0.999)), r"optimizer's betas must be two numbers in "
                                            r"\[0, 1\), got \(1.0, 0.999\)"),
    (lambda p: Adam(p, betas=(0.9, -0.1)), r"optimizer's betas .* got \(0.9, -0.1\)"),
    (lambda p: Adam(p, betas=0.9), "optimizer's betas .* got 0.9"),
])
def test_train_refuses_rates_that_are_not_float32_numbers(double, optimizer, message) -> None:
    with pytest.raises(TrainConfigError, match=f"^the {message}"):
        train(double, optimizer(double.params), [], [], TrainConfig(progress=False))


def test_counts_and_rates_may_be_numpy_numbers(double, tmp_path) -> None:
    """`epochs=np.int64(1)` read 'epochs must be at least 1, got 1'."""
    loop.check_config(TrainConfig(epochs=np.int64(2), batch_size=np.int32(4)),
                      SGD(double.params, lr=np.float32(0.1)))


def test_a_checkpoint_path_that_is_no_regular_file_is_left_alone(double, tmp_path) -> None:
    """A checkpoint is renamed over its path: given a FIFO (or /dev/null,
    as root), training put a regular file in its place."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(TrainConfigError, match="checkpoint path .*fifo is not a regular file"):
        train(double, SGD(double.params, lr=0.1), [], [],
              TrainConfig(progress=False, checkpoint=fifo))
    with pytest.raises(CheckpointError, match="fifo: cannot write: not a regular file"):
        save_checkpoint(fifo, double.params, SGD(double.params, lr=0.1), 1,
                        np.random.default_rng(0))
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_train_refuses_items_that_are_not_trees(double, monkeypatch) -> None:
    """A tuple of inputs among the trees was an AttributeError mid-epoch."""
    monkeypatch.setattr(loop.recir, "value_and_grad", lambda *a, **k: 1 / 0)  # (not reached)
    trees = make_treebank(3, vocab_size=80)
    t = trees[0]
    for train_set, dev, message in [
            ([*trees, (t.left, t.right, t.word, t.label, t.root)], [], "training tree 3 is a "
             "tuple, not a tree"),
            (trees, [None], "dev tree 0 is a NoneType, not a tree")]:
        with pytest.raises(TrainConfigError, match=message):
            train(double, SGD(double.params, lr=0.1), train_set, dev,
                  TrainConfig(progress=False))


def test_train_names_a_tree_with_a_cycle_before_compiling(double, monkeypatch) -> None:
    """A node made its own descendant passed every bounds check of the
    compiled model, which recursed round the cycle until its stack ran out
    ('recursion in @node is too deep for the native stack')."""
    monkeypatch.setattr(loop.recir, "value_and_grad", lambda *a, **k: 1 / 0)  # (not reached)
    trees = make_treebank(3, vocab_size=80)
    cycle = Tree([-1, -1, 2, 0], [-1, -1, 1, 2], [1, 2, -1, -1], [0, 0, 0, 0])
    for train_set, dev, message in [([*trees, cycle], [], "^training tree 3: node 2 is its "
                                     "own descendant: left and right make a cycle"),
                                    (trees, [cycle], "^dev tree 0: node 2 is its own")]:
        with pytest.raises(TrainConfigError, match=message):
            train(double, SGD(double.params, lr=0.1), train_set, dev,
                  TrainConfig(progress=False))


def test_train_refuses_an_empty_training_set(double) -> None:
    """No trees ran an epoch of no steps and reported a loss of 0.0."""
    for trees in ([], iter(())):
        with pytest.raises(TrainConfigError, match="^no training trees: the training set "
                                                   "is empty$"):
            train(double, SGD(double.params, lr=0.1), trees, [], TrainConfig(progress=False))
    with pytest.raises(TrainConfigError, match="^the dev trees must be a list .* got a int$"):
        train(double, SGD(double.params, lr=0.1), make_treebank(2, vocab_size=80), 5,
              TrainConfig(progress=False))


def test_trees_may_come_from_a_generator(double) -> None:
    """A generator was used up by the check of its items, then `len()` failed."""
    trees = make_treebank(6, vocab_size=80, seed=8)
    config = TrainConfig(batch_size=3, progress=False)
    listed = train(double, SGD(double.params, lr=0.0), trees, trees[:2], config,
                   test=trees[:2])
    generated = TrainConfig(batch_size=3, progress=False)
    history = train(double, SGD(double.params, lr=0.0), (t for t in trees),
                    (t for t in trees[:2]), generated, test=(t for t in trees[:2]))
    assert history[0]["loss"] > 0
    assert [r["loss"] for r in history] == [r["loss"] for r in listed]
    assert generated.test_scores["root_fine"] == config.test_scores["root_fine"]


def spoil_call(double, k: int, spoil) -> None:
    """The double's `k`-th batch call (from 1) has `spoil(outputs, grads)`
    applied to what it returns."""
    calls = 0
    plain = double.batch

    def spoiled(batch, into=None, threads=1):
        nonlocal calls
        calls += 1
        outputs, grads = plain(batch, into, threads)
        if calls == k:
            spoil(outputs, grads)
        return outputs, grads

    double.batch = spoiled


def test_a_gradient_that_is_not_finite_under_a_finite_loss_stops_the_epoch(double, tmp_path
                                                                          ) -> None:
    """NaN gradients on an epoch's last minibatch: the loss check saw finite
    losses, and the checkpoint got NaN parameters."""
    trees = make_treebank(3, vocab_size=80, seed=11)

    def nan_gradient(outputs, grads):
        grads["w_out"][0, 0] = np.nan

    spoil_call(double, 3, nan_gradient)
    checkpoint = tmp_path / "c.npz"
    with pytest.raises(RecirError, match=r"^error: parameter 'w_out' is not finite after "
                                         r"epoch 1: a step's gradient was inf or NaN"):
        train(double, SGD(double.params, lr=0.1), trees, [],
              TrainConfig(epochs=2, batch_size=1, progress=False, checkpoint=checkpoint))
    assert not checkpoint.exists()


def test_a_loss_that_is_not_finite_stops_training_before_its_step(double, tmp_path) -> None:
    """A NaN loss was trained on: NaN parameters, written to the checkpoint."""
    trees = make_treebank(3, vocab_size=80, seed=11)

    def nan_loss(outputs, grads):
        outputs[-1] = (outputs[-1][0], np.float32("nan"))
        for g in grads.values():
            g[...] = np.nan

    spoil_call(double, 5, nan_loss)
    checkpoint = tmp_path / "c.npz"
    with pytest.raises(RecirError, match=r"^error: the training loss is nan in epoch 2, "
                                         r"minibatch 2: stopped before its step"):
        train(double, SGD(double.params, lr=0.1), trees, [],
              TrainConfig(epochs=2, batch_size=1, progress=False, checkpoint=checkpoint))
    assert all(np.isfinite(v).all() for v in double.params.values())
    epoch, _ = load_checkpoint(checkpoint, SoftmaxRegressionDouble().params,
                               SGD(SoftmaxRegressionDouble().params, lr=0.1))
    assert epoch == 1


def test_an_error_in_a_minibatch_names_the_training_tree(double) -> None:
    """A bad tree's error named the op but not which of the trees it was."""
    trees = make_treebank(12, vocab_size=80, seed=12)
    trees[7].word[trees[7].word >= 0] = 79
    forward = double.forward

    def checked(left, right, word, label, root):
        if (word == 79).any():
            raise RecirError("error: 'tree.embed' op word id 79 is past the vocabulary")
        return forward(left, right, word, label, root)

    double.forward = checked
    for batch_size in (1, 5, 12):
        with pytest.raises(RecirError, match=r"^error: 'tree.embed' op word id 79 is past "
                                             r"the vocabulary \(training tree 7\)$"):
            train(double, SGD(double.params, lr=0.1), trees, [],
                  TrainConfig(batch_size=batch_size, progress=False))
