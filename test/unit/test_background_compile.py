"""A compile's LLVM half on a thread of its own (`backend/background.py`)."""

import os
import threading
from pathlib import Path

import numpy as np
import pytest

import recir
from recir.backend import engine, interrupts
from recir.backend.background import Deferred
from recir.context import make_context
from recir.data import make_tree
from recir.diagnostics import RecirError
from recir.models import tree_rnn
from recir.parsing import parse_module
from recir.pipeline import UNDER_WAY, compile_module

FIB = Path(__file__).parents[2] / "examples" / "ir" / "fib.mlir"


def fib_module():
    return parse_module(make_context(), FIB.read_text(), "fib.mlir")


def gated(monkeypatch) -> tuple[threading.Event, list[str]]:
    """`compile_object` held until the event is set; the IR of each call."""
    gate, texts = threading.Event(), []
    made = engine.compile_object
    interrupts.install()  # its handler compiled first, on this thread

    def held(text, *args, **kwargs):
        texts.append(text)
        assert gate.wait(60)
        return made(text, *args, **kwargs)

    monkeypatch.setattr(engine, "compile_object", held)
    return gate, texts


def test_compile_returns_while_llvm_works_and_the_call_waits(tmp_path, monkeypatch):
    gate, texts = gated(monkeypatch)
    fib = compile_module(fib_module(), "fib", cache_dir=tmp_path)
    assert texts and not list(tmp_path.glob("*.o"))  # returned with LLVM held
    threading.Timer(0.2, gate.set).start()
    assert fib(20) == (10946,)
    assert len(list(tmp_path.glob("*.o"))) == 1 and not UNDER_WAY


def test_a_second_compile_of_the_same_key_shares_the_first(tmp_path, monkeypatch):
    gate, texts = gated(monkeypatch)
    module = fib_module()
    first = compile_module(module, "fib", cache_dir=tmp_path)
    second = compile_module(module, "fib", cache_dir=tmp_path)
    other = compile_module(module, "fib", cache_dir=tmp_path / "other")  # its own cache
    gate.set()
    assert first(15) == second(15) == other(15) == (987,)
    assert len(texts) == 2 and first.engine is second.engine is not other.engine


def test_an_llvm_failure_is_raised_by_the_first_call_and_every_wait(tmp_path, monkeypatch):
    def failing(text, *args, **kwargs):
        raise RecirError("error: LLVM rejected the module")

    monkeypatch.setattr(engine, "compile_object", failing)
    model = fib_module()
    fib = compile_module(model, "fib", cache_dir=tmp_path)
    for attempt in (lambda: fib(5), fib.wait):
        with pytest.raises(RecirError, match="LLVM rejected"):
            attempt()
    assert not list(tmp_path.glob("*.o")) and not UNDER_WAY
    monkeypatch.undo()
    assert compile_module(model, "fib", cache_dir=tmp_path)(5) == (8,)  # nothing kept


def test_a_gradient_waits_for_its_code(tmp_path, monkeypatch):
    gate, _ = gated(monkeypatch)
    params = tree_rnn.init_params(np.random.default_rng(3), hidden=3, vocab=10, classes=3)
    model = tree_rnn.trace_model(params)
    tree = make_tree("balanced", 4, np.random.default_rng(4), vocab_size=10)
    args = (tree.left, tree.right, tree.word, tree.label % 3, tree.root)
    grad = recir.value_and_grad(model, cache_dir=tmp_path, threads=1)
    threading.Timer(0.2, gate.set).start()
    (_, loss), grads = grad.wait()(*args)
    (_, want), wanted = recir.value_and_grad(model, engine="interpret")(*args)
    assert loss == pytest.approx(want, rel=1e-5)
    for name, value in wanted.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-4, atol=1e-6)


def test_a_forked_child_makes_the_value_itself():
    """The thread making it is not in a child forked meanwhile."""
    parent, gate = os.getpid(), threading.Event()

    def make() -> int:
        if os.getpid() == parent:
            assert gate.wait(60)
        return os.getpid()

    deferred = Deferred(make)
    child = os.fork()
    if child == 0:
        os._exit(0 if deferred.get() == os.getpid() else 1)
    _, status = os.waitpid(child, 0)
    gate.set()
    assert os.WEXITSTATUS(status) == 0 and deferred.get() == parent


def test_a_frontier_gradient_right_after_its_inference_shares_the_expansion(tmp_path,
                                                                            monkeypatch):
    from recir import frontier_compile
    from recir.models import tree_lstm

    started: list[str] = []
    gate, made = threading.Event(), frontier_compile.compile_apart

    def held(text, *rest, **kwargs):  # each object held until the gate opens
        started.append(text)
        compiled = made(text, *rest, **kwargs)
        return lambda: gate.wait(60) and compiled()

    monkeypatch.setattr(frontier_compile, "compile_apart", held)
    traced = tree_lstm.trace_model(tree_lstm.init_params(np.random.default_rng(2), hidden=4))
    inference = recir.compile(traced, batching="frontier", cache_dir=tmp_path)
    gradient = recir.value_and_grad(traced, batching="frontier", cache_dir=tmp_path)
    gate.set()
    expand = inference.schedule.expand.root_reference.data
    assert sum(f'@"{expand}"(' in text for text in started) == 1  # not lowered again
    tree = make_tree("balanced", 4, np.random.default_rng(4), vocab_size=20)
    args = (tree.left, tree.right, tree.word, tree.label % 5, tree.root)
    (_, loss), _ = gradient(*args)
    assert inference(*args)[1] == pytest.approx(loss, rel=1e-5)
    assert gradient.native.functions[expand] is not None and not frontier_compile.UNDER_WAY


def test_a_deferred_lets_go_of_what_made_its_value():
    import functools
    import gc
    import weakref

    class Text(str):
        pass

    text = Text("the IR")
    kept = weakref.ref(text)
    deferred = Deferred(functools.partial(len, text))
    del text
    assert deferred.get() == 6
    gc.collect()
    assert kept() is None
