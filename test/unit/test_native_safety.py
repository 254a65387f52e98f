"""Native calls neither crash the process nor run forever: temporaries too big
for a stack frame, recursion deeper than the stack, Ctrl-C, `timeout=`,
`max_depth=`, and cycles in tree inputs (interpreter and native alike).
Cases that would crash or hang if broken run in a subprocess with a timeout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import recir
from recir.context import make_context
from recir.diagnostics import RecirError
from recir.interpreter import run_function
from recir.models import tree_rnn
from recir.parsing import parse_module

N = 3_000_000  # 12 MB per temporary: more than a thread's whole default stack
LARGE = f"""
func.func @large(%x: tensor<{N}xf32>, %s: f32) -> (tensor<{N}xf32>, f32) {{
  %f = tmath.fill %s : f32 -> tensor<{N}xf32>
  %a = tmath.add %x, %f : tensor<{N}xf32>
  %b = tmath.mul %a, %x : tensor<{N}xf32>
  %c = tmath.tanh %b : tensor<{N}xf32>
  %t = tmath.sum %c : tensor<{N}xf32> -> f32
  func.return %c, %t : tensor<{N}xf32>, f32
}}
"""

def frame_hog(name: str, size: int) -> str:
    """Endless recursion whose frames hold `size`-float buffers (never read)."""
    return f"""
func.func @{name}(%k: i32, %x: tensor<{size}xf32>) -> f32 {{
  %one = arith.constant 1 : i32
  %km = arith.subi %k, %one : i32
  %r = invoke.invoke @{name}(%km, %x) : (i32, tensor<{size}xf32>) -> f32
  %big = arith.constant 2000000000 : i32
  %never = arith.cmpi sgt, %k, %big : i32
  %v = scf.if %never -> (f32) {{
    %t = tmath.add %x, %x : tensor<{size}xf32>
    %u = tmath.mul %t, %x : tensor<{size}xf32>
    %w = tmath.sum %u : tensor<{size}xf32> -> f32
    scf.yield %w : f32
  }} else {{
    scf.yield %r : f32
  }}
  func.return %v : f32
}}
"""


# no base case: @down's is a tail call, @count's adds after it, @ping and
# @pong call each other, @pair runs two @spin as tasks (with 2 threads);
# @deep keeps 32 KB buffers on its frame, @hog an 80 KB one on the heap (in
# a branch never taken, so the memory they run through stays untouched)
ENDLESS = {  # one module each: a compile is of the whole module
    "count": """
func.func @count(%k: i32) -> i32 {
  %one = arith.constant 1 : i32
  %km = arith.subi %k, %one : i32
  %r = invoke.invoke @count(%km) : (i32) -> i32
  %s = arith.addi %r, %one : i32
  func.return %s : i32
}
""",
    "down": """
func.func @down(%k: i32) -> i32 {
  %one = arith.constant 1 : i32
  %km = arith.subi %k, %one : i32
  %r = invoke.invoke @down(%km) : (i32) -> i32
  func.return %r : i32
}
""",
    "ping": """
func.func private @pong(%k: i32) -> i32 {
  %one = arith.constant 1 : i32
  %kp = arith.addi %k, %one : i32
  %r = invoke.invoke @ping(%kp) : (i32) -> i32
  func.return %r : i32
}
func.func @ping(%k: i32) -> i32 {
  %one = arith.constant 1 : i32
  %km = arith.subi %k, %one : i32
  %r = invoke.invoke @pong(%km) : (i32) -> i32
  func.return %r : i32
}
""",
    "pair": """
func.func @pair(%k: i32) -> i32 {
  invoke.subgraph @spin(%j: i32) -> i32 {
    %one = arith.constant 1 : i32
    %jm = arith.subi %j, %one : i32
    %r = invoke.invoke @spin(%jm) : (i32) -> i32
    invoke.return %r : i32
  }
  %a = invoke.invoke @spin(%k) : (i32) -> i32
  %b = invoke.invoke @spin(%k) : (i32) -> i32
  %s = arith.addi %a, %b : i32
  func.return %s : i32
}
""",
    "deep": frame_hog("deep", 8000),
    "hog": frame_hog("hog", 20000),
}

# Runs in a subprocess; prints one JSON object of outcomes.
SCRIPT = """
import json, os, signal, sys, threading, time
import numpy as np
import recir
from recir.backend import interrupts
from recir.context import make_context
from recir.parsing import parse_module

