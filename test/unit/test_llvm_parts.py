"""A module compiled in parts at once (`llvm_split`, `llvm_workers`): the
parts' code computes what the whole module's does, and a child that fails
leaves its part to this process."""

import ctypes
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import recir
from recir.backend import llvm_workers
from recir.backend.engine import Engine, compile_object
from recir.backend.llvm_split import split_module
from recir.diagnostics import RecirError
from recir.models import tree_lstm

# @big_b (moved: it alone uses @counter and @b_only) calls itself and the
# helper both use; @big_a (the largest, kept) calls @big_b
MODULE = """; ModuleID = ""
target triple = "x86_64-unknown-linux-gnu"
target datalayout = ""

@"counter" = internal global i32 0
define internal i32 @"helper"(i32 %".1")
{
entry:
  %".2" = mul i32 %".1", 3
  ret i32 %".2"
}

define internal i32 @"b_only"(i32 %".1")
{
entry:
  %".2" = load i32, ptr @"counter"
  %".3" = add i32 %".2", %".1"
  store i32 %".3", ptr @"counter"
  ret i32 %".3"
}

define internal i32 @"big_b"(i32 %".1")
{
entry:
  %".2" = icmp sle i32 %".1", 0
  br i1 %".2", label %"done", label %"more"
more:
  %".3" = sub i32 %".1", 1
  %".4" = call i32 @"big_b"(i32 %".3")
  %".5" = call i32 @"helper"(i32 %".1")
  %".6" = call i32 @"b_only"(i32 %".5")
  %".7" = add i32 %".4", %".6"
  ret i32 %".7"
done:
  ret i32 0
}

define internal i32 @"big_a"(i32 %".1")
{
entry:
  %".2" = call i32 @"helper"(i32 %".1")
  %".3" = call i32 @"big_b"(i32 %".2")
  %".4" = add i32 %".3", 1
  %".5" = mul i32 %".4", 2
  %".6" = sub i32 %".5", 1
  %".7" = xor i32 %".6", 5
  %".8" = add i32 %".7", %".1"
  %".9" = mul i32 %".8", 7
  %".10" = add i32 %".9", 11
  %".11" = mul i32 %".10", 3
  %".12" = sub i32 %".11", %".2"
  %".13" = xor i32 %".12", 9
  ret i32 %".13"
}

define i32 @"entry"(i32 %".1")
{
entry:
  %".2" = call i32 @"big_a"(i32 %".1")
  ret i32 %".2"
}
"""


def run(engine: Engine, n: int) -> int:
    return ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)(engine.address("entry"))(n)


def test_a_large_function_and_what_only_it_uses_move_to_a_part():
    parts, exports = split_module(MODULE, "k1", least=10)
    assert exports == ["big_b.k1"] and len(parts) == 2
    rest, part = parts
    for name in ("big_b", "b_only", "counter"):
        assert f'@"{name}" =' not in rest and f'define internal i32 @"{name}"' not in rest
    assert '@"counter" = internal global' in part and 'define internal i32 @"helper"' in part
    assert 'declare i32 @"big_b.k1"' in rest and 'call i32 @"big_b.k1"' in rest
    whole = Engine(compile_object(MODULE))
    split = Engine(compile_object(part), compile_object(rest), exports=exports)
    for n in (0, 1, 4):  # @counter carries over calls: one instance in each engine
        assert run(split, n) == run(whole, n)


def test_nothing_moves_below_the_size_or_where_a_part_would_reach_the_rest():
    assert split_module(MODULE, "k2") == ([MODULE], [])  # below PART_LINES
    shared = MODULE.replace('%".6" = call i32 @"b_only"', '%".6" = call i32 @"big_a"')
    assert split_module(shared, "k3", least=10) == ([shared], [])  # @big_b calls the rest
    tagged = MODULE + "!0 = !{}\n"
    assert split_module(tagged, "k4", least=10) == ([tagged], [])


@pytest.mark.parametrize(("child", "here_too"), [
    (None, False), ("import sys; sys.exit(3)", True),
    ("import sys; sys.stdout.write('not an object')", True)])
def test_a_child_compiles_its_part_and_one_that_fails_leaves_it_here(monkeypatch, child,
                                                                     here_too):
    monkeypatch.setattr(llvm_workers, "machine", lambda: SimpleNamespace(cores=2))
    if child is not None:
        monkeypatch.setattr(llvm_workers, "CHILD", child)
    here: list[str] = []

    def compile_here(text: str) -> bytes:
        here.append(text)
        return compile_object(text)

    parts, exports = split_module(MODULE, "k5", least=10)
    objects = llvm_workers.compile_parts(parts, compile_here)
    assert here == (parts if here_too else parts[:1])
    assert run(Engine(objects[1], objects[0], exports=exports), 2) == run(
        Engine(compile_object(MODULE)), 2)


