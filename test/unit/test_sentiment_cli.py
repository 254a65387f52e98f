"""The sentiment CLI in-process on tiny treebanks: options refused before any
work, malformed resume files, the --test protocol, pretrained embeddings and
`predict` from a saved model file."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recir.data import make_treebank
from recir.diagnostics import RecirError
from recir.examples import sentiment, sentiment_predict
from recir.models import tree_lstm
from recir.train import load

TINY = ["--epochs", "1", "--hidden", "8", "--no-progress", "--threads", "1"]


def ptb(tree, i: int | None = None) -> str:
    """A synthetic tree as SST text, word id k written as `wk`."""
    i = tree.root if i is None else i
    if tree.left[i] < 0:
        return f"({tree.label[i]} w{tree.word[i]})"
    return f"({tree.label[i]} {ptb(tree, tree.left[i])} {ptb(tree, tree.right[i])})"


@pytest.fixture(scope="module")
def sst_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sst")
    trees = make_treebank(90, vocab_size=30, seed=21)
    for split, part in (("train", trees[:60]), ("dev", trees[60:75]),
                        ("test", trees[75:])):
        (folder / f"{split}.txt").write_text("".join(ptb(t) + "\n" for t in part))
    return folder


@pytest.fixture(scope="module")
def trained(sst_dir, tmp_path_factory) -> dict[str, Path]:
    """One 3-epoch run with every output: checkpoint, model file, metrics."""
    out = tmp_path_factory.mktemp("run")
    paths = {k: out / f"{k}.{ext}" for k, ext in
             (("checkpoint", "npz"), ("save-model", "npz"), ("metrics", "jsonl"))}
    argv = ["--data", str(sst_dir), *TINY, "--epochs", "3", "--embed", "8", "--test"]
    for k, path in paths.items():
        argv += [f"--{k}", str(path)]
    assert sentiment.main(argv) == 0
    return paths


def error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert "data:" not in captured.out  # refused before loading or training
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(("argv", "message"), [
    (["--batch-size", "-5"], "--batch-size must be at least 1, got -5"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--max-train", "0"], "--max-train must be at least 1"),
    (["--embed", "0"], "--embed must be at least 1"),
    (["--epochs", "-2"], "--epochs must be at least 1"),
    (["--hidden", "0"], "--hidden must be at least 1"),
    (["--lr", "nan"], "--lr must be a number >= 0 within float32's range, got nan"),
    (["--lr", "1e40"], "--lr must be a number >= 0 within float32's range, got 1e+40"),
    (["--weight-decay", "-1"], "--weight-decay must be a number >= 0"),
    (["--threads", "0"], "--threads must be at least 1"),
    (["--seed", "-1"], "--seed must be 0 or more, got -1"),  # (was numpy's traceback)
    (["--data", "{empty}"], "no train, dev split there"),
    (["--metrics", "{file}/m.jsonl"], "does not exist"),
    (["--checkpoint", "{empty}"], "is a folder"),
    (["--save-model", "{fifo}"], "fifo is not a regular file"),
    (["--resume"], "--resume needs --checkpoint"),
    (["--embeddings", "{empty}/v.txt"], "no such file"),
])
def test_options_refused_before_any_work(tmp_path, capsys, argv, message) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("")
    os.mkfifo(tmp_path / "fifo")  # (renamed over, a model file took its place)
    argv = [a.format(empty=tmp_path / "empty", file=tmp_path / "file", fifo=tmp_path / "fifo")
            for a in argv]
    assert sentiment.main(["--synthetic", *TINY, *argv]) == 2
    line = error_line(capsys)
    assert line.startswith("error: ") and message in line


def test_empty_train_file(tmp_path, capsys) -> None:
    for split in ("train", "dev"):
        (tmp_path / f"{split}.txt").write_text("\n")
    assert sentiment.main(["--data", str(tmp_path), *TINY]) == 2
    assert "train.txt: no trees in the file" in capsys.readouterr().err


def test_test_split_missing_is_an_error_not_synthetic_trees(sst_dir, tmp_path, capsys,
                                                           monkeypatch) -> None:
    """--test with SST's train and dev found but no test.txt says how to get it,
    rather than training on the synthetic treebank."""
    for split in ("train", "dev"):
        (tmp_path / f"{split}.txt").write_text((sst_dir / f"{split}.txt").read_text())
    monkeypatch.setenv("RECIR_SST_DIR", str(tmp_path))
    assert sentiment.main([*TINY, "--test"]) == 2
    assert "has no test.txt" in error_line(capsys)


def rewrite(source: Path, target: Path, change) -> Path:
    with np.load(source) as data:
        arrays = {k: data[k] for k in data.files}
    change(arrays)
    np.savez(target, **arrays)
    return target


def swap_two_words(arrays) -> None:
    """The vocabulary of a run on the same words in another order: the
    embedding's rows would each be read as another word's."""
    info = json.loads(str(arrays["model"]))
    info["vocabulary"][:2] = info["vocabulary"][1::-1]
    arrays["model"] = np.array(json.dumps(info))


def drop_optimizer_state(arrays) -> None:
    for k in [k for k in arrays if k.startswith("opt/sum_sq/")]:
        del arrays[k]


@pytest.mark.parametrize(("change", "message"), [
    ("truncate", "not a readable checkpoint"),
    # a central directory entry naming a zip version zipfile lacks: its NotImplementedError
    ("zip-version", "not a readable checkpoint (truncated or not .npz: zip file version"),
    (lambda a: a.__setitem__("param/u", a["param/u"] * np.nan), "'u' holds NaN"),
    (drop_optimizer_state, "no optimizer state sum_sq of"),
    (lambda a: a.__setitem__("epoch", np.array(-3)), "epoch -3 is not a non-negative"),
    (lambda a: a.__setitem__("param/u", a["param/u"][:, :3]), "'u' has shape (40, 3)"),
    ("other-model", "a tree_lstm checkpoint, this run trains tree_rnn"),
    (swap_two_words, "the checkpoint's vocabulary is not this run's (word 0 is"),
    ("other-optimizer", "saved with adagrad, this run uses adam"),
    # each of these was a traceback, or (negative sums of squares) NaN steps
    (lambda a: a.__setitem__("opt/sum_sq/u", -1 - a["opt/sum_sq/u"]),
     "optimizer state sum_sq of 'u' holds negative values"),
    (lambda a: a.__setitem__("best_epoch", np.array("x")), "best epoch x is not a non-negative"),
    (lambda a: a.__setitem__("best_score", np.array("x")), "'best_score' x is not a finite"),
    (lambda a: a.__setitem__("rng", np.array(json.dumps(
        {"bit_generator": "PCG64", "state": {"state": -1, "inc": 1}}))),
     "the shuffling rng state is unreadable"),
])
def test_malformed_resume_files(trained, sst_dir, tmp_path, capsys, change,
                                message) -> None:
    path = tmp_path / "resume.npz"
    argv = ["--data", str(sst_dir), *TINY, "--epochs", "4", "--embed", "8"]
    if change == "truncate":
        path.write_bytes(trained["checkpoint"].read_bytes()[:3000])
    elif change == "zip-version":
        data = bytearray(trained["checkpoint"].read_bytes())
        data[data.index(b"PK\x01\x02") + 6] = 0xFF  # (the version needed to extract)
        path.write_bytes(data)
    elif change == "other-model":
        path.write_bytes(trained["checkpoint"].read_bytes())
        argv += ["--model", "tree_rnn"]
    elif change == "other-optimizer":
        path.write_bytes(trained["checkpoint"].read_bytes())
        argv += ["--optimizer", "adam"]
    else:
        rewrite(trained["checkpoint"], path, change)
    before = path.read_bytes()
    assert sentiment.main([*argv, "--checkpoint", str(path), "--resume"]) == 2
    captured = capsys.readouterr()
    assert "epoch 4/4" not in captured.out  # nothing trained
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert path.read_bytes() == before


def test_test_split_scores_the_best_dev_epoch(trained, sst_dir) -> None:
    records = [json.loads(line) for line in trained["metrics"].read_text().splitlines()]
    epochs, final = records[:-1], records[-1]
    assert [r["epoch"] for r in epochs] == [1, 2, 3]
    dev = [r["root_fine"] for r in epochs]
    picked = dev.index(max(dev)) + 1
    assert [r["best_epoch"] for r in epochs] == [
        dev.index(max(dev[:k])) + 1 for k in (1, 2, 3)]
    assert final["split"] == "test" and final["picked_epoch"] == picked
    # the model file holds that epoch's parameters: scoring test with it agrees
    from recir.data import load_sst
    from recir.train import evaluate

    model = load(trained["checkpoint"])
    assert model.epoch == picked
    vocab = model.vocabulary
    test, _ = load_sst(sst_dir / "test.txt", vocab, grow_vocab=False)
    scores = evaluate(model.scorer(), test, all_nodes=True)
    assert scores == pytest.approx({k: final[k] for k in scores})


PREDICT_INPUT = ["(3 (2 w1) (4 w7))", "((w3) ((w9) (never-seen)))", "(2 (1 w4)",
                 "", "((w5) (w6)) trailing", "((w2) (w8))"]


def reference_logits(model, tree) -> np.ndarray:
    p = model.model.params
    return np.array([p["w_out"] @ tree_lstm.reference(tree, i, p)[0] + p["b_out"]
                     for i in range(tree.num_nodes)])


def test_predict_names_the_file_and_line_of_a_malformed_line(trained, tmp_path, capsys
                                                             ) -> None:
    """Errors named a line without its file, and a byte that is not UTF-8
    stopped the whole file (standard input: read as an unknown word)."""
    path = tmp_path / "trees.txt"
    path.write_bytes(b"((w1) (w2))\n((w3) (\xff))\n(2 (1 w4)\n((w5) (w6))\n")
    assert sentiment.main(["predict", "--model-file", str(trained["save-model"]),
                           str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"{path}:2: error: byte 0xff at column 8 is not valid UTF-8",
        f"{path}:3: error: unbalanced brackets: missing ')' for column 1"]
    assert [json.loads(line)["line"] for line in captured.out.splitlines()] == [1, 4]


def test_predict_reads_a_file_that_starts_with_a_byte_order_mark(trained, tmp_path, capsys
                                                                 ) -> None:
    """A tree file saved with a BOM (Windows editors): its first line was
    refused: the mark read as an unexpected character at column 1."""
    records = []
    for mark in (b"", b"\xef\xbb\xbf"):
        path = tmp_path / "trees.txt"
        path.write_bytes(mark + b"((w1) (w2))\n((w3) (w4))\n")
        assert sentiment.main(["predict", "--model-file", str(trained["save-model"]),
                               str(path)]) == 0
        captured = capsys.readouterr()
        assert captured.err == ""
        records.append([json.loads(line) for line in captured.out.splitlines()])
    assert [r["line"] for r in records[1]] == [1, 2]
    assert records[1] == records[0]


@pytest.mark.parametrize("source", ["save-model", "checkpoint"])
def test_predict_round_trip_and_malformed_lines(trained, tmp_path, capsys, monkeypatch,
                                                source) -> None:
    from recir.data.sst import parse_tree

    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(PREDICT_INPUT) + "\n"))
    assert sentiment.main(["predict", "--model-file", str(trained[source]),
                           "--all-nodes", "-"]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "line 3: error: unbalanced brackets: missing ')' for column 1",
        "line 5: error: text after the end of the tree at column 13"]
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["line"] for r in records] == [1, 2, 6]
    model = load(trained[source])
    for record in records:
        tree = parse_tree(PREDICT_INPUT[record["line"] - 1], model.vocabulary,
                          grow=False, labelled=False)
        logits = reference_logits(model, tree)
        probs = np.exp(logits[-1] - logits[-1].max())
        np.testing.assert_allclose(record["probabilities"], probs / probs.sum(),
                                   atol=1e-5)
        assert record["label"] == int(np.argmax(logits[-1]))
        assert record["nodes"] == np.argmax(logits, axis=1).tolist()
    assert model.vocabulary["never-seen"] == 0  # read as <unk>


def test_predict_refuses_a_file_that_is_not_a_model(tmp_path, capsys) -> None:
    (tmp_path / "x.npz").write_bytes(b"not a zip")
    assert sentiment.main(["predict", "--model-file", str(tmp_path / "x.npz")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize("model", ["rntn", "tree_lstm"])
def test_sizes_beyond_memory_are_refused_before_allocating(capsys, model) -> None:
    """An RNTN of hidden 3000 asked numpy for 805 GiB (a MemoryError
    traceback); sizes just below that took the machine's memory first."""
    argv = ["--synthetic", *TINY, "--model", model, "--hidden", "100000"]
    assert sentiment.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(rf"error: a {model} of hidden 100000, .* parameters: "
                                      r"training needs about \d+ GiB, more than this "
                                      r"machine's \d+ GiB of memory", err[0]), err