# Python's own Ctrl-C handler, also where this process inherited SIGINT
# ignored (a job started in the background by a non-interactive shell):
# native calls are stopped only over that handler
signal.signal(signal.SIGINT, signal.default_int_handler)
sources = json.loads(sys.stdin.read())
found = {}

def module(name):
    return parse_module(make_context(), sources[name])

def outcome(call):
    print("calling", len(found), file=sys.stderr, flush=True)  # where a hang was
    start = time.monotonic()
    try:
        value = call()
        return ["value", repr(value), time.monotonic() - start]
    except BaseException as e:
        return [type(e).__name__, str(e), time.monotonic() - start]

def interrupt_once_running(thread):
    # SIGINT 0.1 s after `thread`'s call began (a loaded host may take longer
    # than that to begin it; one sent before would be CPython's alone)
    def send():
        while thread not in interrupts.RUNNING:
            time.sleep(0.001)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=send, daemon=True).start()

compiled = {}
for name in ("count", "down", "ping", "pair"):
    threads = 2 if name == "pair" else 1
    f = compiled[name] = recir.compile(module(name), name, threads=threads)
    interrupt_once_running(threading.get_ident())
    found[name + " sigint"] = outcome(lambda: f(5))
    found[name + " timeout"] = outcome(lambda: f(5, timeout=0.1))
found["after"] = outcome(lambda: f(5, timeout=0.05))  # a stale flag would interrupt

# Ctrl-C after a team call began but before its team set its contexts up
# (which clears a stop): the watcher stops it again
import recir.backend.runtime as runtime
team_start = runtime.run_team

def late_team(*args):
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the watcher stops the call now
    except KeyboardInterrupt:  # CPython's own, raised here: not the call's
        time.sleep(0.05)
    return team_start(*args)

runtime.run_team = late_team
found["late"] = outcome(lambda: compiled["pair"](5))
runtime.run_team = team_start
f = recir.compile(module("count"), "count", threads=1, max_depth=1000)
found["max_depth"] = outcome(lambda: f(5))
# a deadline further off than the watchdog can wait at once (its wait
# raised in its thread, and later calls' timeouts went unserved)
from recir.backend.watchdog import WATCHDOG
far = WATCHDOG.watch(1e10)
time.sleep(0.1)  # (the watchdog waits on it now)
found["after far"] = outcome(lambda: compiled["count"](5, timeout=0.05))
WATCHDOG.finish(far)
f = recir.compile(module("deep"), "deep", threads=1)
found["deep"] = outcome(lambda: f(3, np.ones(8000, np.float32)))
f = recir.compile(module("hog"), "hog", threads=1)
found["hog"] = outcome(lambda: f(3, np.ones(20000, np.float32)))

# a call on another thread stops too; the main thread gets its own
# KeyboardInterrupt while it waits (CPython's handler is still called)
f = compiled["count"]
other = {}
worker = threading.Thread(target=lambda: other.update(worker=outcome(lambda: f(5))),
                          daemon=True)  # (one never stopped must not keep the process)
worker.start()
while worker.ident not in interrupts.RUNNING:
    time.sleep(0.001)
try:
    os.kill(os.getpid(), signal.SIGINT)
    worker.join()
except KeyboardInterrupt:
    other["main"] = "KeyboardInterrupt"
    worker.join(5)
