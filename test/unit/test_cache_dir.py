"""`cache_dir=`: everything compiled for a call is kept in the folder it
names and read from there. The kernels an engine loads beside a function
(the matrix products it links, the frontier schedule's numbering and height
order) went to the default folder, and a function read the costs
`recir.tune` kept in the default folder, not in its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import recir
from recir.backend import policy
from recir.data import make_treebank
from recir.models import tree_rnn

# One process compiling a frontier function into the folder it is given,
# with the default folder (`RECIR_CACHE_DIR`) elsewhere; "warm": any kernel
# it would compile is refused (so each must come from the folder given).
RUN = """
import sys
import numpy as np
import recir
from recir.backend import engine
from recir.data import make_treebank
from recir.models import tree_rnn

if sys.argv[1] == "warm":
    from recir.backend import interrupts
    interrupts.install()  # (the Ctrl-C handler's code is compiled per process, not kept)

    def refused(*args, **kwargs):
        raise SystemExit("a kernel was compiled again")
    engine.compile_object = refused
traced = tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0), hidden=4))
batch = [(t.left, t.right, t.word, t.label, t.root) for t in make_treebank(3, seed=1)]
f = recir.compile(traced, batching="frontier", threads=1, cache_dir=sys.argv[2])
for (h, s), item in zip(f.batch(batch), batch):
    want_h, want_s = traced.run(*item)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-6)
"""


def run(mode: str, folder: Path, default: Path) -> None:
    done = subprocess.run([sys.executable, "-c", RUN, mode, str(folder)],
                          env={**os.environ, "RECIR_CACHE_DIR": str(default)},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def kernels(folder: Path) -> set[str]:
    """The entries in `folder` with no metadata: kernels (a function's
    entry holds its error sites, a frontier summary its functions)."""
    return {p.stem for p in folder.glob("*.json")
            if json.loads(p.read_text())["meta"] == {}}


def test_a_fresh_process_keeps_and_finds_every_kernel_in_the_folder_given(tmp_path):
    mine = tmp_path / "mine"
    run("cold", mine, tmp_path / "default")
    assert not (tmp_path / "default").exists()  # nothing compiled went there
    assert kernels(mine)
    run("warm", mine, tmp_path / "other default")  # no kernel compiled: all found
    assert not (tmp_path / "other default").exists()


def small_tree_rnn():
    return tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0), hidden=4))


def test_kernels_made_for_one_folder_are_kept_in_the_next_one_too(tmp_path):
    """This process has the kernels' engines already (made for the first
    folder, or an earlier test's): a function compiled for another folder
    still finds them kept there."""
    traced = small_tree_rnn()
    batch = [(t.left, t.right, t.word, t.label, t.root) for t in make_treebank(2, seed=0)]
    for name in ("first", "second"):
        recir.compile(traced, batching="frontier", threads=1,
                      cache_dir=tmp_path / name).batch(batch)
    assert kernels(tmp_path / "first")
    assert kernels(tmp_path / "second") == kernels(tmp_path / "first")


@pytest.mark.parametrize("make", [recir.compile, recir.value_and_grad])
def test_a_function_reads_the_costs_tune_kept_in_its_own_folder(tmp_path, make):
    kept = policy.save_tuned(3e-6, 7e-5, 0.5, tmp_path)
    assert (kept.task_s, kept.team_s, kept.share) == (3e-6, 7e-5, 0.5)
    assert policy.costs().task_s != 3e-6  # (the default folder's: not these)
    f = make(small_tree_rnn(), cache_dir=tmp_path)
    native = getattr(f, "native", f)  # (a gradient's compiled code)
    assert (native.costs.task_s, native.costs.team_s, native.costs.share) == (3e-6, 7e-5, 0.5)


@pytest.mark.parametrize("cache_dir", ["", 123, b"folder"])
def test_a_cache_dir_that_names_no_folder_is_refused(tmp_path, monkeypatch, cache_dir):
    """'' was the working folder, which got the cache's objects and costs;
    a number was pathlib's TypeError."""
    from recir.diagnostics import RecirError

    monkeypatch.chdir(tmp_path)
    model = tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0)))
    for make in (lambda: recir.tune(cache_dir), lambda: recir.compile(model, cache_dir=cache_dir),
                 lambda: recir.compile(model, batching="frontier", cache_dir=cache_dir)):
        with pytest.raises(RecirError, match="cache_dir must name a folder"):
            make()
    assert list(tmp_path.iterdir()) == []
