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
from recir.diagnostics import RecirError
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
from recir.diagnostics import RecirError
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


# A process compiling (recursive, then frontier) with `RECIR_CACHE_DIR` as it is given.
COMPILE = """
import numpy as np
import recir
from recir.diagnostics import RecirError
from recir.diagnostics import RecirError
from recir.models import tree_rnn

traced = tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0), hidden=4))
for batching in ("recursive", "frontier"):
    try:
        recir.compile(traced, batching=batching, threads=1)
    except RecirError as e:
        print(e)
"""


REFUSED = ("a file, not a folder: the object cache cannot be kept there (name a "
           "folder, or one that does not exist yet)")


@pytest.mark.parametrize("under", ["", "sub/folder"])
def test_recir_cache_dir_naming_a_file_is_refused(tmp_path, under):
    """A file in the folder's place (or above it): every store failed
    silently and each run compiled everything again, the cache its user
    set off without a word."""
    a_file = tmp_path / "a file"
    a_file.write_text("not a folder")
    named = a_file / under if under else a_file
    done = subprocess.run([sys.executable, "-c", COMPILE],
                          env={**os.environ, "RECIR_CACHE_DIR": str(named)},
                          capture_output=True, text=True, timeout=600, check=True)
    where = "is" if not under else f"is under {str(a_file)!r}, which is"
    want = f"error: RECIR_CACHE_DIR names {str(named)!r}, which {where} {REFUSED}"
    assert done.stdout.splitlines() == [want, want]
    assert a_file.read_text() == "not a folder"


def test_a_cache_dir_argument_naming_a_file_is_refused(tmp_path):
    a_file = tmp_path / "objects"
    a_file.write_text("")
    with pytest.raises(RecirError) as tuned:
        recir.tune(a_file)
    assert str(tuned.value) == f"error: cache_dir names {str(a_file)!r}, which is {REFUSED}"
    with pytest.raises(RecirError) as compiled:
        recir.compile(small_tree_rnn(), cache_dir=a_file / "x")
    assert str(compiled.value) == (f"error: cache_dir names {str(a_file / 'x')!r}, which "
                                   f"is under {str(a_file)!r}, which is {REFUSED}")


def test_a_folder_not_made_yet_under_a_folder_is_made_and_used(tmp_path):
    traced = small_tree_rnn()
    tree = make_treebank(1, seed=2)[0]
    item = (tree.left, tree.right, tree.word, tree.label, tree.root)
    h, s = recir.compile(traced, cache_dir=tmp_path / "new" / "cache")(*item)
    want_h, want_s = traced.run(*item)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
    assert s == pytest.approx(want_s, rel=1e-5)
    assert len(list((tmp_path / "new" / "cache").glob("*.o"))) >= 1  # (its object kept)