MODEL_SIZES = {"hidden": 4, "vocab": 3, "classes": 5}


@pytest.mark.parametrize(("change", "message"), [
    ({"sizes": {**MODEL_SIZES, "hidden": -4}}, r"sizes .* do not describe a tree_rnn"),
    ({"sizes": {**MODEL_SIZES, "vocab": 10**13}},
     r"parameter 'emb' has shape \(3, 4\), this model's is \(10000000000000, 4\)"),
    ({"kind": "rntn", "sizes": {**MODEL_SIZES, "hidden": 10**5}},
     r"parameter 'emb' has shape \(3, 4\), this model's is \(3, 100000\)"),
    # a dimension beyond any array's: numpy's ValueError was a traceback
    ({"sizes": {**MODEL_SIZES, "hidden": 10**30}}, r"sizes .* are too large for any "
                                                   "tree_rnn"),
    ({"vocabulary": [1, 2, 3]}, "the vocabulary is not a list of words"),
    ({"best_epoch": "x"}, "best epoch x is not a non-negative integer"),
])
def test_predict_refuses_a_model_file_that_describes_another_model(
        tmp_path, capsys, change, message) -> None:
    """Checked against the description's shapes before anything is allocated
    (a hidden size of 10**5 used to make the RNTN's tensor first)."""
    from recir.data.sst import Vocabulary
    from recir.models import tree_rnn
    from recir.train import save_model
    from recir.train.model_file import describe

    params = tree_rnn.init_params(np.random.default_rng(0), **MODEL_SIZES)
    info = describe("tree_rnn", MODEL_SIZES, Vocabulary.from_words(["a", "b"]))
    extra = {"best_epoch": np.array(change.pop("best_epoch"))} if "best_epoch" in change else {}
    path = tmp_path / "m.npz"
    save_model(path, params, info | change)
    if extra:
        np.savez(path, **dict(np.load(path)), **extra, epoch=np.array(1))
    assert sentiment.main(["predict", "--model-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {path}: "), err
    assert re.search(message, err), err


def test_pretrained_frozen_embeddings(sst_dir, tmp_path, capsys) -> None:
    # 8-d like the other runs here, so the compiled code is shared (cached)
    vectors = {f"w{k}": np.arange(8, dtype=np.float32) + k for k in range(0, 30, 3)}
    vectors["W4"] = np.full(8, 0.5, np.float32)  # only by lowercase: w4 stays random
    (tmp_path / "v.txt").write_text("".join(
        f"{w} {' '.join(map(str, v))}\n" for w, v in vectors.items()))
    model_file = tmp_path / "m.npz"
    assert sentiment.main(["--data", str(sst_dir), *TINY, "--embeddings",
                           str(tmp_path / "v.txt"), "--freeze-embeddings",
                           "--save-model", str(model_file)]) == 0
    assert "embeddings: " in capsys.readouterr().out
    model = load(model_file)
    assert model.sizes["embed"] == 8  # from the file (no --embed given)
    emb = model.model.params["emb"]
    for word, vector in vectors.items():
        if word in model.vocabulary:
            np.testing.assert_array_equal(emb[model.vocabulary[word]], vector)
    assert not np.array_equal(emb[model.vocabulary["w4"]], vectors["W4"])


def test_the_memory_check_counts_the_embeddings_width(sst_dir, tmp_path, monkeypatch,
                                                      capsys) -> None:
    """--embeddings sets --embed from its file; the memory check ran before
    that and counted the default width."""
    seen: list[int | None] = []
    check = sentiment.check_memory
    monkeypatch.setattr(sentiment, "check_memory", lambda module, args, vocab: (
        seen.append(args.embed), check(module, args, vocab)))
    (tmp_path / "v.txt").write_text("w0 " + " ".join(["0.5"] * 8) + "\n")
    assert sentiment.main(["--data", str(sst_dir), *TINY, "--embeddings",
                           str(tmp_path / "v.txt")]) == 0
    assert seen == [8]


def test_fetch_when_sst_is_missing(sst_dir, tmp_path, monkeypatch, capsys) -> None:
    from recir.data.download import DownloadError

    monkeypatch.setenv("RECIR_SST_DIR", str(tmp_path))  # no SST there

    def refused(**_):
        raise DownloadError("cannot download http://127.0.0.1:1/x.zip: refused")

    monkeypatch.setattr(sentiment, "download", refused)
    monkeypatch.setattr(sentiment, "SYNTHETIC_SPLITS", (20, 10, 10))
    assert sentiment.main([*TINY, "--embed", "8", "--fetch"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("SST not downloaded (cannot download http://127.0.0.1:1/x.zip: "
                      "refused); get it with `python -m recir.data.sst fetch`; "
                      "training on the synthetic treebank")
    assert "synthetic treebank (SST not found)" in out[1]
    monkeypatch.setattr(sentiment, "download", lambda **_: sst_dir)
    assert sentiment.main([*TINY, "--embed", "8", "--fetch"]) == 0
    assert f"data: SST ({sst_dir}): 60 train" in capsys.readouterr().out


def test_each_model_gets_its_own_default_size_and_auto_batching() -> None:
    """RNTN at d = 25 (Socher et al. 2013: its tensor grows as d^3), the
    others at 150; minibatches by `auto` unless --batching says otherwise."""
    sizes = {m: sentiment.parse_args(["--model", m]) for m in ("rntn", "tree_rnn", "tree_lstm")}
    assert {m: a.hidden for m, a in sizes.items()} == {"rntn": 25, "tree_rnn": 150,
                                                       "tree_lstm": 150}
    assert all(a.batching == "auto" for a in sizes.values())
    assert sentiment.parse_args(["--model", "rntn", "--hidden", "8",
                                 "--batching", "recursive"]).hidden == 8


def test_an_error_while_training_is_one_line(monkeypatch, capsys) -> None:
    """A RecirError from the training loop (a NaN loss, a bad tree) was a traceback."""
    message = ("error: the training loss is nan in epoch 1, minibatch 2: stopped before "
               "its step")

    def diverges(*args, **kwargs):
        raise RecirError(message)

    monkeypatch.setattr(sentiment, "train", diverges)
    assert sentiment.main(["--synthetic", *TINY, "--max-train", "10"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]


def test_an_error_while_labelling_is_one_line(trained, monkeypatch, capsys) -> None:
    """A RecirError from the scorer (its compile, a call out of memory) was a
    traceback."""
    message = "error: a frontier function ran out of memory"

    def fails(*args, **kwargs):
        raise RecirError(message)

    monkeypatch.setattr(sentiment_predict.LoadedModel, "predict", fails)
    monkeypatch.setattr("sys.stdin", io.StringIO("((w1) (w2))\n"))
    assert sentiment.main(["predict", "--model-file", str(trained["save-model"])]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]


def test_a_reader_that_leaves_early_is_no_error(trained, sst_dir, tmp_path) -> None:
    """`predict | head -1` said "cannot read '<input>': Broken pipe" (its
    output's reader had left, not its input), and training piped so gave a
    traceback."""
    trees = tmp_path / "many.txt"
    trees.write_text((sst_dir / "dev.txt").read_text() * 200)  # (past a pipe's buffer)
    for argv in (["predict", "--model-file", str(trained["save-model"]), str(trees)],
                 ["--data", str(sst_dir), *TINY, "--embed", "8"]):
        run = subprocess.Popen([sys.executable, "-m", "recir.examples.sentiment", *argv],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert run.stdout.readline()
        run.stdout.close()  # (as `head -1` exits)
        assert run.wait(timeout=300) == 1 and run.stderr.read() == b"", argv


def test_predict_with_no_standard_input_says_so(trained, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", None)  # (started with it closed: a TypeError)
    assert sentiment.main(["predict", "--model-file", str(trained["save-model"])]) == 2
    assert capsys.readouterr().err == ("error: no standard input to read trees from: name "
                                       "a file\n")


@pytest.mark.parametrize("model", ["tree_rnn", "rntn"])
def test_embeddings_size_the_state_of_a_model_that_embeds_at_its_state(
        model, sst_dir, tmp_path, capsys) -> None:
    """With no --hidden, the default (150, RNTN's 25) was taken for the
    user's, refused against the file's width after reading all of it."""
    (tmp_path / "v.txt").write_text("".join(f"w{k} {' '.join(['0.5'] * 8)}\n"
                                            for k in range(0, 30, 3)))
    model_file = tmp_path / "m.npz"
    argv = ["--data", str(sst_dir), "--epochs", "1", "--no-progress", "--threads", "1",
            "--model", model, "--embeddings", str(tmp_path / "v.txt")]
    assert sentiment.main([*argv, "--save-model", str(model_file)]) == 0
    assert f"model: {model}, hidden 8," in capsys.readouterr().out
    assert load(model_file).sizes["hidden"] == 8
    assert sentiment.main([*argv, "--hidden", "6"]) == 2  # a --hidden given still decides
    assert capsys.readouterr().err.endswith(f"has 8-d vectors but --hidden is 6 ({model} "
                                            "embeds at --hidden)\n")


def test_a_dev_set_without_polar_labels_prints_binary_n_a(tmp_path, capsys) -> None:
    """Its binary accuracy (0 of 0) was printed as 0.000 and logged as 0.0."""
    (tmp_path / "train.txt").write_text("(3 (2 a) (4 good))\n(1 (1 bad) (2 b))\n")
    (tmp_path / "dev.txt").write_text("(2 zzz)\n(2 a)\n")
    metrics = tmp_path / "m.jsonl"
    assert sentiment.main(["--data", str(tmp_path), "--hidden", "4", "--embed", "4",
                           "--metrics", str(metrics), *TINY]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("epoch"))
    assert re.fullmatch(r"epoch 1/1: loss [0-9.]+, \d+ trees/s \([0-9.]+ s\); dev root "
                        r"fine 1.000 binary n/a, all nodes fine 1.000 binary n/a "
                        r"\([0-9.]+ s\)", line), line
    record = json.loads(metrics.read_text())
    assert (record["root_fine"], record["root_binary"]) == (1.0, None)
    assert sentiment.accuracies({"root_fine": 0.25, "root_binary": None, "all_fine": 0.5,
                                 "all_binary": 0.75}) == (
        "root fine 0.250 binary n/a, all nodes fine 0.500 binary 0.750")