def test_a_child_that_crashes_is_an_error_not_a_compile_here(monkeypatch):
    monkeypatch.setattr(llvm_workers, "machine", lambda: SimpleNamespace(cores=2))
    monkeypatch.setattr(llvm_workers, "CHILD", "import os, signal\n"
                        "os.kill(os.getpid(), signal.SIGSEGV)")
    here: list[str] = []
    parts, _ = split_module(MODULE, "k7", least=10)
    with pytest.raises(RecirError, match="LLVM crashed compiling a module .SIGSEGV"):
        llvm_workers.compile_parts(parts, lambda text: here.append(text) or compile_object(text))
    assert here == parts[:1]


def test_a_gradient_compiled_in_parts_matches_the_interpreter(tmp_path):
    params = tree_lstm.init_params(np.random.default_rng(2), hidden=8, embed=8, vocab=20)
    model = tree_lstm.trace_model(params)
    from recir.data import make_tree

    tree = make_tree("balanced", 8, np.random.default_rng(3), vocab_size=20)
    args = (tree.left, tree.right, tree.word, tree.label % 5, tree.root)
    (_, loss), grads = recir.value_and_grad(model, cache_dir=tmp_path, threads=2).wait()(*args)
    (meta_file,) = tmp_path.glob("*.json")
    assert len(json.loads(meta_file.read_text())["meta"]["parts"]) == 2
    (_, want), wanted = recir.value_and_grad(model, engine="interpret")(*args)
    assert loss == pytest.approx(want, rel=1e-5)
    for name, value in wanted.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-4, atol=1e-6)


def test_one_core_compiles_every_part_here(monkeypatch):
    monkeypatch.setattr(llvm_workers, "machine", lambda: SimpleNamespace(cores=1))
    monkeypatch.setattr(llvm_workers, "Child", None)  # (started: a TypeError)
    parts, _ = split_module(MODULE, "k6", least=10)
    objects = llvm_workers.compile_parts(parts, compile_object)
    assert run(Engine(objects[1], objects[0], exports=["big_b.k6"]), 3) == run(
        Engine(compile_object(MODULE)), 3)


def test_a_child_that_hangs_is_killed_and_its_part_compiled_here(monkeypatch):
    """A child that never answers (stuck, or not compiling at all) held the
    compile forever: after `CHILD_SECONDS` it is killed and the part is
    compiled here."""
    import time

    monkeypatch.setattr(llvm_workers, "machine", lambda: SimpleNamespace(cores=2))
    monkeypatch.setattr(llvm_workers, "CHILD", "import time; time.sleep(120)")
    monkeypatch.setattr(llvm_workers, "CHILD_SECONDS", 1.0)
    started: list = []
    real = llvm_workers.Child

    def child(*args):
        started.append(real(*args))
        return started[-1]

    monkeypatch.setattr(llvm_workers, "Child", child)
    here: list[str] = []
    parts, exports = split_module(MODULE, "k8", least=10)
    start = time.monotonic()
    objects = llvm_workers.compile_parts(parts, lambda text: here.append(text) or
                                         compile_object(text))
    assert time.monotonic() - start < 60
    assert here == parts and len(started) == 1
    assert started[0].process.poll() is not None  # killed, not left running
    assert run(Engine(objects[1], objects[0], exports=exports), 2) == run(
        Engine(compile_object(MODULE)), 2)


def executable(folder, name: str) -> str:
    """A program named `name` that records that it ran."""
    path = folder / name
    path.write_text(f"#!/bin/sh\ntouch '{folder}/{name} ran'\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(("name", "python"), [
    ("python", True), ("python3.12", True), ("pypy3", True),
    ("blender", False), ("uwsgi", False)])
def test_a_child_starts_only_where_the_executable_is_a_python(tmp_path, monkeypatch, name,
                                                              python):
    """An application embedding Python (its `sys.executable` is itself) was
    started as the child, given the child's arguments: here a program that
    only records that it ran stands for either."""
    monkeypatch.setattr(llvm_workers, "machine", lambda: SimpleNamespace(cores=2))
    monkeypatch.setattr(sys, "executable", executable(tmp_path, name))
    here: list[str] = []
    parts, _ = split_module(MODULE, "k9", least=10)
    llvm_workers.compile_parts(parts, lambda text: here.append(text) or compile_object(text))
    assert here == parts  # (the stand-in gives no object)
    assert (tmp_path / f"{name} ran").exists() == python


@pytest.mark.parametrize("path", ["", "missing/python3"])
def test_no_child_starts_without_an_executable(tmp_path, monkeypatch, path):
    monkeypatch.setattr(llvm_workers, "machine", lambda: SimpleNamespace(cores=2))
    monkeypatch.setattr(sys, "executable", str(tmp_path / path) if path else "")
    monkeypatch.setattr(llvm_workers, "Child", None)  # (started: a TypeError)
    parts, _ = split_module(MODULE, "k10", least=10)
    assert len(llvm_workers.compile_parts(parts, compile_object)) == 2