found["thread"] = other
found["handler"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler

# a Ctrl-C CPython raises while plain Python runs, caught, and a call made at
# once (before the watcher has read the Ctrl-C): not the call's to stop
kinds = []
for _ in range(5):
    try:
        signal.raise_signal(signal.SIGINT)
        time.sleep(1)
    except KeyboardInterrupt:
        pass
    kinds.append(outcome(lambda: compiled["count"](5, timeout=0.05))[0])
found["caught before"] = kinds
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("objects")


@pytest.fixture(scope="module")
def endless(cache_dir):
    env = dict(os.environ, RECIR_CACHE_DIR=str(cache_dir))
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)],
                              input=json.dumps(ENDLESS), capture_output=True, text=True,
                              timeout=120, env=env)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"the calls did not stop; their progress: {hung.stderr!r}")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("fuse", [True, False])
def test_large_temporaries_run_natively(fuse, cache_dir):
    module = parse_module(make_context(), LARGE)
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    native = recir.compile(module, "large", cache_dir=cache_dir, fuse=fuse, threads=1)
    values, total = native(x, 0.5)
    expected = np.tanh((x + np.float32(0.5)) * x)
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
    assert total == pytest.approx(float(expected.sum(dtype=np.float64)), rel=1e-4)
    interpreted, _ = run_function(module, "large", [x, 0.5])
    np.testing.assert_allclose(values, interpreted, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["count", "down", "ping", "pair"])
def test_ctrl_c_stops_endless_recursion(endless, name):
    kind, _, seconds = endless[f"{name} sigint"]
    assert kind == "KeyboardInterrupt"
    assert seconds < 0.1 + 1.0  # (sent 0.1 s in)


@pytest.mark.parametrize("name", ["count", "down", "ping", "pair"])
def test_timeout_stops_endless_recursion(endless, name):
    kind, message, seconds = endless[f"{name} timeout"]
    assert kind == "RecirError", message
    assert message == f"error: native @{name} did not finish within 0.1 s (timeout)"
    assert 0.1 <= seconds < 0.1 + 1.0


def test_ctrl_c_before_a_team_starts_stops_it(endless):
    kind, _, seconds = endless["late"]
    assert kind == "KeyboardInterrupt" and seconds < 0.1 + 1.0


def test_no_stale_interrupt_after_ctrl_c(endless):
    kind, message, _ = endless["after"]
    assert kind == "RecirError" and "within 0.05 s" in message


def test_ctrl_c_stops_call_on_another_thread(endless):
    assert endless["thread"]["main"] == "KeyboardInterrupt"
    kind, _, seconds = endless["thread"]["worker"]
    assert kind == "KeyboardInterrupt" and seconds < 0.1 + 1.0
    assert endless["handler"]  # the Python-level handler is untouched


def test_a_ctrl_c_caught_before_a_call_does_not_stop_it(endless):
    """One Ctrl-C, one KeyboardInterrupt: the watcher, reading it late,
    stopped the call made right after CPython's was caught, every time."""
    assert endless["caught before"] == ["RecirError"] * 5


def test_max_depth(endless):
    kind, message, _ = endless["max_depth"]
    assert kind == "RecirError"
    # located at the recursive function (its IR text's line), as the stack's error is
    assert message == "<input>:2:1: error: recursion in @count is deeper than max_depth=1000"


def test_a_far_deadline_leaves_later_timeouts_served(endless):
    kind, message, seconds = endless["after far"]
    assert kind == "RecirError" and "within 0.05 s" in message and seconds < 0.05 + 1.0


@pytest.mark.parametrize("name", ["deep", "hog"])
def test_deep_frames_report_stack_overflow(endless, name):
    """Heap buffers count against the stack too: a runaway recursion that
    holds them ends as one that holds stack buffers does."""
    kind, message, _ = endless[name]
    assert kind == "RecirError"
    assert re.match(rf"\S+:\d+:\d+: error: recursion in @{name} is too deep for the "
                    r"native stack", message), message  # located at the function


def fib(n: int) -> int:
    return 1 if n <= 1 else fib(n - 1) + fib(n - 2)


def test_max_depth_allows_shallower_calls(cache_dir):
    with open("examples/ir/fib.mlir") as f:
        module = parse_module(make_context(), f.read())
    bounded = recir.compile(module, "fib", cache_dir=cache_dir, threads=1, max_depth=25)
    for n in (1, 10, 20, 20):  # the depth counter is back at 0 after each call
        assert bounded(n) == (fib(n),)
    shallow = recir.compile(module, "fib", cache_dir=cache_dir, threads=1, max_depth=10)
    with pytest.raises(RecirError, match="deeper than max_depth=10"):
        shallow(20)
    assert shallow(5) == run_function(module, "fib", [5])
    assert bounded(15, timeout=30.0) == (fib(15),)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(RecirError, match="max_depth must be a positive integer"):
            recir.compile(module, "fib", cache_dir=cache_dir, max_depth=bad)
    for bad in (0, -1.0, "1", True, float("inf"), float("nan")):
        with pytest.raises(RecirError, match="timeout must be a positive, finite number"):
            bounded(5, timeout=bad)


# the size of the subtree under node %i, recursing through structure
# arrays; its frame keeps a 60 KB buffer (in a branch never taken), so
# native code exhausts its stack in fewer levels than a tree model does
SUBTREE = """
func.func @subtree(%left: tensor<?xi32>, %right: tensor<?xi32>, %i: i32,
                   %x: tensor<15000xf32>) -> f32 {
  %l = tmath.extract %left[%i] : tensor<?xi32>, i32 -> i32
  %zero = arith.constant 0 : i32
  %leaf = arith.cmpi slt, %l, %zero : i32
  %n = scf.if %leaf -> (f32) {
    %one = arith.constant 1.0 : f32
    scf.yield %one : f32
  } else {
    %r = tmath.extract %right[%i] : tensor<?xi32>, i32 -> i32
    %a = invoke.invoke @subtree(%left, %right, %l, %x)
        : (tensor<?xi32>, tensor<?xi32>, i32, tensor<15000xf32>) -> f32
    %b = invoke.invoke @subtree(%left, %right, %r, %x)
        : (tensor<?xi32>, tensor<?xi32>, i32, tensor<15000xf32>) -> f32
    %big = arith.constant 2000000000 : i32
    %never = arith.cmpi sgt, %i, %big : i32
    %c = scf.if %never -> (f32) {
      %t = tmath.mul %x, %x : tensor<15000xf32>
      %w = tmath.sum %t : tensor<15000xf32> -> f32
      scf.yield %w : f32
    } else {
      %s = arith.addf %a, %b : f32
      %one = arith.constant 1.0 : f32
      %s1 = arith.addf %s, %one : f32
      scf.yield %s1 : f32
    }
    scf.yield %c : f32
  }
  func.return %n : f32
}
"""


def test_cycle_in_tree_is_an_error_in_both_engines(cache_dir):
    # node 2's right child is 1, whose left child is 2 again
    left, right = np.array([-1, 2, 0], np.int32), np.array([-1, 0, 1], np.int32)
    word, label = np.array([1, 2, 3], np.int32), np.zeros(3, np.int32)
    model = tree_rnn.trace_model(tree_rnn.init_params(np.random.default_rng(0)))
    with pytest.raises(RecirError, match=r"recursion in @node never ends: it is invoked "
                                         r"again with the same arguments \(2\)"):
        model.run(left, right, word, label, 2)
    # the gradient's synthesized invokes keep the user's line
    with pytest.raises(RecirError, match=r"tree_common\.py:\d+:\d+: error: .*@node_fwd "
                                         r"never ends"):
        recir.value_and_grad(model, engine="interpret")(left, right, word, label, 2)
    module = parse_module(make_context(), SUBTREE)
    x = np.zeros(15000, np.float32)
    with pytest.raises(RecirError, match=r"recursion in @subtree never ends"):
        run_function(module, "subtree", [left, right, 2, x])
    native = recir.compile(module, "subtree", cache_dir=cache_dir, threads=1)
    with pytest.raises(RecirError, match="recursion in @subtree is too deep"):
        native(left, right, 2, x)
    fine = np.array([-1, -1, 0], np.int32), np.array([-1, -1, 1], np.int32)
    assert native(*fine, 2, x) == run_function(module, "subtree", [*fine, 2, x]) == (3.0,)
